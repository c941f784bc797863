"""Plain HTTP to Placement for tests: another service's writes, reads independent of the agent."""

from __future__ import annotations

from typing import Any

import requests

from tests.functional.conftest import HEADERS, http_get


def call(base: str, method: str, path: str, body: Any = None, expect: int | None = None) -> Any:
    """One request; asserts ``expect`` (or any status below 400); the JSON body or None."""
    resp = requests.request(method, base + path, headers=HEADERS, json=body, timeout=30)
    ok = resp.status_code == expect if expect is not None else resp.status_code < 400
    assert ok, f"{method} {path}: {resp.status_code} {resp.text}"
    return resp.json() if resp.content else None


def names_by_uuid(base: str) -> dict[str, str]:
    """``{provider UUID: name}`` of every provider Placement holds."""
    listing = http_get(base, "/resource_providers")["resource_providers"]
    return {p["uuid"]: p["name"] for p in listing}


def held_by_name(base: str, consumer: str) -> dict[str, dict[str, int]]:
    """``{provider name: {rc: amount}}`` that Placement holds for ``consumer``."""
    names = names_by_uuid(base)
    body = http_get(base, f"/allocations/{consumer}")["allocations"]
    return {names[rp]: a["resources"] for rp, a in body.items()}
