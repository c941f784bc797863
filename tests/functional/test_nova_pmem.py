"""A flavor with ``hw:pmem`` finds a host with ``[libvirt] pmem_namespaces``, by nova's query.

nova 34's ``ResourceRequest._translate_vpmems_request`` turns ``hw:pmem=128G,128G``
into ``resources:CUSTOM_PMEM_NAMESPACE_128G=2``; the agent reports the
namespaces of ``[libvirt] pmem_namespaces`` (the host's device-DAX namespaces
in a sysfs tree) as that class on the compute node, in a real Placement.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.placement.report import ReportClient
from agent.state.store import StateStore
from tests.helpers.libvirt_fixtures import libvirt_driver
from tests.helpers.nova_requests import candidate_roots, request_spec
from tests.helpers.sync import cycle, remote_client

NODE = "pmem-host"


@pytest.fixture
def report(tmp_path, served) -> ReportClient:
    return ReportClient(
        remote_client(tmp_path, served.url), StateStore(tmp_path / "state"), sleep=lambda s: None
    )


def _sysfs(tmp_path: Path, names: list[str]) -> str:
    root = tmp_path / "sysfs"
    for i, name in enumerate(names):
        ns = root / "sys/bus/nd/devices" / f"namespace0.{i}"
        ns.mkdir(parents=True)
        (ns / "alt_name").write_text(f"{name}\n")
        (ns / "mode").write_text("dax\n")
    return str(root)


def test_a_pmem_flavor_finds_the_host_while_namespaces_last(tmp_path, served, report):
    driver = libvirt_driver(
        tmp_path,
        "small-host",
        DEFAULT={"host": NODE},
        libvirt={"pmem_namespaces": ["128G:ns0|ns1", "SMALL:ns2"]},
        host_driver={"sysfs_root": _sysfs(tmp_path, ["ns0", "ns1", "ns2"])},
    )
    cycle(report, driver, NODE)
    root = report.get_provider_tree_and_ensure_root(NODE).data(NODE).uuid
    assert candidate_roots(served.url, request_spec({"hw:pmem": "128G,128G"})) == {root}
    assert candidate_roots(served.url, request_spec({"hw:pmem": "SMALL"})) == {root}
    assert candidate_roots(served.url, request_spec({"hw:pmem": "128G,128G,128G"})) == set()
