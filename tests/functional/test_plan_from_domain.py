"""The plan read from the domains nova 34 writes equals what nova 34 claims.

The judge is nova's own code (:mod:`tests.helpers.nova_guest`, in a process of its own):
for each flavor and image, its scheduler's claim (``ResourceRequest.from_request_spec``,
``_translate_pinning_policies``), its placement of the guest on the host's NUMA cells
(``numa_get_constraints``, ``numa_fit_instance_to_host``) and the domain its libvirt
driver writes (``_get_guest_numa_config``: ``<cputune>``, ``<numatune>``, the guest's
``<numa>`` cells; ``_get_guest_config_meta``: the flavor's extra specs and the image's
properties). Each guest's domain is served, alone, by libvirt's test driver on the
host nova's fakelibvirt described (two cells of 8 CPUs, ``cpu_shared_set = 0-3,8-11``);
the agent's start-up cycle writes its plan to a real Placement, which must then hold
exactly nova's claim: per consumer on a flat tree, per NUMA cell with
``[numa] model_in_placement``.

Cases: a mixed guest's realtime mask in the image (``hw_cpu_realtime_mask``, which
nova reads before the flavor's ``hw:cpu_realtime_mask``), with the flavor's mask beside
it or without one, in the flavor alone, ``hw:cpu_realtime`` with no mask anywhere
(every vCPU realtime, emulator threads isolated), a mixed guest with
``hw:cpu_dedicated_mask``; with NUMA in Placement, each of those and a shared guest
spread over two cells as 1 + 3 vCPUs and 512 + 1536 MiB.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from drivers.libvirt import LibvirtDriver
from tests.helpers.libvirt_fixtures import make_conf
from tests.helpers.names import unique
from tests.helpers.nova_guest import OPTIONS
from tests.helpers.paths import REPO
from tests.helpers.placement_http import held_by_name
from tests.helpers.served import ServedPlacement
from tests.helpers.sync import startup_cycle

REALTIME = {"hw:cpu_policy": "mixed", "hw:cpu_realtime": "yes"}
FLAT = {
    "image_mask_beside_flavors": {
        "extra_specs": {**REALTIME, "hw:cpu_realtime_mask": "^0"},
        "image": {"hw_cpu_realtime_mask": "^0-1"},
    },
    "image_mask_alone": {"extra_specs": REALTIME, "image": {"hw_cpu_realtime_mask": "^0-1"}},
    "flavor_mask": {"extra_specs": {**REALTIME, "hw:cpu_realtime_mask": "^0-1"}},
    "realtime_without_mask": {
        "vcpus": 3,
        "extra_specs": {**REALTIME, "hw:emulator_threads_policy": "isolate"},
    },
    "dedicated_mask": {"extra_specs": {"hw:cpu_policy": "mixed", "hw:cpu_dedicated_mask": "2-3"}},
}
# Guest cell 0: vCPU 0 and 512 MiB; guest cell 1: vCPUs 1-3 and 1536 MiB.
TWO_CELLS = {
    "hw:numa_nodes": "2",
    "hw:numa_cpus.0": "0",
    "hw:numa_cpus.1": "1-3",
    "hw:numa_mem.0": "512",
    "hw:numa_mem.1": "1536",
}
SPREAD = {
    "two_cells_shared": {"extra_specs": TWO_CELLS},
    **{
        f"two_cells_{name}": {
            **case,
            "vcpus": 4,
            "extra_specs": {**case["extra_specs"], **TWO_CELLS},
        }
        for name, case in FLAT.items()
    },
}


def _case(case: dict[str, Any]) -> dict[str, Any]:
    return {"vcpus": 4, "memory_mb": 2048, "root_gb": 1, **case}


@pytest.fixture(scope="module")
def nova() -> dict[str, Any]:
    """nova's answer for every case (:mod:`tests.helpers.nova_guest`)."""
    cases = {name: _case(case) for name, case in {**FLAT, **SPREAD}.items()}
    done = subprocess.run(
        [sys.executable, "-W", "ignore", "-m", "tests.helpers.nova_guest"],
        input=json.dumps(cases),
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def placement(tmp_path_factory) -> ServedPlacement:
    """One real Placement for the module: every case has its own nodename and consumer."""
    served = ServedPlacement(tmp_path_factory.mktemp("served"))
    served.start()
    yield served
    served.stop()


def _host_file(directory: Path, info: list[Any], domain: str) -> Path:
    """libvirt's test driver host file: nova's fakelibvirt ``getInfo`` and one domain."""
    model, memory_mib, cpus, mhz, nodes, sockets, cores, threads = info
    directory.mkdir(parents=True, exist_ok=True)
    domain = domain.replace('<domain type="kvm">', '<domain type="test">', 1)
    path = directory / "host.xml"
    path.write_text(
        f"<node><cpu><nodes>{nodes}</nodes><sockets>{sockets}</sockets><cores>{cores}</cores>"
        f"<threads>{threads}</threads><active>{cpus}</active><mhz>{mhz}</mhz>"
        f"<model>{model}</model></cpu><memory>{memory_mib * 1024}</memory>\n{domain}</node>\n"
    )
    return path


def _held(base: str, tmp_path: Path, nova: dict[str, Any], case: str, numa: bool) -> tuple:
    """The agent's start-up cycle on a host serving ``case``'s domain alone, against the
    Placement at ``base``; ``(nodename, what Placement then holds for the guest by
    provider name)``."""
    directory = tmp_path / case
    host = _host_file(directory, nova["host"]["info"], nova["guests"][case]["xml"])
    caps = directory / "capabilities.xml"
    caps.write_text(nova["host"]["capabilities"])
    name = unique("rt")
    conf = make_conf(
        directory,
        None,
        DEFAULT={"host": name},
        libvirt={"connection_uri": f"test://{host}", "capabilities_file": str(caps)},
        compute=dict(OPTIONS["compute"]),
        numa={"model_in_placement": numa},
    )
    outcome = startup_cycle(directory, base, LibvirtDriver(conf))
    assert outcome.ok, (case, outcome)
    return name, held_by_name(base, nova["guests"][case]["uuid"])


def test_flat_plan_equals_novas_claim(tmp_path, placement, nova):
    planned, claimed = {}, {}
    for case in FLAT:
        name, planned[case] = _held(placement.url, tmp_path, nova, case, numa=False)
        claimed[case] = {name: nova["guests"][case]["claim"]}
    assert planned == claimed


def test_numa_plan_equals_novas_cells(tmp_path, placement, nova):
    planned, claimed = {}, {}
    for case in SPREAD:
        name, planned[case] = _held(placement.url, tmp_path, nova, case, numa=True)
        cells = nova["guests"][case]["cells"]
        assert len(cells) == 2, case  # nova spreads each of these guests over two cells
        claimed[case] = {
            name: {"DISK_GB": nova["guests"][case]["claim"]["DISK_GB"]},
            **{f"{name}_NUMA{cell}": amounts for cell, amounts in cells.items()},
        }
        # The cells add up to nova's claim.
        totals: dict[str, int] = {}
        for amounts in cells.values():
            for rc, n in amounts.items():
                totals[rc] = totals.get(rc, 0) + n
        assert {**totals, "DISK_GB": 1} == nova["guests"][case]["claim"], case
    assert planned == claimed
