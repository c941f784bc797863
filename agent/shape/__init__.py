"""Host records to providers and allocations: layout, planning, node traits."""
