"""nova-compute 34 beside the agent: nova's own resource tracker on a real Placement.

The judge of issue 32. One long-lived process (``python -m tests.helpers.nova_compute
DATABASE``, one host at a time, fed JSON commands one a line on stdin, answering one
JSON line each on stdout; driven from pytest by :class:`NovaCompute`) runs, unchanged,
nova 34's own code for the host's side of nova:

* ``LibvirtDriver`` on nova's fakelibvirt for a :data:`tests.helpers.nova_libvirt.HOSTS`
  host, set up as nova's functional libvirt tests do
  (:func:`~tests.helpers.nova_libvirt.nova_driver`),
  so the agent's libvirt driver, reading the fixture the same fakelibvirt connection
  serves (``python -m tests.helpers.nova_libvirt fixture``), sees the same host;
* ``ResourceTracker`` with its own ``SchedulerReportClient`` on the test's Placement
  (keystoneauth ``Adapter`` with ``endpoint_override``, noauth2 admin headers);
* nova's own main database (SQLite, tests/fixtures/nova/cell_schema.sql: made by nova's
  migrations) and its own ``compute_id`` file in its ``[DEFAULT] state_path``
  (``nova/virt/node.py``), with ``[DEFAULT] update_resources_interval = -1``.

Commands (``host`` first; each answer: ``ok``, ``error`` when not ok, ``requests`` and
``scheduler_requests``: ``[method, path, status]`` of every request nova-compute and
nova's scheduler sent to Placement during the command, ``written``: nova-compute's
request bodies of its writes, ``node_uuid``: the tracker's compute node UUID):

* ``host`` ``{scenario, placement, libvirt_version, instances_path, state_path,
  options, nodename}``: a host nova-compute never ran on (its database emptied), named
  ``nodename`` (libvirt's hostname, nova's ``[DEFAULT] host``; default
  :data:`~tests.helpers.nova_libvirt.NODENAME`).
* ``start``: nova-compute's start-up as far as the resource tracker goes, in nova's order
  (``nova/service.py`` ``Service.start``): the service record is read;
  ``ComputeManager.init_host``'s node part (``driver.init_host``,
  ``_ensure_existing_node_identity`` for a known service else ``_sanity_check_new_host``,
  ``_get_nodes``: the node identity from ``nova/virt/node.py``, ``_check_for_host_rename``);
  the service record created when new; ``pre_start_hook``
  (``ComputeManager.update_available_resource(startup=True)``). A second ``start`` is a
  nova-compute restart: every object (driver, report client and its provider-tree cache,
  tracker, nova's cached node UUID) is new; the database and ``compute_id`` stay.
* ``claim`` ``{"instance": UUID, "vcpus", "memory_mb", "root_gb"}``: nova's scheduler (a
  report client of its own, as the scheduler is another process) asks
  ``GET /allocation_candidates`` in the compute node's tree (the tracker's ``ComputeNode``
  UUID) and runs ``scheduler.utils.claim_resources``; then nova-compute's cache is expired
  as after ``[compute] resource_provider_association_refresh`` (300) seconds, the instance
  is created in nova's database, its allocations read (``get_allocations_for_consumer``,
  as ``_build_and_run_instance`` does) and ``ResourceTracker.instance_claim`` runs (its
  ``_update`` -> ``_update_to_placement``).
* ``refresh``: what every claim of nova-compute's tracker ends with (``instance_claim``,
  ``resize_claim``, ``rebuild_claim``, dropping a move claim: ``ResourceTracker._update``
  -> ``_update_to_placement``), its provider-tree cache expired as in ``claim``: the
  host's tree is read and written wherever it differs from nova's; nova's in-memory
  usage bookkeeping of the claim, which never reaches Placement, is left out.
* ``stop``: the process exits.

A call fails (``ok`` false) when nova raises, or logs an error (the compute manager logs
and swallows a failed ``update_available_resource``), or gets no candidate.

nova's fixtures patch process-wide state (nova's global ``CONF``, the libvirt module of
its driver), hence a process of its own, as :mod:`tests.helpers.nova_libvirt`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sqlite3
import subprocess
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any
from unittest import mock

from tests.helpers.nova_libvirt import HOSTS, NODENAME, nova_driver
from tests.helpers.paths import NOVA, REPO

REFRESH = 300
"""nova's ``[compute] resource_provider_association_refresh`` default, seconds."""

Request = tuple[str, str, int]


def writes(requests: list[Request]) -> list[Request]:
    """The requests of ``requests`` that change something (every method but GET)."""
    return [r for r in requests if r[0] != "GET"]


class NovaCompute:
    """Drives one nova-compute process (module docstring) from the test; one process serves
    one host at a time (:meth:`host`), so a test module can share it.

    Args:
        workdir: the process's directory: nova's database and its log.
    """

    def __init__(self, workdir: Path) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.workdir = workdir
        self.log = (workdir / "nova-compute.log").open("w")
        self.proc = subprocess.Popen(
            [
                *(sys.executable, "-W", "ignore", "-m", "tests.helpers.nova_compute"),
                str(workdir / "nova.sqlite"),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            cwd=REPO,
        )

    def host(
        self,
        state_path: Path,
        scenario: str,
        placement: str,
        libvirt_version: int,
        instances_path: Path,
        options: dict[str, dict[str, Any]] | None = None,
        nodename: str = NODENAME,
    ) -> None:
        """A new host for this process: nova-compute was never started there (its database
        emptied, its ``state_path`` as given), named ``nodename``.

        Args:
            state_path: nova's ``[DEFAULT] state_path`` (``compute_id``).
            scenario: a :data:`~tests.helpers.nova_libvirt.HOSTS` name.
            placement: Placement's URL.
            libvirt_version: what fakelibvirt answers ``getLibVersion`` (the agent's libvirt's).
            instances_path: nova's ``instances_path`` (the agent's: one disk measured).
            options: more nova options, ``{group: {name: value}}`` (``DEFAULT`` for none).
        """
        state_path.mkdir(parents=True, exist_ok=True)
        answer = self.call(
            "host",
            scenario=scenario,
            placement=placement,
            libvirt_version=libvirt_version,
            instances_path=str(instances_path),
            state_path=str(state_path),
            options=options or {},
            nodename=nodename,
        )
        assert answer["ok"], answer

    def call(self, op: str, **args: Any) -> dict[str, Any]:
        """Send one command; its answer (module docstring).

        Raises:
            RuntimeError: the process died (its log's tail says why).
        """
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"op": op, **args}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            tail = (self.workdir / "nova-compute.log").read_text()[-3000:]
            raise RuntimeError(f"nova-compute exited ({self.proc.wait()}): {tail}")
        return json.loads(line)

    def log_text(self) -> str:
        """What nova logged so far (warnings and above)."""
        if not self.log.closed:
            self.log.flush()
        return (self.workdir / "nova-compute.log").read_text()

    def close(self) -> None:
        """Stop the process."""
        if self.proc.poll() is None:
            with contextlib.suppress(Exception):
                self.call("stop")
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


# ---- inside the nova-compute process --------------------------------------------------


class _Errors(logging.Handler):
    """Notes every record of level ERROR or above nova logs (a swallowed failure)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def _adapter(base: str, seen: list[Request], bodies: list[Any]) -> Any:
    from keystoneauth1 import adapter as ks_adapter
    from keystoneauth1 import session as ks_session

    from agent.placement.embedded import NOAUTH_HEADERS

    class Recording(ks_adapter.Adapter):
        def request(self, url: str, method: str, **kwargs: Any) -> Any:
            resp = super().request(url, method, **kwargs)
            seen.append((method, url.removeprefix(base), resp.status_code))
            if method != "GET":
                bodies.append(kwargs.get("json"))
            return resp

    session = ks_session.Session(auth=None, additional_headers=dict(NOAUTH_HEADERS))
    return Recording(session, service_type="placement", endpoint_override=base, raise_exc=False)


class _Compute:
    """nova-compute's objects for one life of the service (module docstring)."""

    def __init__(self, database: Path) -> None:
        from nova import context as nova_context
        from nova import objects

        objects.register_all()
        self.database = database
        with sqlite3.connect(database) as con:
            con.executescript((NOVA / "cell_schema.sql").read_text())
        self.config: dict[str, Any] = {}
        self.options: dict[str, dict[str, Any]] = {}
        self.context = nova_context.get_admin_context()
        self.compute_requests: list[Request] = []
        self.scheduler_requests: list[Request] = []
        self.bodies: list[Any] = []
        self.stack: contextlib.ExitStack | None = None
        self.manager: Any = None

    def host(self, **config: Any) -> None:
        """A host nova-compute never ran on (:meth:`NovaCompute.host`)."""
        from nova import conf as nova_conf

        self.close()
        conf = nova_conf.CONF
        # The last host's options, its scenario's included (nova_driver sets both).
        last = [*self.options.items(), *(self.scenario.options.items() if self.config else [])]
        for group, values in last:
            for name in values:
                if group != "database":
                    conf.clear_override(name, group=None if group == "DEFAULT" else group)
        with sqlite3.connect(self.database) as con:
            tables = con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            for (table,) in list(tables):
                if table != "alembic_version" and not table.startswith("sqlite_"):
                    con.execute(f"DELETE FROM {table}")  # the schema's own table names
        self.config = config
        self.nodename = config.get("nodename", NODENAME)
        self.scenario = HOSTS[config["scenario"]]
        self.options = {
            "DEFAULT": {
                "host": self.nodename,
                "compute_driver": "libvirt.LibvirtDriver",
                "state_path": config["state_path"],
                "update_resources_interval": -1,
            },
            "database": {"connection": f"sqlite:///{self.database}"},
        }
        for group, values in config["options"].items():
            self.options.setdefault(group, {}).update(values)
        self.manager = None

    def close(self) -> None:
        """nova-compute stops (its fakelibvirt fixture undone)."""
        if self.stack is not None:
            self.stack.close()
            self.stack = None

    # One life of nova-compute.
    def start(self) -> None:
        import nova.conf
        import nova.virt.node
        from nova import objects
        from nova.compute import manager as compute_manager
        from nova.compute import resource_tracker
        from nova.scheduler.client import report

        self.close()
        nova.virt.node.LOCAL_NODE_UUID = None  # a new process reads compute_id again
        self.stack = contextlib.ExitStack()
        driver = self.stack.enter_context(
            nova_driver(
                self.scenario,
                self.config["instances_path"],
                self.config["libvirt_version"],
                self.options,
                self.nodename,
            )
        )
        client = report.SchedulerReportClient(
            adapter=_adapter(self.config["placement"], self.compute_requests, self.bodies)
        )
        rt = resource_tracker.ResourceTracker(self.nodename, driver, reportclient=client)
        manager = types.SimpleNamespace(
            host=self.nodename, driver=driver, rt=rt, reportclient=client
        )
        for name in (
            "_get_compute_nodes_in_db",
            "_update_available_resource_for_node",
            "_get_nodes",
        ):
            setattr(
                manager,
                name,
                types.MethodType(getattr(compute_manager.ComputeManager, name), manager),
            )
        self.manager = manager
        service = objects.Service.get_by_host_and_binary(
            self.context, self.nodename, "nova-compute"
        )
        # ComputeManager.init_host, its node part (and the options it registers).
        nova.conf.neutron.register_dynamic_opts(nova.conf.CONF)
        nova.conf.devices.register_dynamic_opts(nova.conf.CONF)
        driver.init_host(host=self.nodename)
        if service is not None:
            compute_manager.ComputeManager._ensure_existing_node_identity(manager, service)
        else:
            compute_manager.ComputeManager._sanity_check_new_host(manager)
        nodes = manager._get_nodes(self.context)
        compute_manager.ComputeManager._check_for_host_rename(manager, nodes)
        if service is None:  # nova/service.py _create_service_ref (no notification bus here)
            service = objects.Service(
                self.context,
                host=self.nodename,
                binary="nova-compute",
                topic="compute",
                report_count=0,
            )
            with mock.patch.object(objects.Service, "_send_notification"):
                service.create()
        # ComputeManager.pre_start_hook.
        rt.set_service_ref(service)
        compute_manager.ComputeManager.update_available_resource(
            manager, self.context, startup=True
        )

    def claim(self, instance: str, vcpus: int, memory_mb: int, root_gb: int) -> None:
        from nova import exception, objects
        from nova.scheduler import utils as scheduler_utils
        from nova.scheduler.client import report

        rt = self.manager.rt
        node = rt.compute_nodes[self.nodename]
        flavor = objects.Flavor(
            flavorid="f1",
            name="f1",
            vcpus=vcpus,
            memory_mb=memory_mb,
            root_gb=root_gb,
            ephemeral_gb=0,
            swap=0,
            extra_specs={},
        )
        # nova's scheduler: another process, its own report client.
        scheduler = report.SchedulerReportClient(
            adapter=_adapter(self.config["placement"], self.scheduler_requests, [])
        )
        spec = objects.RequestSpec(
            flavor=flavor,
            image=objects.ImageMeta(properties=objects.ImageMetaProps()),
            project_id="p",
            user_id="u",
            is_bfv=False,
        )
        request = scheduler_utils.ResourceRequest.from_request_spec(spec)
        request.get_request_group(None).in_tree = node.uuid
        candidates, _summaries, version = scheduler.get_allocation_candidates(self.context, request)
        if not candidates:
            raise exception.NoValidHost(reason=f"no allocation candidate in {node.uuid}")
        if not scheduler_utils.claim_resources(
            self.context, scheduler, spec, instance, candidates[0], version
        ):
            raise exception.NoValidHost(reason="claim_resources answered false")
        self._expire_cache()
        inst = objects.Instance(
            context=self.context,
            uuid=instance,
            project_id="p",
            user_id="u",
            flavor=flavor,
            instance_type_id=1,
            vcpus=vcpus,
            memory_mb=memory_mb,
            root_gb=root_gb,
            ephemeral_gb=0,
            vm_state="building",
            task_state=None,
            power_state=0,
            numa_topology=None,
            pci_requests=objects.InstancePCIRequests(requests=[]),
            system_metadata={},
            metadata={},
        )
        inst.create()
        allocations = rt.reportclient.get_allocations_for_consumer(self.context, instance)
        rt.instance_claim(self.context, inst, self.nodename, allocations)

    def _expire_cache(self) -> None:
        """nova-compute's provider-tree cache, as after REFRESH seconds."""
        times = self.manager.rt.reportclient._association_refresh_time
        for uuid in times:
            times[uuid] -= REFRESH + 1

    def refresh(self) -> None:
        """The tail of every claim (module docstring, ``refresh``): ``ResourceTracker._update``
        of the compute node, after REFRESH seconds."""
        rt = self.manager.rt
        self._expire_cache()
        rt._update(self.context, rt.compute_nodes[self.nodename])

    def node_uuid(self) -> str | None:
        node = self.manager.rt.compute_nodes.get(self.nodename) if self.manager else None
        return node.uuid if node is not None else None


def _serve(database: Path, commands: IO[str], answers: IO[str]) -> None:
    errors = _Errors()
    logging.getLogger("nova").addHandler(errors)
    compute = _Compute(database)
    for line in commands:
        command = json.loads(line)
        op = command.pop("op")
        if op == "stop":
            break
        errors.messages.clear()
        compute.compute_requests.clear()
        compute.scheduler_requests.clear()
        compute.bodies.clear()
        answer: dict[str, Any] = {"ok": True}
        try:
            getattr(compute, op)(**command)
        except Exception as exc:
            logging.getLogger(__name__).exception("%s failed", op)
            answer = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        if errors.messages and answer["ok"]:
            answer = {"ok": False, "error": "; ".join(errors.messages)}
        answer["requests"] = compute.compute_requests
        answer["scheduler_requests"] = compute.scheduler_requests
        answer["written"] = compute.bodies
        answer["node_uuid"] = compute.node_uuid()
        answers.write(json.dumps(answer) + "\n")
        answers.flush()
    compute.close()


@contextlib.contextmanager
def _quiet_stdout() -> Iterator[IO[str]]:
    """The answers' channel: the real stdout; whatever else prints goes to stderr."""
    real = sys.stdout
    sys.stdout = sys.stderr
    try:
        yield real
    finally:
        sys.stdout = real


def main(argv: list[str]) -> int:
    """``DATABASE``: nova's SQLite file (created with nova's schema)."""
    if len(argv) != 1:
        print("usage: python -m tests.helpers.nova_compute DATABASE", file=sys.stderr)
        return 2
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    with _quiet_stdout() as answers:
        _serve(Path(argv[0]), sys.stdin, answers)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
