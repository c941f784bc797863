"""The cycle: discovery to writes, the audit of allocations, start-up reshape."""
