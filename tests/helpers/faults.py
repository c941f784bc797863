"""Fault injection for the crash-safety suite (tests/functional/test_faults.py).

:func:`kill_at` makes the agent "die" at one Placement request, the way
SIGKILL does: nothing of the agent runs afterwards (a ``BaseException`` no
handler of the agent catches), and the state directory is kept exactly as
it was at that instant (a copy taken before any ``finally`` of the agent
runs), for the restarted agent to start from. The request itself either
never left (``when="before"``) or reached Placement and its answer was lost
(``when="after"``). Placement is real throughout.

:func:`fail_at` makes requests answer with an error Placement cannot be made
to produce on demand (a 500), and is only used for that.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent.placement.client import PlacementClient
from agent.placement.errors import PlacementError, parse_error

Match = Callable[[str, str], bool]


class Killed(BaseException):
    """The agent process died here (no ``except Exception`` of the agent catches it)."""


def matching(method: str, template_part: str) -> Match:
    """Requests with ``method`` whose path template contains ``template_part``."""
    return lambda m, t: m == method and template_part in t


def any_write(m: str, _t: str) -> bool:
    return m in ("POST", "PUT", "DELETE")


def kill_at(
    client: PlacementClient,
    k: int,
    match: Match,
    state_path: Path,
    snapshot: Path,
    when: str = "after",
) -> dict[str, int]:
    """Kill the agent at the ``k``-th request ``match`` selects (1-based).

    Args:
        client: the agent's Placement client (its ``_send`` is wrapped).
        k: which matching request.
        match: ``(method, path template) -> bool``.
        state_path: the agent's state directory.
        snapshot: where the state directory is copied at the kill.
        when: ``"before"`` (not sent) or ``"after"`` (sent, answer lost).

    Returns:
        A dict whose ``"seen"`` counts matching requests (to know whether the kill happened).
    """
    real = client._send
    counter = {"seen": 0}

    def send(method: str, template: str, *args: Any, **kw: Any) -> Any:
        if not match(method, template):
            return real(method, template, *args, **kw)
        counter["seen"] += 1
        if counter["seen"] != k:
            return real(method, template, *args, **kw)
        if when == "after":
            try:
                real(method, template, *args, **kw)
            except PlacementError:
                pass  # answered with an error: lost with the process all the same
        if state_path.exists():
            shutil.copytree(state_path, snapshot)
        else:
            snapshot.mkdir(parents=True)
        raise Killed(f"{method} {template} #{k} ({when})")

    client._send = send  # type: ignore[method-assign]
    return counter


def fail_at(client: PlacementClient, match: Match, status: int = 500, times: int = 1) -> None:
    """Answer the next ``times`` matching requests with ``status`` (not sent to Placement).

    Only for answers real Placement cannot be made to give on demand (5xx).
    """
    real = client._send
    left = {"n": times}

    def send(method: str, template: str, path: str, *args: Any, **kw: Any) -> Any:
        if left["n"] and match(method, template):
            left["n"] -= 1
            body = {"errors": [{"status": status, "title": "Internal Server Error", "detail": ""}]}
            raise parse_error(status, body, method, path)
        return real(method, template, path, *args, **kw)

    client._send = send  # type: ignore[method-assign]


def before_send(
    client: PlacementClient, match: Callable[[str, str, str], bool], action: Callable[[], None]
) -> list[str]:
    """Run ``action`` (another writer's real write) just before the first request ``match``
    selects by ``(method, template, path)`` is sent; that request then goes as it was.

    Returns:
        A list that gets the matched path once ``action`` has run.
    """
    real = client._send
    fired: list[str] = []

    def send(method: str, template: str, path: str, *args: Any, **kw: Any) -> Any:
        if not fired and match(method, template, path):
            fired.append(path)
            action()
        return real(method, template, path, *args, **kw)

    client._send = send  # type: ignore[method-assign]
    return fired
