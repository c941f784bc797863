"""The stored form of a node's :class:`~agent.audit.consumer_record.ConsumerRecord`
(``state_path``/``consumers/NODE.json``).

A record that cannot be parsed is not an error: the audit reads what it
needs from Placement again (one WARNING), as on a first start.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from agent.audit.absence import Absence, Absences
from agent.audit.authorship import Authorship
from agent.audit.consumer_record import ConsumerRecord
from agent.audit.consumer_state import ConsumerStatus, State
from agent.audit.held import HeldAllocations
from agent.model.allocations import ProviderAllocations, clean_by_provider

LOG = logging.getLogger(__name__)


def dump(record: ConsumerRecord) -> dict[str, Any]:
    """``record`` as stored (sorted keys and lists: an unchanged record stores the same)."""
    return {
        "instances": sorted(record.instances),
        "claims": dict(sorted(record.claims.items())),
        "gone": sorted(record.gone),
        "moving": sorted(record.moving),
        "unknown": dict(sorted(record.unknown.items())),
        "held": {rp: pa.consumers for rp, pa in sorted(record.held.items())},
        "generations": {
            rp: pa.generation for rp, pa in sorted(record.held.items()) if pa.generation is not None
        },
        "consumer_generations": {
            rp: dict(sorted(pa.consumer_generations.items()))
            for rp, pa in sorted(record.held.items())
            if pa.consumer_generations
        },
        "shared": dict(sorted(record.shared.items())),
        "migrations": sorted(record.migrations),
        "wrote": dict(sorted(record.wrote.items())),
        "absent": {c: [a.since, a.audits] for c, a in sorted(record.absent.items())},
        "inherited": sorted(record.inherited),
        "drift": dict(sorted(record.drift.items())),
        "states": {
            c: {"state": str(s.state), "why": s.why, "drift": s.drift}
            for c, s in sorted(record.statuses.items())
        },
    }


def load(doc: Mapping[str, Any] | None) -> ConsumerRecord:
    """A stored record; an empty one when ``doc`` is None, empty or malformed (logged)."""
    if not doc:
        return ConsumerRecord()
    try:
        generations = {str(rp): int(g) for rp, g in doc["generations"].items()}
        consumer_gens = doc.get("consumer_generations", {})
        return ConsumerRecord(
            instances={str(c) for c in doc["instances"]},
            claims={str(c): float(t) for c, t in doc.get("claims", {}).items()},
            gone={str(c) for c in doc.get("gone", [])},
            moving={str(c) for c in doc.get("moving", [])},
            unknown={str(c): float(t) for c, t in doc["unknown"].items()},
            held=HeldAllocations(
                {
                    str(rp): ProviderAllocations(
                        generations.get(rp),
                        dict(clean_by_provider(consumers)),
                        {str(c): g for c, g in consumer_gens.get(rp, {}).items()},
                    )
                    for rp, consumers in doc["held"].items()
                }
            ),
            shared={str(c): clean_by_provider(a) for c, a in doc.get("shared", {}).items()},
            migrations={str(c) for c in doc.get("migrations", [])},
            wrote=_authorship(doc.get("wrote", {})),
            inherited={str(c) for c in doc.get("inherited", [])},
            absent=Absences(
                {str(c): Absence(float(a[0]), int(a[1])) for c, a in doc.get("absent", {}).items()}
            ),
            drift={str(c): str(d) for c, d in doc.get("drift", {}).items()},
            statuses={
                str(c): ConsumerStatus(str(c), State(s["state"]), str(s["why"]), s["drift"])
                for c, s in doc.get("states", {}).items()
            },
        )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        LOG.warning("allocation audit state is unusable (%s); reading it from Placement", exc)
        return ConsumerRecord()


def _authorship(stored: Any) -> Authorship:
    """The stored ``wrote``: ``{consumer: generation or None}``; a list (written before
    issue 39, without generations) gives None for each: not provably the agent's own, so
    a gone one waits for the grace (the safe side)."""
    if isinstance(stored, Mapping):
        return Authorship({str(c): None if g is None else int(g) for c, g in stored.items()})
    return Authorship(dict.fromkeys((str(c) for c in stored), None))
