"""Plain data of the field: resources, names, provider tree, diff, allocations, ownership."""
