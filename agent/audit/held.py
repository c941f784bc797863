"""What Placement holds on each provider of a node, as the audit last read it.

The half of the audit's record that is a copy of Placement, not a judgement
about consumers: ``{provider: ProviderAllocations}`` (the allocations and the
provider generation of the read; None forces a read). The reads
(:mod:`agent.audit.audit_read`) and the audit's own writes change it only
through the methods of :class:`HeldAllocations`.
"""

from __future__ import annotations

from collections.abc import Iterable

from agent.model.allocations import ProviderAllocations


class HeldAllocations(dict[str, ProviderAllocations]):
    """``{provider: ProviderAllocations}`` as last read; changed only by its methods."""

    def read(self, rp: str, allocations: ProviderAllocations | None) -> None:
        """``rp``'s allocations as read, derived or written (None: not the node's any more)."""
        if allocations is None:
            self.pop(rp, None)
        else:
            self[rp] = allocations

    def read_again(self, providers: Iterable[str]) -> None:
        """The next audit reads ``providers``' allocations (their generation dropped)."""
        for rp in set(providers) & set(self):
            self[rp] = ProviderAllocations(None, self[rp].consumers)
