"""Everything Placement holds for one provider tree, read by plain HTTP, and views of it.

A snapshot is ``{"providers": {uuid: {...}}, "allocations": {consumer: body}}``;
two snapshots compare equal only if nothing changed, generations included.
"""

from __future__ import annotations

from typing import Any

from tests.helpers.placement_http import http_get


def snapshot(base: str, root: str) -> dict[str, Any]:
    """Providers of ``root``'s tree (name, parent, generation, inventories, traits, aggregates)
    and every allocation of the consumers holding resources there."""
    listed = http_get(base, "/resource_providers", in_tree=root)["resource_providers"]
    providers, consumers = {}, set()
    for p in listed:
        u = p["uuid"]
        providers[u] = {
            "name": p["name"],
            "parent": p["parent_provider_uuid"],
            "generation": p["generation"],
            "inventories": http_get(base, f"/resource_providers/{u}/inventories")["inventories"],
            "traits": sorted(http_get(base, f"/resource_providers/{u}/traits")["traits"]),
            "aggregates": http_get(base, f"/resource_providers/{u}/aggregates")["aggregates"],
        }
        consumers |= set(http_get(base, f"/resource_providers/{u}/allocations")["allocations"])
    allocations = {c: http_get(base, f"/allocations/{c}") for c in sorted(consumers)}
    return {"providers": providers, "allocations": allocations}


def amounts(snap: dict[str, Any]) -> dict[str, dict[str, dict[str, int]]]:
    """``{consumer: {provider name: {class: amount}}}`` of a snapshot."""
    names = {u: p["name"] for u, p in snap["providers"].items()}
    return {
        c: {names.get(rp, rp): a["resources"] for rp, a in rec["allocations"].items()}
        for c, rec in snap["allocations"].items()
    }


def class_totals(snap: dict[str, Any]) -> dict[str, dict[str, int]]:
    """``{consumer: {class: total}}``: what a reshape must conserve."""
    out: dict[str, dict[str, int]] = {}
    for c, rec in snap["allocations"].items():
        for a in rec["allocations"].values():
            for rc, n in a["resources"].items():
                out.setdefault(c, {})[rc] = out.get(c, {}).get(rc, 0) + n
    return out


def inventories(snap: dict[str, Any]) -> dict[str, dict[str, int]]:
    """``{provider name: {class: total}}``."""
    return {
        p["name"]: {rc: i["total"] for rc, i in p["inventories"].items()}
        for p in snap["providers"].values()
    }
