"""nova 34's scheduler query for a flavor and image, built and sent by nova's own code.

``SchedulerManager._get_host_states`` / ``select_destinations`` in nova run
``request_filter.process_reqspec`` (every request filter, in nova's order) on
the request spec, build ``ResourceRequest.from_request_spec`` and send it
with ``SchedulerReportClient.get_allocation_candidates`` (microversion 1.36).
This helper does exactly that, against a test's Placement, with one stand-in:
``owner_nova_filter`` reads the cell databases for the oldest compute
service's version; it is taken as new enough (``OWNER_NOVA`` is required).
The other filters read nova's options at their defaults (the aggregate and
image-type ones are off) or the request spec itself (vTPM, sound, packed
virtqueues, ephemeral encryption).
"""

from __future__ import annotations

from collections.abc import Mapping
from unittest import mock

from keystoneauth1 import adapter as ks_adapter
from keystoneauth1 import session as ks_session
from nova import context as nova_context
from nova import objects
from nova.pci import request as pci_request
from nova.scheduler import request_filter
from nova.scheduler import utils as scheduler_utils
from nova.scheduler.client import report

from agent.placement.embedded import NOAUTH_HEADERS

objects.register_all()


def request_spec(
    extra_specs: Mapping[str, str],
    image_properties: Mapping[str, str] | None = None,
    vcpus: int = 2,
    memory_mb: int = 2048,
    root_gb: int = 10,
) -> objects.RequestSpec:
    """A boot's request spec: a flavor with ``extra_specs``, an image with ``image_properties``.

    Built by nova's ``RequestSpec.from_components`` (as nova-api builds a boot's), with
    the flavor's ``pci_passthrough:alias`` turned into PCI requests by nova's
    ``pci_request.get_pci_requests_from_flavor`` (nova's ``[pci] alias``), as nova-api does.
    """
    flavor = objects.Flavor(
        vcpus=vcpus,
        memory_mb=memory_mb,
        root_gb=root_gb,
        ephemeral_gb=0,
        swap=0,
        extra_specs=dict(extra_specs),
    )
    props = objects.ImageMetaProps.from_dict(dict(image_properties or {}))
    pci_requests = pci_request.get_pci_requests_from_flavor(flavor)
    # from_components: nova-api's way to a complete spec (every field set or left blank).
    spec = objects.RequestSpec.from_components(
        nova_context.get_admin_context(),
        "00000000-0000-4000-8000-000000000001",
        objects.ImageMeta(properties=props),
        flavor,
        numa_topology=None,
        pci_requests=pci_requests,
        filter_properties={},
        instance_group=None,
        availability_zone=None,
        project_id="p",
        user_id="u",
    )
    spec.is_bfv = False
    return spec


def candidate_roots(base: str, spec: objects.RequestSpec) -> set[str]:
    """The root provider UUIDs of the allocation candidates nova gets for ``spec``.

    Args:
        base: Placement's URL.
        spec: the request spec (:func:`request_spec`); the filters edit it.

    Returns:
        Root provider UUIDs, one per host nova could be sent to.
    """
    _candidates, summaries = _ask(base, spec)
    return {s["root_provider_uuid"] for s in summaries.values()}


def candidate_providers(base: str, spec: objects.RequestSpec) -> list[set[str]]:
    """The providers of each allocation candidate nova gets for ``spec`` (UUIDs).

    Args: as :func:`candidate_roots`.
    """
    candidates, _summaries = _ask(base, spec)
    return [set(c["allocations"]) for c in candidates]


def _ask(base: str, spec: objects.RequestSpec) -> tuple[list[dict], dict[str, dict]]:
    """nova's filters, ResourceRequest and GET /allocation_candidates (module docstring)."""
    session = ks_session.Session(auth=None, additional_headers=dict(NOAUTH_HEADERS))
    adapter = ks_adapter.Adapter(
        session, service_type="placement", endpoint_override=base, raise_exc=False
    )
    client = report.SchedulerReportClient(adapter=adapter)
    context = nova_context.get_admin_context()
    with mock.patch.object(request_filter, "_should_filter_by_owner", return_value=True):
        request_filter.process_reqspec(context, spec)
    request = scheduler_utils.ResourceRequest.from_request_spec(spec)
    candidates, summaries, _version = client.get_allocation_candidates(context, request)
    if candidates is None:
        raise AssertionError(f"GET /allocation_candidates failed for {spec.flavor.extra_specs}")
    return candidates, summaries
