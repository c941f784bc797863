"""What Placement's answers mean: the microversion to use, an error's text, a 403's roles.

Split from :mod:`agent.placement.client` (which sends requests and tries them again):
these read an answer and say what it means, and need nothing of the client's state.
"""

from __future__ import annotations

from typing import Any

import requests

from agent.placement import policy
from agent.placement.errors import (
    Forbidden,
    MicroversionTooLow,
    PlacementError,
    PlacementUnavailable,
    parse_error,
)
from agent.placement.transport import Answer

MIN_MICROVERSION = (1, 30)
MAX_MICROVERSION = (1, 39)


def version(text: str) -> tuple[int, int]:
    """``"1.39"`` as ``(1, 39)``."""
    major, _, minor = text.partition(".")
    return int(major), int(minor)


def detail(resp: Answer | requests.Response, method: str, path: str) -> str:
    """Placement's explanation of an error answer, whole, on one line."""
    try:
        body: Any = resp.json()
    except ValueError:
        body = resp.text
    return parse_error(resp.status_code, body, method, path).detail


def forbidden(error: PlacementError, template: str, endpoint: str) -> Forbidden:
    """A 403 with the roles Placement's default policy wants for the request."""
    wanted = policy.wanted(error.method, template)
    if wanted is None:
        hint = "Placement's policy refused the agent's Keystone user"
    else:
        hint = (
            f"Placement at {endpoint}: its default policy {wanted.rule} wants role "
            f"{' or '.join(wanted.roles)} ({wanted.check})"
        )
    hint += (
        ": give the agent's user ([placement] username) the service role in its project "
        "([placement] project_name), e.g. openstack role add --user USER --project PROJECT "
        "service"
    )
    return Forbidden(error.status, error.code, error.detail, error.method, error.path, hint)


def choose_microversion(doc: Any) -> str:
    """The microversion to use given Placement's root document (``GET /``).

    The highest both sides know: the server's ``max_version`` capped at
    :data:`MAX_MICROVERSION`.

    Raises:
        MicroversionTooLow: the server's maximum is below :data:`MIN_MICROVERSION`.
        PlacementUnavailable: ``doc`` is not a Placement root document.
    """
    try:
        server_max = version(doc["versions"][0]["max_version"])
    except (KeyError, IndexError, TypeError, ValueError):
        raise PlacementUnavailable(
            f"the Placement root document is not what Placement sends: {doc!r:.200}"
        ) from None
    if server_max < MIN_MICROVERSION:
        raise MicroversionTooLow(
            "Placement offers microversion {}.{} at most; compute-agent needs {}.{} "
            "(Placement from the Stein release or later): upgrade Placement".format(
                *server_max, *MIN_MICROVERSION
            )
        )
    chosen = min(server_max, MAX_MICROVERSION)
    return f"{chosen[0]}.{chosen[1]}"
