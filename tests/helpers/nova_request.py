"""nova 34's scheduler request for a flavor and image, built by nova's own code (the judge).

``nova.scheduler.utils.ResourceRequest.from_request_spec`` turns a request spec into
what nova asks Placement for (``_translate_pinning_policies``: mixed CPUs, isolated
emulator threads; ``_translate_mem_encryption_request``: ``MEM_ENCRYPTION_CONTEXT`` and
the model's trait), after the request filters that bear on the agent's trees
(``request_filter.compute_status_filter``, ``owner_nova_filter``: see
:meth:`tests.helpers.nova_client.Nova.schedule`). ``candidates`` sends it with nova's
``SchedulerReportClient.get_allocation_candidates`` (microversion 1.36), restricted to
one compute node's tree as a scheduler targeting that host does.
"""

from __future__ import annotations

from typing import Any
from unittest import mock

from nova import objects
from nova.scheduler import request_filter
from nova.scheduler import utils as scheduler_utils

from tests.helpers.nova_client import Nova


def flavor(vcpus: int, memory_mb: int, root_gb: int, **extra_specs: str) -> objects.Flavor:
    """A nova flavor (``extra_specs`` keys with ``_`` for ``:``: ``hw_cpu_policy``)."""
    return objects.Flavor(
        name="judge",
        vcpus=vcpus,
        memory_mb=memory_mb,
        root_gb=root_gb,
        ephemeral_gb=0,
        swap=0,
        extra_specs={k.replace("_", ":", 1): v for k, v in extra_specs.items()},
    )


def request_spec(nova: Nova, flv: objects.Flavor, **image_props: Any) -> objects.RequestSpec:
    """nova's request spec for ``flv`` and an image with ``image_props``, request filters run."""
    spec = objects.RequestSpec(
        flavor=flv,
        image=objects.ImageMeta(properties=objects.ImageMetaProps(**image_props)),
        project_id=nova.project_id,
        user_id=nova.user_id,
        is_bfv=False,
    )
    request_filter.compute_status_filter(nova.context, spec)
    with mock.patch.object(request_filter, "_should_filter_by_owner", return_value=True):
        request_filter.owner_nova_filter(nova.context, spec)
    return spec


def requested_resources(flv: objects.Flavor, **image_props: Any) -> dict[str, int]:
    """``{resource class: amount}`` nova's ``ResourceRequest`` asks for (all groups merged)."""
    spec = objects.RequestSpec(
        flavor=flv,
        image=objects.ImageMeta(properties=objects.ImageMetaProps(**image_props)),
        is_bfv=False,
    )
    return dict(scheduler_utils.ResourceRequest.from_request_spec(spec).merged_resources())


def candidates(
    nova: Nova, flv: objects.Flavor, nodename: str, **image_props: Any
) -> list[dict[str, dict[str, int]]]:
    """The allocation requests nova gets for ``flv`` on ``nodename``'s tree:
    ``[{provider UUID: {resource class: amount}}]`` (empty: the host does not fit)."""
    spec = request_spec(nova, flv, **image_props)
    request = scheduler_utils.ResourceRequest.from_request_spec(spec)
    request.get_request_group(None).in_tree = nova.root(nodename)
    found, _summaries, _version = nova.client.get_allocation_candidates(nova.context, request)
    return [{rp: a["resources"] for rp, a in c["allocations"].items()} for c in (found or [])]
