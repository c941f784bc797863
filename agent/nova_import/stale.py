"""Allocations a stale Placement still holds for consumers nova says are gone.

resource-providers-allocations.txt: a terminated instance's allocations are
deleted, and an audit deletes those of instances that no longer exist. The
import applies that to what it can prove from nova's database: a consumer
holding something on the import's providers that nova has as a **deleted
instance** (``instances.deleted != 0``) or a **finished migration** loses its
part on those providers (its parts elsewhere stay). A consumer nova does not
know at all (another service's, or an instance archived away) is left alone:
the agent's own audit on the host decides about it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from agent.model.allocations import ConsumerAllocations
from agent.nova_import.refusal import Refusal
from agent.placement.errors import PlacementError
from agent.placement.report import ReportClient

GoneLookup = Callable[[set[str]], Mapping[str, str]]
"""``{consumer UUID}`` -> ``{consumer UUID: why nova says it is gone}`` (nova's database)."""


def held_on(report: ReportClient, providers: Iterable[str]) -> set[str]:
    """Consumers with allocations on ``providers`` (one read per provider)."""
    found: set[str] = set()
    for uuid in sorted(providers):
        found |= set(report.provider_allocations(uuid).consumers)
    return found


def _remover(ours: set[str]) -> Callable[[ConsumerAllocations], ConsumerAllocations | None]:
    def edit(held: ConsumerAllocations) -> ConsumerAllocations | None:
        if not held.providers & ours:
            return None
        return held.with_allocations(held.without(ours))

    return edit


def remove_gone(
    report: ReportClient,
    candidates: set[str],
    gone: GoneLookup,
    ours: set[str],
    dry: bool,
) -> tuple[list[str], list[Refusal]]:
    """Remove the part on ``ours`` of every candidate nova says is gone.

    Args:
        report: the import's report client.
        candidates: consumers found on the import's providers that the import
            did not plan (nova has no live instance or open migration for them).
        gone: the lookup in nova's database.
        ours: the providers the import lays out.
        dry: only say what would be removed.

    Returns:
        ``(lines, refusals)``: one line per consumer removed (or to remove),
        one refusal per removal Placement refused.
    """
    reasons = gone(candidates) if candidates else {}
    lines, refusals = [], []
    for consumer in sorted(reasons):
        try:
            if dry:
                held = report.get_allocations(consumer)
                changed = bool(held.providers & ours)
            else:
                changed = report.edit_allocations(consumer, _remover(ours)) is not None
        except PlacementError as exc:
            refusals.append(
                Refusal(
                    "placement",
                    f"consumer {consumer}",
                    "",
                    f"allocations of a consumer nova says is gone ({reasons[consumer]}) not "
                    f"removed: {exc.detail or exc}",
                    "import again",
                )
            )
            continue
        if changed:
            verb = "remove" if dry else "removed"
            lines.append(f"{verb} allocations of consumer {consumer}: {reasons[consumer]}")
    return lines, refusals
