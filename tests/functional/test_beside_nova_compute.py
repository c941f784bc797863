"""nova-compute 34 beside the agent on one host, one real Placement (issue 32).

nova's side is nova's own code (:mod:`tests.helpers.nova_compute`: ``ResourceTracker``,
``LibvirtDriver`` on fakelibvirt, ``SchedulerReportClient``, its own database and
``compute_id``, ``update_resources_interval = -1``), in a process of its own. The
agent's side: its libvirt driver on libvirt's test driver reading what the same
fakelibvirt connection serves, configured with nova's options and nova's ``state_path``
(as on a host where the agent reads nova.conf).

A round: nova's scheduler claims and nova-compute's ``instance_claim`` runs with its
provider-tree cache expired (as claims 300 s apart), then one agent cycle; nova-compute
restarts after the second round. In the last round neither side writes anything and
every nova call succeeds. Each host in both start orders: the agent first (a new host
where the agent creates the compute node) and nova-compute first.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import uuid as uuidlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import libvirt
import pytest

from agent.placement.report import ReportClient
from agent.state.store import StateStore
from agent.tracker.cycle import ResourceTracker
from drivers.libvirt import LibvirtDriver
from tests.helpers.libvirt_fixtures import make_conf
from tests.helpers.nova_compute import NovaCompute, writes
from tests.helpers.nova_libvirt import HOSTS, NODENAME
from tests.helpers.paths import LIBVIRT, REPO
from tests.helpers.placement_http import http, http_get
from tests.helpers.served import ServedPlacement
from tests.helpers.sync import remote_client

ROUNDS = 3
RESTART_AFTER = 2
"""nova-compute restarts after this round."""

PROVIDER_CONFIG = """\
meta:
  schema_version: '1.0'
providers:
  - identification:
      name: $COMPUTE_NODE
    inventories:
      additional:
        - CUSTOM_LICENSED_WINDOWS:
            total: 4
            max_unit: 1
    traits:
      additional:
        - CUSTOM_GOLD
"""
"""A provider config file (nova's schema, ``[compute] provider_config_location``)."""


class Agent:
    """The agent on the host nova sees, sharing nova's ``state_path`` (nova.conf)."""

    def __init__(
        self, tmp_path: Path, host: str, state: Path, options: dict[str, Any], **store: Any
    ) -> None:
        scenario = HOSTS[host]
        fixture = scenario.fixture
        groups: dict[str, dict[str, Any]] = {
            group: dict(values) for group, values in scenario.options.items()
        }
        for group, values in options.items():
            groups.setdefault(group, {}).update(values)
        domcaps = [
            LIBVIRT / fixture / "domcapabilities.xml",
            *sorted((LIBVIRT / fixture).glob("domcapabilities-*.xml")),
        ]
        groups.setdefault("libvirt", {})["domain_capabilities_file"] = ",".join(map(str, domcaps))
        if (LIBVIRT / fixture / "sysfs").is_dir():  # the kernel's kvm_amd parameters (SEV)
            groups.setdefault("host_driver", {})["sysfs_root"] = str(LIBVIRT / fixture / "sysfs")
        default = groups.pop("DEFAULT", {})
        self.conf = make_conf(
            tmp_path,
            fixture,
            DEFAULT={
                "host": NODENAME,
                "state_path": str(state),
                "reserved_host_memory_mb": 512,
                "instances_path": str(tmp_path / "instances"),
                **default,
            },
            **groups,
        )
        self.tmp_path = tmp_path
        self.store = store  # StateStore's arguments beyond the state directory

    def cycle(self, url: str, startup: bool = False) -> tuple[bool, int]:
        """One cycle of a fresh agent process (``startup``) or of the running one:
        (ok, the number of writes it sent)."""
        if startup or not hasattr(self, "tracker"):
            state = StateStore(self.conf.state_path, **self.store)
            client = remote_client(self.tmp_path, url)
            self.report = ReportClient(client, state, sleep=lambda _s: None)
            self.tracker = ResourceTracker(self.conf, LibvirtDriver(self.conf), self.report, state)
        client = self.report.client
        before = sum(n for (method, _t), n in client.counts.items() if method != "GET")
        outcome = self.tracker.update_available_resource(startup)
        after = sum(n for (method, _t), n in client.counts.items() if method != "GET")
        return outcome.ok, after - before


@pytest.fixture(scope="module")
def placement(tmp_path_factory):
    """One Placement for the module; each test leaves it empty (:func:`_emptied`)."""
    served = ServedPlacement(tmp_path_factory.mktemp("placement"))
    served.start()
    yield served
    served.stop()


@pytest.fixture(scope="module")
def nova(tmp_path_factory):
    """One nova-compute process for the module, a new host per test."""
    compute = NovaCompute(tmp_path_factory.mktemp("nova-compute"))
    yield compute
    compute.close()


def _emptied(url: str) -> None:
    """Every allocation and provider removed (the next test's host has the same name)."""
    listing = http_get(url, "/resource_providers")["resource_providers"]
    consumers = set()
    for p in listing:
        consumers |= set(
            http_get(url, f"/resource_providers/{p['uuid']}/allocations")["allocations"]
        )
    for consumer in consumers:
        http(url, "DELETE", f"/allocations/{consumer}")
    left = {p["uuid"]: p["parent_provider_uuid"] for p in listing}
    while left:
        leaves = [u for u in left if u not in left.values()]
        for uuid in leaves:
            http(url, "DELETE", f"/resource_providers/{uuid}")
            del left[uuid]


def _roots(url: str) -> list[tuple[str, str]]:
    listing = http_get(url, "/resource_providers")["resource_providers"]
    return [(p["name"], p["uuid"]) for p in listing if p["parent_provider_uuid"] is None]


@contextlib.contextmanager
def _cleaned(url: str, nova: NovaCompute | None = None) -> Iterator[None]:
    """Afterwards, whatever happened: the host's nova-compute closed (when given) and
    Placement emptied for the next test (:func:`_emptied`)."""
    try:
        yield
    finally:
        if nova is not None:
            nova.call("close")
        _emptied(url)


def _libvirt_hostname() -> str:
    """libvirt's hostname: nova's name for the compute node."""
    conn = libvirt.open("test:///default")
    try:
        return conn.getHostname()
    finally:
        conn.close()


def _nova_uses(nova: NovaCompute, state: Path, url: str, instances: Path, root: str) -> None:
    """nova-compute started on the plain host after the agent uses the agent's compute node
    ``root`` (its compute_id), and a claim succeeds; Placement holds that one node."""
    nova.host(state, "plain", url, libvirt.getVersion(), instances)
    started = nova.call("start")
    assert started["ok"] and started["node_uuid"] == root, started
    _claim(nova, 1)
    assert _roots(url) == [(NODENAME, root)]


def _claim(nova: NovaCompute, n: int) -> dict[str, Any]:
    claim = nova.call("claim", instance=str(uuidlib.uuid4()), vcpus=1, memory_mb=256, root_gb=1)
    assert claim["ok"], (n, claim)
    return claim


def _started(
    tmp_path: Path,
    nova: NovaCompute,
    url: str,
    host: str,
    agent_first: bool,
    options: dict[str, Any],
) -> tuple[Agent, str]:
    """Both started on a new host in the order given; (the agent, compute_id's UUID) once
    both name the compute node alike."""
    instances = tmp_path / "instances"
    instances.mkdir(parents=True)
    state = tmp_path / "nova"
    nova.host(state, host, url, libvirt.getVersion(), instances, options)
    agent = Agent(tmp_path, host, state, options)
    if agent_first:
        assert agent.cycle(url, startup=True)[0]
    started = nova.call("start")
    assert started["ok"], started
    if not agent_first:
        assert agent.cycle(url, startup=True)[0]
    # One compute node, one UUID: nova's compute_id, nova's database, Placement's.
    compute_id = (state / "compute_id").read_text().strip()
    assert _roots(url) == [(NODENAME, compute_id)]
    assert started["node_uuid"] == compute_id
    return agent, compute_id


def _beside(
    tmp_path: Path,
    nova: NovaCompute,
    url: str,
    host: str,
    agent_first: bool,
    children: frozenset[str] = frozenset(),
    **options: Any,
) -> None:
    """Both start orders' rounds (module docstring) on ``host``; asserts the last is quiet."""
    with _cleaned(url, nova):
        agent, compute_id = _started(tmp_path, nova, url, host, agent_first, options)
        names = {p["name"] for p in http_get(url, "/resource_providers")["resource_providers"]}
        assert children <= names, (children, names)
        for n in range(1, ROUNDS + 1):
            before = _snapshot(url)
            claim = _claim(nova, n)
            ok, agent_writes = agent.cycle(url)
            assert ok, n
            if n == RESTART_AFTER:
                restarted = nova.call("start")
                assert restarted["ok"], restarted
                assert restarted["node_uuid"] == compute_id
                agent.cycle(url)
        # The last round: nova's claim and the agent's cycle write nothing but the claim.
        print(
            f"\n{host}, {'agent' if agent_first else 'nova-compute'} first: a nova claim beside "
            f"an unchanged agent host costs {len(claim['scheduler_requests'])} scheduler "
            f"requests ({len(writes(claim['scheduler_requests']))} write: the claim) and "
            f"{len(claim['requests'])} nova-compute requests "
            f"({len(writes(claim['requests']))} writes); the agent's cycle wrote {agent_writes}"
        )
        changed = _changed(before, claim)
        assert writes(claim["requests"]) == [], (writes(claim["requests"]), changed)
        assert agent_writes == 0
        # Quiet because the two agree, not because the agent gave way: no field yielded.
        yielded = agent.report.writer.ledgers.of(NODENAME).yields()
        assert yielded == [], [y.describe() for y in yielded]
        assert _roots(url) == [(NODENAME, compute_id)]


def _snapshot(url: str) -> dict[str, dict[str, Any]]:
    """``{provider UUID: {"name", "traits", "inventories"}}`` in Placement now."""
    out = {}
    for p in http_get(url, "/resource_providers")["resource_providers"]:
        base = f"/resource_providers/{p['uuid']}"
        out[p["uuid"]] = {
            "name": p["name"],
            "traits": set(http_get(url, base + "/traits")["traits"]),
            "inventories": http_get(url, base + "/inventories")["inventories"],
        }
    return out


def _changed(before: dict[str, dict[str, Any]], claim: dict[str, Any]) -> list[str]:
    """What nova-compute's writes of ``claim`` changed against ``before``, in words."""
    out = []
    sent = zip(writes(claim["requests"]), claim["written"], strict=True)
    for (method, path, _status), body in sent:
        parts = path.split("?")[0].strip("/").split("/")
        held = before.get(parts[1], {}) if len(parts) > 1 else {}
        name = held.get("name", path)
        if parts[-1] == "traits" and body:
            new = set(body["traits"])
            out.append(
                f"{name} traits +{sorted(new - held['traits'])} -{sorted(held['traits'] - new)}"
            )
        elif parts[-1] == "inventories" and body:
            old = held.get("inventories", {})
            new = body["inventories"]
            diff = {
                rc: (old.get(rc), new.get(rc))
                for rc in set(old) | set(new)
                if {k: v for k, v in (old.get(rc) or {}).items() if k in (new.get(rc) or {})}
                != new.get(rc)
            }
            out.append(f"{name} inventories {diff}")
        else:
            out.append(f"{method} {path} {body}")
    return out


def test_one_compute_node_whoever_starts_first(tmp_path, placement, nova):
    """Item 1 of issue 32: the agent first on a new host (it writes nova's compute_id and
    creates the compute node with it), then nova-compute first on another; in each,
    every nova call succeeds (start-up, claims with the cache expired, a restart) and
    Placement holds one compute node, compute_id's."""
    for agent_first in (True, False):
        order = tmp_path / ("agent-first" if agent_first else "nova-first")
        with _cleaned(placement.url, nova):
            agent, compute_id = _started(order, nova, placement.url, "plain", agent_first, {})
            _claim(nova, 1)
            assert agent.cycle(placement.url)[0]
            restarted = nova.call("start")
            assert restarted["ok"] and restarted["node_uuid"] == compute_id, restarted
            _claim(nova, 2)
            assert _roots(placement.url) == [(NODENAME, compute_id)]


def test_an_existing_agent_host_gets_novas_compute_id(tmp_path, placement, nova):
    """A host an earlier agent created without writing compute_id: the agent's next start
    writes it (the compute node's UUID), so nova-compute started afterwards uses it."""
    instances = tmp_path / "instances"
    instances.mkdir()
    state = tmp_path / "nova"
    state.mkdir()
    agent = Agent(tmp_path, "plain", state, {})
    with _cleaned(placement.url, nova):
        assert agent.cycle(placement.url, startup=True)[0]
        [(_name, root)] = _roots(placement.url)
        (state / "compute_id").unlink()  # as an agent before this change left the host
        assert agent.cycle(placement.url, startup=True)[0]
        assert (state / "compute_id").read_text().strip() == root
        _nova_uses(nova, state, placement.url, instances, root)


def test_agent_first_with_a_state_directory_of_its_own(tmp_path, placement, nova):
    """The agent keeps its state apart (``[DEFAULT] state_path``) and is told nova's
    (``[compute_agent] nova_state_path``): it writes nova's compute_id there, and
    nova-compute started afterwards uses the agent's compute node."""
    instances = tmp_path / "instances"
    instances.mkdir()
    state = tmp_path / "nova"
    agent = Agent(
        tmp_path,
        "plain",
        tmp_path / "agent",
        {"compute_agent": {"nova_state_path": str(state)}},
        nova_state_path=state,  # what the service passes (agent.state.node_identity.nova_identity)
    )
    with _cleaned(placement.url, nova):
        assert agent.cycle(placement.url, startup=True)[0]
        [(_name, root)] = _roots(placement.url)
        assert (state / "compute_id").read_text().strip() == root
        assert not (tmp_path / "agent" / "compute_id").exists()
        _nova_uses(nova, state, placement.url, instances, root)


@pytest.mark.parametrize("agent_first", [True, False], ids=["agent-first", "nova-first"])
def test_plain_host_either_start_order(tmp_path, placement, nova, agent_first):
    _beside(tmp_path, nova, placement.url, "plain", agent_first)


def test_vgpu_host(tmp_path, placement, nova):
    """Two mdev-capable GPUs offering nvidia-11: nova's ``{nodename}_pci_{address}``."""
    gpus = frozenset({f"{NODENAME}_pci_0000_81_00_0", f"{NODENAME}_pci_0000_81_01_0"})
    _beside(tmp_path, nova, placement.url, "vgpu", agent_first=False, children=gpus)


@pytest.mark.parametrize("host", ["pci", "pf-whole"])
def test_pci_in_placement_host(tmp_path, placement, nova, host):
    """A PF's VFs and whole devices in Placement (``[pci] report_in_placement``), and a PF
    a device_spec names itself: one whole device (``pf-whole``)."""
    _beside(tmp_path, nova, placement.url, host, agent_first=True)


@pytest.mark.parametrize("host", ["bluefield-vpd", "bluefield-no-vpd", "remote-managed"])
def test_remote_managed_vfs(tmp_path, placement, nova, host):
    """Remote-managed VFs (neutron's ports), offered by nova, with
    ``COMPUTE_REMOTE_MANAGED_PORTS``, only with a VPD card serial number, the VF's own or
    its PF's (nova/pci/devspec.py, nova/virt/libvirt/host.py). A BlueField-2 with the serial
    on each or on none, ``[pci] report_in_placement`` off as in nova's
    ``RemoteManagedServersTest`` (nova 34 refuses to start with it when a device_spec names
    both a PF and its VFs: ``PlacementPciDependentDeviceException``); and two cards in
    Placement, the serial on one PF only (``remote-managed``)."""
    _beside(tmp_path, nova, placement.url, host, agent_first=True)


def test_sev_host(tmp_path, placement, nova):
    """AMD SEV: nova's ``{nodename}_amd_sev`` child with MEM_ENCRYPTION_CONTEXT."""
    sev = frozenset({f"{NODENAME}_amd_sev"})
    _beside(tmp_path, nova, placement.url, "sev", agent_first=True, children=sev)


def test_vtpm_host(tmp_path, placement, nova):
    """``[libvirt] swtpm_enabled``: the TPM and secret-security traits on the compute node."""
    _beside(tmp_path, nova, placement.url, "vtpm", agent_first=False)


def test_provider_config_file(tmp_path, placement, nova):
    """One provider config file both read (``[compute] provider_config_location``)."""
    configs = tmp_path / "provider_config"
    configs.mkdir()
    (configs / "windows.yaml").write_text(PROVIDER_CONFIG)
    options = {"compute": {"provider_config_location": str(configs)}}
    _beside(tmp_path, nova, placement.url, "plain", agent_first=True, **options)


def _run(conf: Path, *command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agent.cli.main", *command, "--config", str(conf)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        check=False,
    )


def _numa_conf(
    tmp_path: Path,
    url: str,
    nova_compute: str,
    numa: bool = True,
    host: str = NODENAME,
    shared_storage: bool = False,
) -> Path:
    fixture = LIBVIRT / "nova-fakelibvirt-plain"
    path = tmp_path / "compute-agent.conf"
    path.write_text(
        f"[DEFAULT]\nhost = {host}\nstate_path = {tmp_path / 'state'}\n"
        f"instances_path = {tmp_path}\n"
        f"[compute]\ndriver = libvirt\nshared_storage = {shared_storage}\n"
        f"[libvirt]\nconnection_uri = test://{fixture / 'host.xml'}\n"
        f"capabilities_file = {fixture / 'capabilities.xml'}\n"
        f"domain_capabilities_file = {fixture / 'domcapabilities.xml'}\n"
        f"[numa]\nmodel_in_placement = {numa}\n"
        f"[compute_agent]\nnova_compute = {nova_compute}\n"
        f"[placement]\nauth_type = admin_token\nendpoint = {url}\ntoken = admin\n"
        "noauth_roles = admin,service\n"
    )
    return path


def test_numa_is_refused_beside_nova_compute_with_nothing_written(tmp_path, placement):
    """``[compute_agent] nova_compute = true``: ``run`` exits 2 with one line naming the
    option, why and the way back to flat; Placement holds nothing. ``discover`` still shows
    the NUMA layout."""
    conf = _numa_conf(tmp_path, placement.url, "true")
    done = _run(conf, "run", "--once")
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "[numa] model_in_placement" in lines[0]
    assert "nova-compute" in lines[0] and "reshapes an existing NUMA tree back to flat" in lines[0]
    assert http_get(placement.url, "/resource_providers")["resource_providers"] == []
    shown = _run(conf, "discover")
    assert shown.returncode == 0, shown.stderr
    assert f"{NODENAME}_NUMA0" in shown.stdout and f"{NODENAME}_NUMA1" in shown.stdout


def test_numa_is_refused_when_a_nova_compute_process_runs(tmp_path, placement, nova_compute_lock):
    """``auto`` (the default): a process named nova-compute on the host is the evidence
    (psutil); without it the NUMA tree is the agent's to write."""
    conf = _numa_conf(tmp_path, placement.url, "auto")
    script = tmp_path / "bin" / "nova-compute"
    script.parent.mkdir()
    script.write_text("import time\ntime.sleep(120)\n")
    proc = subprocess.Popen([sys.executable, str(script)])
    try:
        done = _run(conf, "run", "--once")
    finally:
        proc.terminate()
        proc.wait()
    assert done.returncode == 2, done.stderr
    assert f"pid {proc.pid} is nova-compute" in done.stderr
    assert http_get(placement.url, "/resource_providers")["resource_providers"] == []


def test_shared_storage_is_refused_beside_nova_compute_with_nothing_written(tmp_path, placement):
    """The agent leaves DISK_GB off the compute node on shared storage; nova 34's libvirt
    driver writes it back at every claim (bug 1784020): ``run`` exits 2 in one line naming
    the instances path's storage and ``[compute] shared_storage``; alone, it runs."""
    host = _libvirt_hostname()  # nova's name for the compute node (checked before)
    conf = _numa_conf(tmp_path, placement.url, "true", False, host, shared_storage=True)
    done = _run(conf, "run", "--once")
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "shared storage" in lines[0] and "[compute] shared_storage" in lines[0]
    assert "bug 1784020" in lines[0]
    assert http_get(placement.url, "/resource_providers")["resource_providers"] == []
    alone = _numa_conf(tmp_path, placement.url, "false", False, host, shared_storage=True)
    with _cleaned(placement.url):
        done = _run(alone, "run", "--once")
        assert done.returncode == 0, done.stderr
        (root,) = http_get(placement.url, f"/resource_providers?name={host}")["resource_providers"]
        inventories = http_get(placement.url, f"/resource_providers/{root['uuid']}/inventories")
        assert "DISK_GB" not in inventories["inventories"]


def test_beside_nova_compute_the_agents_host_is_libvirts_hostname(tmp_path, placement):
    """nova names the compute node after libvirt's hostname: beside nova-compute, another
    ``[DEFAULT] host`` is refused at start-up (exit 2, one line, nothing written); libvirt's
    hostname runs."""
    hostname = _libvirt_hostname()
    conf = _numa_conf(tmp_path, placement.url, "true", numa=False)
    done = _run(conf, "run", "--once")
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"compute-agent run: [DEFAULT] host = {NODENAME} is not libvirt's hostname {hostname}, "
        "the name nova-compute gives this compute node ([compute_agent] nova_compute = true): "
        f"set [DEFAULT] host = {hostname} in the agent's configuration (docs/deployment.md, "
        "'Beside nova-compute')"
    ]
    assert http_get(placement.url, "/resource_providers")["resource_providers"] == []
    conf = _numa_conf(tmp_path, placement.url, "true", numa=False, host=hostname)
    with _cleaned(placement.url):
        done = _run(conf, "run", "--once")
        assert done.returncode == 0, done.stderr
        assert [name for name, _uuid in _roots(placement.url)] == [hostname]
        compute_id = (tmp_path / "state" / "compute_id").read_text().strip()
        assert _roots(placement.url) == [(hostname, compute_id)]


def _sent(agent: Agent) -> int:
    """The writes the agent's client has sent so far."""
    return sum(n for (method, _t), n in agent.report.client.counts.items() if method != "GET")


@pytest.mark.parametrize("agent_first", [True, False], ids=["agent-first", "nova-first"])
def test_novas_tracker_beside_a_numa_layout_fails_the_cycle(tmp_path, placement, nova, agent_first):
    """Issue 40: an agent told nova-compute does not run (``nova_compute = false``) lays the
    host out on NUMA cells beside nova 34's own tracker. nova puts VCPU and MEMORY_MB back
    on the compute node (at its start, or at a claim); from then on every cycle of the
    agent, periodic or at a restart, fails before writing anything, in one line naming
    nova-compute's tracker; ``compute-agent status`` exits 2 (failed), not 1 (degraded).
    The way out the line gives (flat, ``nova_compute = true``) lays the host out flat, and
    nova's next claim and the agent's next cycle agree (agent first: no instance holds
    anything on the cells yet)."""
    url = placement.url
    wrong = {"numa": {"model_in_placement": True}, "compute_agent": {"nova_compute": "false"}}
    with _cleaned(url, nova):
        instances = tmp_path / "instances"
        instances.mkdir()
        state = tmp_path / "nova"
        nova.host(state, "plain", url, libvirt.getVersion(), instances, {})
        agent = Agent(tmp_path, "plain", state, wrong)
        if agent_first:
            assert agent.cycle(url, startup=True)[0]  # the cells, before nova starts
        assert nova.call("start")["ok"]
        if not agent_first:
            assert agent.cycle(url, startup=True)[0]  # reshaped onto the cells
            _claim(nova, 1)  # nova's tracker writes its compute node back
        for startup in (False, True):
            if startup:
                agent = Agent(tmp_path, "plain", state, wrong)  # a restarted agent
                agent.cycle(url, startup=True)  # builds its client: count from here
            before = _sent(agent)
            outcome = agent.tracker.update_available_resource(startup)
            assert outcome.status == "failed", outcome.summary()
            assert _sent(agent) == before  # nothing written: no fight, no reshape
            (node,) = outcome.nodes
            assert node.error.startswith(f"NovaTrackerBeside: compute node {NODENAME} ")
            assert "\n" not in node.error
            assert "MEMORY_MB, VCPU again while its NUMA cells" in node.error
            assert "nova-compute's resource tracker" in node.error
        # The service records it; `status` exits 2, with the line.
        (tmp_path / "service").mkdir()
        conf = _numa_conf(tmp_path / "service", url, "false", host=NODENAME)
        assert _run(conf, "run", "--once").returncode == 1
        status = _run(conf, "status")
        assert status.returncode == 2, status.stdout
        assert "nova-compute's resource tracker" in status.stdout
        assert "degraded" not in status.stdout.lower()
        if not agent_first:
            # nova's first claim holds VCPU and MEMORY_MB on a cell: a flat layout keeps
            # the cells while that allocation lasts (gone hardware in use), and the root
            # already holds what the flat layout wants, so no reshape moves it.
            return
        # The way out: flat beside nova-compute, declared.
        agent = Agent(tmp_path, "plain", state, {"compute_agent": {"nova_compute": "true"}})
        assert agent.cycle(url, startup=True)[0]
        held = {
            p["name"]: set(p["inventories"]) & {"VCPU", "PCPU", "MEMORY_MB"}
            for p in _snapshot(url).values()
        }
        assert {name for name, classes in held.items() if classes} == {NODENAME}, held
        claim = _claim(nova, 2)
        assert writes(claim["requests"]) == []
        assert agent.cycle(url) == (True, 0)
