"""What operators add to a host's tree reaches nova's scheduler and stays (issue 27).

* Provider config files (``[compute] provider_config_location``, nova's schema
  1.0): a licence inventory and a site trait on the compute node are written to
  a real Placement; nova 34's scheduler (:mod:`tests.helpers.nova_client`: its
  request filters, ``ResourceRequest.from_request_spec`` and claim) finds the
  host for a flavor asking ``resources:CUSTOM_LICENSE_WINDOWS=1`` and
  ``trait:CUSTOM_SITE_PARIS=required``, and none for a flavor requiring another
  site; the licence the instance holds is never dropped by the agent's audit,
  even when the agent rewrites the instance's differing allocation.
* A file adding a class the driver reports, or a malformed one, is refused with
  one line naming the file and the key (``compute-agent discover`` and ``run``
  exit 2); on reload the running configuration stays, and a good file then
  takes effect.
* An operator's trait on a child provider (nova's vGPU guide: one per physical
  GPU) survives cycles and a restart; the mdev type trait the agent laid out
  there goes when the GPU's type changes; nova's scheduler sees both.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import uuid
import uuid as uuidlib
from pathlib import Path

import pytest
import requests

from agent.conf import config as agent_config
from agent.placement.report import ReportClient
from agent.service.daemon import Service
from agent.state.store import StateStore
from agent.tracker.cycle import ResourceTracker
from drivers.fake import FakeDriver
from tests.helpers.conf import make_conf
from tests.helpers.hosts import BIG_HOST, HostDescription
from tests.helpers.names import unique
from tests.helpers.nova_client import Flavor, Nova, NovaCallFailed
from tests.helpers.nova_cloud import PROJECT, USER, Host
from tests.helpers.paths import REPO
from tests.helpers.placement_http import HEADERS, http_get
from tests.helpers.service import wait_for
from tests.helpers.tracker import Setup

PROVIDER_YAML = """\
meta:
  schema_version: '1.0'
providers:
  - identification:
      uuid: $COMPUTE_NODE
    inventories:
      additional:
        - CUSTOM_LICENSE_WINDOWS:
            total: 2
    traits:
      additional:
        - CUSTOM_SITE_PARIS
"""
WINDOWS = Flavor(
    2,
    2048,
    10,
    (("resources:CUSTOM_LICENSE_WINDOWS", "1"), ("trait:CUSTOM_SITE_PARIS", "required")),
)
LONDON = Flavor(2, 2048, 10, (("trait:CUSTOM_SITE_LONDON", "required"),))


def provider_config(tmp_path: Path, name: str, text: str) -> Path:
    """``text`` as provider config file ``name`` in ``tmp_path/provider_config`` (made here)."""
    configs = tmp_path / "provider_config"
    configs.mkdir(exist_ok=True)
    path = configs / name
    path.write_text(text)
    return path


def licensed_host(tmp_path: Path, served, **compute: object) -> Host:
    configs = provider_config(tmp_path, "licences.yaml", PROVIDER_YAML).parent
    return Host(
        tmp_path / "a",
        served,
        "A",
        compute={"provider_config_location": str(configs), **compute},
        numa={"model_in_placement": False},
    )


def test_licence_and_site_trait_reach_novas_scheduler(tmp_path, served):
    host = licensed_host(tmp_path, served)
    assert host.cycle().ok
    nova = Nova(served.url, PROJECT, USER)
    root = nova.root(host.nodename)
    inventories = http_get(served.url, f"/resource_providers/{root}/inventories")["inventories"]
    assert inventories["CUSTOM_LICENSE_WINDOWS"]["total"] == 2
    assert {"VCPU", "MEMORY_MB", "DISK_GB"} <= set(inventories)
    traits = http_get(served.url, f"/resource_providers/{root}/traits")["traits"]
    assert {"CUSTOM_SITE_PARIS", "COMPUTE_NODE", "OWNER_NOVA"} <= set(traits)

    first, second, third = (str(uuid.uuid4()) for _ in range(3))
    nova.schedule(first, WINDOWS, host.nodename)
    nova.schedule(second, WINDOWS, host.nodename)
    # Two licences: a third Windows server, and any server for London, find no host.
    with pytest.raises(NovaCallFailed, match="no allocation candidate"):
        nova.schedule(third, WINDOWS, host.nodename)
    # Another site's trait exists (a London host's file made it), not on this host.
    assert requests.put(f"{served.url}/traits/CUSTOM_SITE_LONDON", headers=HEADERS).ok
    with pytest.raises(NovaCallFailed, match="no allocation candidate"):
        nova.schedule(third, LONDON, host.nodename)
    assert nova.refused == []


@pytest.mark.parametrize("rewrite", [False, True])
def test_the_audit_never_drops_a_licence(tmp_path, served, rewrite):
    host = licensed_host(tmp_path, served, rewrite_differing_allocations=rewrite)
    assert host.cycle().ok
    nova = Nova(served.url, PROJECT, USER)
    inst = str(uuid.uuid4())
    nova.schedule(inst, WINDOWS, host.nodename)
    root = nova.root(host.nodename)
    # The domain runs with more memory than nova claimed: drift the agent rewrites
    # with rewrite_differing_allocations; the licence is not the plan's and stays.
    host.define(inst, Flavor(2, 4096, 10))
    for _ in range(3):
        assert host.cycle().ok
    held = http_get(served.url, f"/allocations/{inst}")["allocations"][root]["resources"]
    assert held["CUSTOM_LICENSE_WINDOWS"] == 1
    assert held["MEMORY_MB"] == (4096 if rewrite else 2048)
    assert nova.refused == []


@pytest.mark.parametrize("rewrite", [False, True])
def test_a_class_the_planner_does_not_produce_is_held_not_drift(tmp_path, served, rewrite):
    """Issue 33, case 5: an allocation exactly as nova meant it, with the flavor's licence,
    is neither drift (``show --check`` exited 3 for ever) nor rewritten every cycle with
    ``rewrite_differing_allocations`` (nova's consumer generation moved each time)."""
    host = licensed_host(tmp_path, served, rewrite_differing_allocations=rewrite)
    assert host.cycle().ok
    nova = Nova(served.url, PROJECT, USER)
    inst = str(uuid.uuid4())
    nova.schedule(inst, WINDOWS, host.nodename)
    host.define(inst, WINDOWS)
    generation = http_get(served.url, f"/allocations/{inst}")["consumer_generation"]
    for _ in range(3):
        outcome = host.cycle()
        assert outcome.ok
    status = host.tracker.audit.record(host.nodename).statuses[inst]
    assert (status.state, status.drift) == ("instance here", "")
    assert http_get(served.url, f"/allocations/{inst}")["consumer_generation"] == generation
    assert nova.refused == []


def test_the_conductors_window_for_an_instance_whose_allocation_is_not_the_plan(tmp_path, served):
    """Issue 33, case 3: the licence makes the instance's allocation differ from the plan;
    the conductor moves it to the migration record before the scheduler's claim. The
    record holds what the instance held here at the last audit: the instance is *moving*,
    not healed (nova's claim would merge the heal into the destination's)."""
    host = licensed_host(tmp_path, served)
    assert host.cycle().ok
    nova = Nova(served.url, PROJECT, USER)
    inst, mig = str(uuid.uuid4()), str(uuid.uuid4())
    nova.schedule(inst, WINDOWS, host.nodename)
    host.define(inst, WINDOWS)
    for _ in range(2):
        assert host.cycle().ok
    nova.start_move(inst, mig, host.nodename)
    generation = http_get(served.url, f"/allocations/{inst}").get("consumer_generation")
    for _ in range(2):
        assert host.cycle().ok
    assert http_get(served.url, f"/allocations/{inst}")["allocations"] == {}
    assert http_get(served.url, f"/allocations/{inst}").get("consumer_generation") == generation
    status = host.tracker.audit.record(host.nodename).statuses[inst]
    assert status.state == "moving"
    nova.abort_move(inst, mig, host.nodename)
    assert host.cycle().ok
    root = nova.root(host.nodename)
    held = http_get(served.url, f"/allocations/{inst}")["allocations"][root]["resources"]
    assert held == WINDOWS.resources() and nova.refused == []


def test_the_conductors_window_before_the_first_audit(tmp_path, served):
    """Case 3 for an instance booted and moved between two audits: the conductor moves its
    share (with the licence) to the migration record before the agent ever saw it. Nothing
    is written for it (a heal would be merged into nova's destination claim)."""
    host = licensed_host(tmp_path, served)
    assert host.cycle().ok
    nova = Nova(served.url, PROJECT, USER)
    inst, mig = str(uuid.uuid4()), str(uuid.uuid4())
    nova.schedule(inst, WINDOWS, host.nodename)
    host.define(inst, WINDOWS)
    nova.start_move(inst, mig, host.nodename)
    assert host.cycle().ok
    assert http_get(served.url, f"/allocations/{inst}")["allocations"] == {}


DRIVER_CLASS = """\
meta: {schema_version: '1.0'}
providers:
  - identification: {name: big-host_pci_0000_86_00_0}
    inventories: {additional: [{CUSTOM_PCI_8086_0A54: {total: 1}}]}
"""


@pytest.mark.parametrize(
    ("text", "says"),
    [
        (DRIVER_CLASS, "inventories.additional CUSTOM_PCI_8086_0A54: the driver reports"),
        ("meta: {schema_version: '1.0'}\nproviders: [{identification: {}}]\n", "providers.0"),
    ],
)
@pytest.mark.parametrize("command", [("discover",), ("run", "--once")])
def test_a_bad_file_is_refused_in_one_line_naming_it(tmp_path, text, says, command):
    """The driver's class on the device's provider, and a malformed file: exit 2."""
    bad = provider_config(tmp_path, "bad.yaml", text)
    configs = bad.parent
    conf = tmp_path / "agent.conf"
    conf.write_text(
        f"[DEFAULT]\nstate_path = {tmp_path / 'state'}\n"
        f"[compute]\ndriver = fake\nprovider_config_location = {configs}\n"
        f"[fake]\nhost_file = {REPO / 'examples/big-host.yaml'}\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "agent.cli", *command, "--config", str(conf)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.splitlines()
    assert f"provider config {bad}: " in line and says in line


def _put_trait(base: str, provider: str, trait: str) -> None:
    assert requests.put(f"{base}/traits/{trait}", headers=HEADERS).ok
    current = http_get(base, f"/resource_providers/{provider}/traits")
    body = {
        "resource_provider_generation": current["resource_provider_generation"],
        "traits": [*current["traits"], trait],
    }
    resp = requests.put(f"{base}/resource_providers/{provider}/traits", json=body, headers=HEADERS)
    assert resp.ok, resp.text


def _restart(s: Setup, tmp_path: Path, **groups: dict[str, object]) -> None:
    """A new agent (driver, adapter, tracker) on the same state directory."""
    s.conf = make_conf(tmp_path, numa={"model_in_placement": True}, **groups)
    s.driver = FakeDriver(s.conf, s.host_path)
    s.state = StateStore(tmp_path / "state")
    s.report = ReportClient(s.client, s.state, sleep=lambda _s: None)
    s.tracker = ResourceTracker(s.conf, s.driver, s.report, s.state, clock=lambda: s.now)


def test_operator_trait_on_a_gpu_survives_cycles_restarts_and_a_type_change(tmp_path, embedded):
    """nova's vGPU guide: a custom trait per physical GPU provider, required by a flavor.
    The mdev type trait the agent laid out goes when the GPU's type changes."""
    s = Setup(tmp_path, embedded)
    assert s.cycle(startup=True).ok
    gpu = s.uuid(f"{s.nodename}_pci_0000_af_00_0")
    _put_trait(s.base, gpu, "CUSTOM_GPU_RACK_7")
    for _ in range(2):
        assert s.cycle().ok

    _restart(s, tmp_path, devices={"enabled_mdev_types": ["nvidia-36", "nvidia-35"]})
    assert s.cycle(startup=True).ok
    assert s.cycle().ok
    traits = set(http_get(s.base, f"/resource_providers/{gpu}/traits")["traits"])
    assert traits == {"CUSTOM_GPU_RACK_7", "CUSTOM_NVIDIA_36", "OWNER_NOVA"}
    # nova's scheduler: the rack's GPU of the new type is found, of the old type not.
    nova = Nova(s.base, PROJECT, USER)
    inst = str(uuid.uuid4())
    nova.schedule(inst, _vgpu("CUSTOM_GPU_RACK_7", "CUSTOM_NVIDIA_36"), s.nodename)
    assert http_get(s.base, f"/allocations/{inst}")["allocations"][gpu]["resources"] == {"VGPU": 1}
    with pytest.raises(NovaCallFailed, match="no allocation candidate"):
        nova.schedule(str(uuid.uuid4()), _vgpu("CUSTOM_GPU_RACK_7", "CUSTOM_NVIDIA_35"), s.nodename)


def _vgpu(*traits: str) -> Flavor:
    """resources:VGPU=1 and trait:T=required each (nova's vGPU guide), unsuffixed."""
    return Flavor(
        2, 2048, 10, (("resources:VGPU", "1"), *((f"trait:{t}", "required") for t in traits))
    )


GPUS: dict[str, object] = {"enabled_mdev_types": ["nvidia-35", "nvidia-36"]}
GPU_TIER_YAML = """\
meta:
  schema_version: '1.0'
providers:
  - identification:
      name: {name}
    traits:
      additional: [{traits}]
"""


@pytest.mark.parametrize("remembered", [True, False])
def test_a_child_trait_the_agent_no_longer_lays_out_goes_after_a_restart(
    tmp_path, embedded, remembered
):
    """A provider config file's trait on a GPU, dropped from the file while the agent was
    stopped, is removed by the restarted agent: it remembers, in the state directory, what
    it laid out there. The operator's own trait on the GPU stays either way; without the
    record (``remembered=False``) the agent cannot tell the dropped trait from an
    operator's, and leaves it."""
    s = Setup(tmp_path, embedded)  # the node's name, for the file the agent starts with
    gpu_name = f"{s.nodename}_pci_0000_af_00_0"
    tier = provider_config(
        tmp_path, "gpu.yaml", GPU_TIER_YAML.format(name=gpu_name, traits="CUSTOM_GPU_TIER_GOLD")
    )
    configs = tier.parent
    _restart(s, tmp_path, compute={"provider_config_location": str(configs)}, devices=GPUS)
    assert s.cycle(startup=True).ok
    gpu = s.uuid(gpu_name)
    _put_trait(s.base, gpu, "CUSTOM_GPU_RACK_7")
    assert s.cycle().ok
    traits = set(http_get(s.base, f"/resource_providers/{gpu}/traits")["traits"])
    assert {"CUSTOM_GPU_TIER_GOLD", "CUSTOM_GPU_RACK_7"} <= traits

    tier.write_text(GPU_TIER_YAML.format(name=gpu_name, traits=""))
    if not remembered:
        for stored in (tmp_path / "state" / "child_traits").iterdir():
            stored.unlink()
    _restart(s, tmp_path, compute={"provider_config_location": str(configs)}, devices=GPUS)
    assert s.cycle(startup=True).ok
    traits = set(http_get(s.base, f"/resource_providers/{gpu}/traits")["traits"])
    assert "CUSTOM_GPU_RACK_7" in traits
    assert ("CUSTOM_GPU_TIER_GOLD" in traits) is not remembered


def test_a_reload_with_a_bad_file_keeps_the_running_configuration(tmp_path, served):
    """SIGHUP's path (Service.reload): a refused file leaves the previous components
    running (the licence stays as it was); a good one then takes effect. A Placement
    of its own (a process): the service's thread and the test's reads never meet in
    one SQLite file inside this process ("database is locked")."""
    nodename = unique("pc")
    host = (
        HostDescription.load(BIG_HOST)
        .rename(nodename)
        .prefix_instances(str(uuidlib.uuid4())[:-2])
        .write(tmp_path / "host.yaml")
    )
    licences = provider_config(tmp_path, "licences.yaml", PROVIDER_YAML)
    configs = licences.parent
    ini = tmp_path / "c.conf"
    ini.write_text(
        f"[DEFAULT]\nstate_path = {tmp_path / 'state'}\nupdate_interval = 1\n"
        f"update_jitter = 0\n[compute]\ndriver = fake\nprovider_config_location = {configs}\n"
        f"[metrics]\nlisten =\n[fake]\nhost_file = {host}\n"
        f"[placement]\nauth_type = admin_token\nendpoint = {served.url}\ntoken = admin\n"
        "noauth_roles = admin,service\n"
    )
    service = Service(lambda: agent_config.load([str(ini)]), install_signals=False)
    thread = threading.Thread(target=service.run, daemon=True)
    thread.start()

    def licence_total() -> int | None:
        found = http_get(served.url, "/resource_providers", name=nodename)
        if not found["resource_providers"]:
            return None
        root = found["resource_providers"][0]["uuid"]
        inventories = http_get(served.url, f"/resource_providers/{root}/inventories")
        return inventories["inventories"].get("CUSTOM_LICENSE_WINDOWS", {}).get("total")

    try:
        wait_for("the licence", lambda: licence_total() == 2)
        licences.write_text(PROVIDER_YAML.replace("CUSTOM_LICENSE_WINDOWS", "VCPU"))
        service.reload()
        cycles = service.cycles
        wait_for("two cycles after the refused reload", lambda: service.cycles >= cycles + 2)
        assert service.last_outcome is not None and service.last_outcome.ok
        assert licence_total() == 2
        licences.write_text(PROVIDER_YAML.replace("total: 2", "total: 5"))
        service.reload()
        wait_for("the new licence count", lambda: licence_total() == 5)
    finally:
        service.stop()
        thread.join(30)
