"""The cycle: discovery to writes (cycle), claims, the audit of allocations (audit_read
reads, audit writes), gone hardware kept (retained), sharing providers, outcomes,
start-up reshape."""
