"""Placement's endpoints as typed functions: the only module of ``agent/`` with URL strings.

Each function is one request through :class:`PlacementClient` (which
negotiates the microversion once, up to 1.39, retries transport failures and
turns error answers into typed exceptions). Bodies follow the Placement API
reference; allocation bodies stay Placement-shaped here and are parsed by
:mod:`agent.model.allocations`. The path templates are what the client counts
requests by, so benchmarks and metrics name them as written here.

Errors: every function raises what :meth:`PlacementClient.request` raises
(``NotFound``, ``GenerationConflict``, ``InventoryInUse``, ``DuplicateName``,
``Conflict``, ``BadRequest``, ``PlacementError``, ``PlacementUnavailable``).
"""

from __future__ import annotations

from typing import Any

from agent.placement.client import PlacementClient

PROVIDERS = "/resource_providers"
PROVIDER = "/resource_providers/{uuid}"
INVENTORIES = "/resource_providers/{uuid}/inventories"
TRAITS = "/resource_providers/{uuid}/traits"
AGGREGATES = "/resource_providers/{uuid}/aggregates"
USAGES = "/resource_providers/{uuid}/usages"
PROVIDER_ALLOCATIONS = "/resource_providers/{uuid}/allocations"
CONSUMER_ALLOCATIONS = "/allocations/{consumer}"
ALLOCATIONS = "/allocations"
RESHAPER = "/reshaper"
RESOURCE_CLASS = "/resource_classes/{name}"
TRAIT = "/traits/{name}"

ProviderRecord = dict[str, Any]
"""One provider as ``GET /resource_providers`` lists it (uuid, name, generation, parent, ...)."""


# -- resource providers ---------------------------------------------------------


def list_tree(client: PlacementClient, root_uuid: str) -> list[ProviderRecord]:
    """``GET /resource_providers?in_tree=ROOT``: every provider of one tree (1.14)."""
    return client.get(PROVIDERS, params={"in_tree": root_uuid})["resource_providers"]


def find_by_name(client: PlacementClient, name: str) -> list[ProviderRecord]:
    """``GET /resource_providers?name=NAME``: the provider of that name, if any (names are unique).

    Returns:
        A list of at most one record.
    """
    return client.get(PROVIDERS, params={"name": name})["resource_providers"]


def sharing_providers(
    client: PlacementClient, aggregates: set[str], resource_class: str | None
) -> list[ProviderRecord]:
    """``GET /resource_providers`` of sharing providers in ``aggregates``.

    Filters: ``member_of=in:...`` (1.3), ``required=MISC_SHARES_VIA_AGGREGATE``
    (1.18) and, with ``resource_class``, ``resources=RC:1``: Placement then
    lists only providers with room for one unit of it (capacity minus usage),
    so a full one is left out. ``aggregates`` must not be empty.
    """
    params = {
        "member_of": "in:" + ",".join(sorted(aggregates)),
        "required": "MISC_SHARES_VIA_AGGREGATE",
    }
    if resource_class is not None:
        params["resources"] = f"{resource_class}:1"
    return client.get(PROVIDERS, params=params)["resource_providers"]


def create_provider(
    client: PlacementClient, name: str, uuid: str, parent_uuid: str | None = None
) -> ProviderRecord:
    """``POST /resource_providers``: the new provider's record (1.20 answers with it).

    ``parent_provider_uuid`` is sent only for a child (a root needs none).

    Raises:
        DuplicateName: the name or the UUID is taken.
    """
    body: dict[str, Any] = {"name": name, "uuid": uuid}
    if parent_uuid is not None:
        body["parent_provider_uuid"] = parent_uuid
    return client.post(PROVIDERS, json=body)


def update_provider(
    client: PlacementClient, uuid: str, name: str, parent_uuid: str | None
) -> ProviderRecord:
    """``PUT /resource_providers/{uuid}``: rename or re-parent (1.37 allows re-parenting)."""
    body = {"name": name, "parent_provider_uuid": parent_uuid}
    return client.put(PROVIDER, uuid=uuid, json=body)


def delete_provider(client: PlacementClient, uuid: str) -> None:
    """``DELETE /resource_providers/{uuid}``.

    Raises:
        NotFound: no such provider.
        PlacementError: it has children or allocations.
    """
    client.delete(PROVIDER, uuid=uuid)


# -- inventories, traits, aggregates, usages --------------------------------------


def get_inventories(client: PlacementClient, uuid: str) -> tuple[dict[str, Any], int]:
    """``GET .../inventories``: ``({rc: Placement record}, provider generation)``."""
    body = client.get(INVENTORIES, uuid=uuid)
    return body["inventories"], body["resource_provider_generation"]


def put_inventories(
    client: PlacementClient, uuid: str, inventories: dict[str, Any], generation: int | None
) -> int:
    """``PUT .../inventories``: replace the provider's inventory; returns the new generation.

    Args:
        inventories: ``{rc: record}`` (:func:`agent.model.resources.inventory_body`).
        generation: the provider generation the write is based on.

    Raises:
        GenerationConflict: the provider changed meanwhile.
        InventoryInUse: a class being removed has allocations.
    """
    body = {"inventories": inventories, "resource_provider_generation": generation}
    return client.put(INVENTORIES, uuid=uuid, json=body)["resource_provider_generation"]


def get_traits(client: PlacementClient, uuid: str) -> tuple[list[str], int]:
    """``GET .../traits``: ``(trait names, provider generation)``."""
    body = client.get(TRAITS, uuid=uuid)
    return body["traits"], body["resource_provider_generation"]


def get_aggregates(client: PlacementClient, uuid: str) -> tuple[list[str], int]:
    """``GET .../aggregates``: ``(aggregate UUIDs, provider generation)`` (1.19 carries it)."""
    body = client.get(AGGREGATES, uuid=uuid)
    return body["aggregates"], body["resource_provider_generation"]


def put_set(
    client: PlacementClient, uuid: str, kind: str, members: list[str], generation: int | None
) -> tuple[list[str], int]:
    """``PUT .../traits`` or ``PUT .../aggregates``: replace the set; what Placement now holds.

    Args:
        kind: ``"traits"`` or ``"aggregates"``.
        members: the whole new set (sorted by the caller).
        generation: the provider generation the write is based on (1.19).

    Returns:
        ``(members as Placement holds them, new provider generation)``.

    Raises:
        GenerationConflict: the provider changed meanwhile.
        BadRequest: a trait Placement does not know.
    """
    template = TRAITS if kind == "traits" else AGGREGATES
    body = {kind: members, "resource_provider_generation": generation}
    resp = client.put(template, uuid=uuid, json=body)
    return resp[kind], resp["resource_provider_generation"]


def get_usages(client: PlacementClient, uuid: str) -> dict[str, int]:
    """``GET .../usages``: ``{resource class: amount in use}``."""
    return dict(client.get(USAGES, uuid=uuid)["usages"])


def ensure_resource_class(client: PlacementClient, name: str) -> None:
    """``PUT /resource_classes/{name}``: create a custom class, or keep it (1.7, idempotent)."""
    client.put(RESOURCE_CLASS, name=name)


def ensure_trait(client: PlacementClient, name: str) -> None:
    """``PUT /traits/{name}``: create a custom trait, or keep it (idempotent)."""
    client.put(TRAIT, name=name)


# -- allocations -------------------------------------------------------------------


def get_provider_allocations(client: PlacementClient, uuid: str) -> dict[str, Any]:
    """``GET /resource_providers/{uuid}/allocations``: the body, every consumer on one provider."""
    return client.get(PROVIDER_ALLOCATIONS, uuid=uuid)


def get_consumer_allocations(client: PlacementClient, consumer: str) -> dict[str, Any]:
    """``GET /allocations/{consumer}``: the body (allocations, generations, owner, type)."""
    return client.get(CONSUMER_ALLOCATIONS, consumer=consumer)


def put_consumer_allocations(client: PlacementClient, consumer: str, body: dict[str, Any]) -> None:
    """``PUT /allocations/{consumer}`` with a body carrying the consumer generation (1.28).

    Raises:
        GenerationConflict: the consumer changed meanwhile.
        NotFound: a provider named in the body is gone.
        Conflict: the allocations do not fit ("Unable to allocate inventory").
    """
    client.put(CONSUMER_ALLOCATIONS, consumer=consumer, json=body)


def post_allocations(client: PlacementClient, body: dict[str, Any]) -> None:
    """``POST /allocations``: several consumers' allocations in one transaction (1.13; 1.28
    consumer generations, 1.38 consumer types).

    Args:
        body: ``{consumer: PUT /allocations/{consumer} body}``; a
            ``consumer_generation`` of null asserts the consumer is new.

    Raises:
        GenerationConflict: a consumer is not new, or changed meanwhile (nothing is written).
        Conflict: an allocation does not fit (nothing is written).
    """
    client.post(ALLOCATIONS, json=body)


def post_reshaper(
    client: PlacementClient, body: dict[str, Any], at_most: tuple[int, int] | None = None
) -> None:
    """``POST /reshaper``: inventories and allocations in one transaction (1.30).

    Args:
        body: ``{"inventories": {uuid: {"inventories", "resource_provider_generation"}},
            "allocations": {consumer: PUT /allocations body}}``.
        at_most: the highest microversion to send it at (the negotiated one when lower).
    """
    client.post(RESHAPER, json=body, at_most=at_most)


def providers_created(client: PlacementClient) -> int:
    """How many ``POST /resource_providers`` this client has sent (from its request counts)."""
    return client.counts[("POST", PROVIDERS)]
