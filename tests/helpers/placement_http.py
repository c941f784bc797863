"""Plain HTTP to Placement for tests: another service's writes, reads independent of the agent."""

from __future__ import annotations

from typing import Any

import requests

HEADERS = {
    "X-Auth-Token": "admin",
    "X-Roles": "admin,service",
    "OpenStack-API-Version": "placement 1.39",
}
"""noauth2 admin headers at the microversion the agent needs (1.39)."""


def http_get(base: str, path: str, **params: Any) -> dict:
    """GET ``base + path`` with ``params`` as the query; the JSON body.

    Raises:
        requests.HTTPError: any status of 400 or above.
    """
    resp = requests.get(base + path, headers=HEADERS, params=params, timeout=10)
    resp.raise_for_status()
    return resp.json()


def http(
    base: str, method: str, path: str, body: Any = None, expect: int | None = None
) -> requests.Response:
    """One request with ``body`` as JSON; asserts ``expect`` (or any status below 400)."""
    resp = requests.request(method, base + path, headers=HEADERS, json=body, timeout=30)
    ok = resp.status_code == expect if expect is not None else resp.status_code < 400
    assert ok, f"{method} {path}: {resp.status_code} {resp.text}"
    return resp


def call(base: str, method: str, path: str, body: Any = None, expect: int | None = None) -> Any:
    """As :func:`http`; the JSON body, or None when there is none."""
    resp = http(base, method, path, body, expect)
    return resp.json() if resp.content else None


def put_allocations(
    base: str, consumer: str, per_rp: dict[str, dict[str, int]], project: str = "p"
) -> None:
    """A consumer's allocations as another service (or nova, long ago) wrote them.

    Args:
        consumer: the consumer UUID; its current generation is read first.
        per_rp: ``{provider UUID: {resource class: amount}}``.
        project: the consumer's project (user ``u``, consumer type INSTANCE).
    """
    current = http_get(base, f"/allocations/{consumer}")
    http(
        base,
        "PUT",
        f"/allocations/{consumer}",
        {
            "allocations": {rp: {"resources": r} for rp, r in per_rp.items()},
            "project_id": project,
            "user_id": "u",
            "consumer_generation": current.get("consumer_generation"),
            "consumer_type": "INSTANCE",
        },
    )


def names_by_uuid(base: str) -> dict[str, str]:
    """``{provider UUID: name}`` of every provider Placement holds."""
    listing = http_get(base, "/resource_providers")["resource_providers"]
    return {p["uuid"]: p["name"] for p in listing}


def held_by_name(base: str, consumer: str) -> dict[str, dict[str, int]]:
    """``{provider name: {rc: amount}}`` that Placement holds for ``consumer``."""
    names = names_by_uuid(base)
    body = http_get(base, f"/allocations/{consumer}")["allocations"]
    return {names[rp]: a["resources"] for rp, a in body.items()}
