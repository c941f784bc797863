"""Typed errors for Placement's answers.

Placement's error body is ``{"errors": [{"status", "title", "detail",
"code", "request_id"}]}`` (Placement API reference, "Errors"); ``code`` is
what tells a generation conflict from any other 409.
"""

from __future__ import annotations

from typing import Any

from agent.model.exceptions import AgentError

CODE_CONCURRENT_UPDATE = "placement.concurrent_update"
CODE_INVENTORY_IN_USE = "placement.inventory.inuse"
CODE_DUPLICATE_NAME = "placement.duplicate_name"
CODE_PROVIDER_IN_USE = "placement.resource_provider.inuse"
CODE_CANNOT_DELETE_PARENT = "placement.resource_provider.cannot_delete_parent"
CODE_PROVIDER_NOT_FOUND = "placement.resource_provider.not_found"


class PlacementError(AgentError):
    """Placement answered with an error.

    Attributes:
        status: HTTP status.
        code: Placement's error code (``placement.undefined_code`` if none).
        detail: the server's explanation.
        method: HTTP method of the request.
        path: the request path.
    """

    def __init__(self, status: int, code: str, detail: str, method: str, path: str) -> None:
        self.status = status
        self.code = code
        self.detail = detail
        self.method = method
        self.path = path
        super().__init__(f"placement {method} {path}: {status} {code}: {detail}")


class GenerationConflict(PlacementError):
    """409 ``placement.concurrent_update``: a provider or consumer generation was stale."""


class InventoryInUse(PlacementError):
    """409 ``placement.inventory.inuse``: a resource class with allocations was removed."""


class DuplicateName(PlacementError):
    """409 ``placement.duplicate_name``: another provider holds that name."""


class Conflict(PlacementError):
    """Any other 409 (e.g. "Unable to allocate inventory", provider in use)."""


class NotFound(PlacementError):
    """404, or 400 ``placement.resource_provider.not_found`` (reshaper)."""


class BadRequest(PlacementError):
    """400: the request was refused; ``detail`` says why."""


class Forbidden(PlacementError):
    """403: Placement's policy refused the request to the agent's Keystone user.

    Args:
        hint: which roles Placement's default policy wants and how to give them
            (:mod:`agent.placement.policy`), appended to the message.
    """

    def __init__(
        self, status: int, code: str, detail: str, method: str, path: str, hint: str
    ) -> None:
        super().__init__(status, code, detail, method, path)
        self.args = (f"{self.args[0]}; {hint}",)


class PlacementUnavailable(AgentError):
    """Placement could not be reached, or kept answering 502/503/504, after retries."""


class PlacementTLSError(PlacementUnavailable):
    """Placement's certificate was not trusted, or its TLS handshake failed (never retried)."""


class KeystoneFailure(PlacementUnavailable):
    """Keystone failed the agent before a request could go to Placement (never retried).

    Keystone unreachable, the credentials refused, its certificate not trusted, or no
    Placement endpoint in the catalog: the request never reached Placement, and the
    client counts it apart (:meth:`~agent.placement.client.PlacementClient.keystone_failures`).

    Attributes:
        cause: ``unreachable``, ``credentials``, ``tls``, ``catalog`` or ``error``
            (the metrics' label).
    """

    def __init__(self, message: str, cause: str) -> None:
        self.cause = cause
        super().__init__(message)


class MicroversionTooLow(AgentError):
    """The server's highest microversion is below what the agent needs."""


def parse_error(status: int, body: Any, method: str, path: str) -> PlacementError:
    """Build the typed error for an error response.

    Args:
        status: HTTP status (>= 400).
        body: the decoded JSON body, or the raw text when it was not JSON.
        method: request method.
        path: request path.
    """
    code, detail = "placement.undefined_code", ""
    if isinstance(body, dict) and isinstance(body.get("errors"), list) and body["errors"]:
        first = body["errors"][0]
        code = first.get("code") or code
        detail = first.get("detail") or first.get("title") or ""
    elif isinstance(body, str):
        detail = body[:2000]
    # Placement's details carry the WSGI framework's line breaks; logs want one line.
    detail = " ".join(str(detail).split())
    if status == 409:
        cls = {
            CODE_CONCURRENT_UPDATE: GenerationConflict,
            CODE_INVENTORY_IN_USE: InventoryInUse,
            CODE_DUPLICATE_NAME: DuplicateName,
        }.get(code, Conflict)
    elif status == 404 or code == CODE_PROVIDER_NOT_FOUND:
        cls = NotFound
    elif status == 400:
        cls = BadRequest
    else:
        cls = PlacementError
    return cls(status, code, detail, method, path)
