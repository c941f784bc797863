"""The deployment files under systemd/ stay valid and in step with the code.

* the unit passes ``systemd-analyze verify`` and keeps the decisions that
  matter (docs/deployment.md says why each one is there);
* sysusers.d and tmpfiles.d files are applied to a scratch root;
* ``MemoryDenyWriteExecute=yes`` is safe for the agent's Python stack;
* ``systemd/compute-agent.conf.sample`` is what oslo-config-generator
  produces from the code today.
"""

from __future__ import annotations

import filecmp
import importlib.metadata
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agent.conf import catalog
from agent.service.exit_codes import EXIT_BAD_INPUT, EXIT_RESHAPE_FAILED, EXIT_RESHAPE_NEEDED
from tests.helpers.paths import EXAMPLES, REPO

SYSTEMD = REPO / "systemd"
UNIT = SYSTEMD / "compute-agent.service"
INSTALLED_BINARY = "/opt/compute-agent/bin/compute-agent"
VENV_BINARY = Path(sys.executable).parent / "compute-agent"


def required_tool(name: str) -> str:
    """The path of a systemd tool; `make test` installs the systemd package when it is missing."""
    path = shutil.which(name)
    assert path, f"{name} is not installed: run `make test`, which installs the systemd package"
    return path


def read_unit(path: Path) -> dict[str, dict[str, list[str]]]:
    """``{section: {key: [values in file order]}}`` of a systemd unit file.

    Not configparser: systemd allows a key more than once (list settings add
    up) and an empty assignment, which configparser mangles or refuses.
    """
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] | None = None
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
            continue
        key, sep, value = line.partition("=")
        assert sep and current is not None, f"{path.name}:{number}: not a unit line: {raw!r}"
        assert not value.endswith("\\"), f"{path.name}:{number}: continuation lines not expected"
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


def one(section: dict[str, list[str]], key: str) -> str:
    """The single value of ``key`` (fails when absent or set more than once)."""
    values = section.get(key)
    assert values is not None, f"{key}= missing from {UNIT.name}"
    assert len(values) == 1, f"{key}= set {len(values)} times in {UNIT.name}"
    return values[0]


def seconds(value: str) -> float:
    """A systemd time span in the forms this unit uses: ``300``, ``300s``, ``5min``."""
    for suffix, factor in (("min", 60), ("s", 1)):
        if value.endswith(suffix):
            return float(value[: -len(suffix)]) * factor
    return float(value)


def default_of(group: str, name: str) -> object:
    for g, opts in catalog.list_opts():
        for opt in opts:
            if g == group and opt.name == name:
                return opt.default
    raise AssertionError(f"no option [{group}] {name}")


@pytest.fixture(scope="module")
def service() -> dict[str, list[str]]:
    return read_unit(UNIT)["Service"]


# -- decisions the unit must keep ------------------------------------------


def test_unit_is_a_notify_service_with_the_watchdog(service):
    assert one(service, "Type") == "notify"
    assert one(service, "NotifyAccess") == "main"
    # The service pings at least every WatchdogSec/2; with the default cycle
    # every update_interval seconds, a healthy agent must never be killed.
    watchdog = seconds(one(service, "WatchdogSec"))
    assert watchdog >= 2 * default_of("DEFAULT", "update_interval")


def test_unit_runs_the_installed_agent_with_the_configuration_directory(service):
    exec_start = one(service, "ExecStart").split()
    config_dir = one(service, "ConfigurationDirectory")
    assert exec_start == [
        INSTALLED_BINARY,
        "run",
        "--config",
        f"/etc/{config_dir}/compute-agent.conf",
    ]


def test_exec_start_arguments_are_accepted_by_the_cli():
    from agent.cli.main import build_parser

    argv = one(read_unit(UNIT)["Service"], "ExecStart").split()[1:]
    args = build_parser().parse_args(argv)
    assert args.command == "run" and args.config == [argv[-1]]


def test_reload_sends_sighup_to_the_main_process(service):
    assert one(service, "ExecReload").split() == ["/bin/kill", "-HUP", "$MAINPID"]


def test_restart_policy_follows_the_exit_codes(service):
    assert one(service, "Restart") == "on-failure"
    prevented = {int(code) for code in one(service, "RestartPreventExitStatus").split()}
    # ReshapeFailed must not loop; a bad configuration fails again identically.
    assert {EXIT_RESHAPE_FAILED, EXIT_BAD_INPUT} <= prevented
    # ReshapeNeeded outside start-up is cured by a restart (start-up reshapes).
    assert EXIT_RESHAPE_NEEDED not in prevented


def test_state_directory_is_the_default_state_path(service):
    assert f"/var/lib/{one(service, 'StateDirectory')}" == default_of("DEFAULT", "state_path")


def test_unit_user_is_the_one_sysusers_creates(service):
    declared = [
        line.split()[1]
        for line in (SYSTEMD / "compute-agent.sysusers").read_text().splitlines()
        if line.startswith("u ")
    ]
    assert declared == [one(service, "User")]
    assert one(service, "Group") == one(service, "User")
    assert "DynamicUser" not in service


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("ProtectSystem", "strict"),
        ("NoNewPrivileges", "yes"),
        ("PrivateTmp", "yes"),
        ("ProtectHome", "yes"),
        ("ProtectControlGroups", "yes"),
        ("ProtectKernelModules", "yes"),
        ("LockPersonality", "yes"),
        ("MemoryDenyWriteExecute", "yes"),
        ("RestrictRealtime", "yes"),
        ("SystemCallArchitectures", "native"),
        ("CapabilityBoundingSet", ""),
    ],
)
def test_sandboxing(service, key, value):
    assert one(service, key) == value


def test_sandboxing_leaves_what_the_agent_reads(service):
    families = set(one(service, "RestrictAddressFamilies").split())
    # AF_NETLINK: pyudev's hot-plug monitor; AF_UNIX: libvirt, sd_notify.
    assert {"AF_UNIX", "AF_INET", "AF_INET6", "AF_NETLINK"} <= families
    # ProcSubset=pid hides /proc/meminfo and /proc/cpuinfo; PrivateUsers makes
    # libudev drop every event; PrivateNetwork cuts Placement and udev off.
    assert service.get("ProcSubset", ["all"]) == ["all"]
    assert service.get("PrivateUsers", ["no"]) == ["no"]
    assert service.get("PrivateNetwork", ["no"]) == ["no"]
    for key in ("InaccessiblePaths", "TemporaryFileSystem"):
        for value in service.get(key, []):
            for path in ("/sys", "/proc", "/run/udev", "/run/libvirt"):
                assert path not in value, f"{key}={value} hides {path}"


def test_default_metrics_port_needs_no_capability():
    # CapabilityBoundingSet= is empty: no CAP_NET_BIND_SERVICE for ports < 1024.
    listen = default_of("metrics", "listen")
    assert not listen or int(str(listen).rpartition(":")[2]) >= 1024


def test_unit_is_wanted_by_multi_user(service):
    unit = read_unit(UNIT)
    assert unit["Install"]["WantedBy"] == ["multi-user.target"]
    assert "network-online.target" in unit["Unit"]["Wants"][0].split()
    assert {"network-online.target", "libvirtd.service"} <= set(unit["Unit"]["After"][0].split())


# -- systemd-analyze verify ------------------------------------------------


def verify(unit_text: str, tmp_path: Path) -> tuple[int, list[str]]:
    """``systemd-analyze verify`` of ``unit_text``: (exit status, lines about the unit).

    systemd 252 exits 0 on most mistakes ("Unknown key ..., ignoring", "Failed
    to parse ..., ignoring"); those lines name the file, so any line that
    mentions the unit counts as a failure. Lines about other units on the
    machine do not. --recursive-errors=no: a broken libvirtd.service on the
    test machine is not ours.
    """
    tool = required_tool("systemd-analyze")
    path = tmp_path / UNIT.name
    path.write_text(unit_text)
    proc = subprocess.run(
        [tool, "verify", "--recursive-errors=no", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    output = (proc.stdout + proc.stderr).splitlines()
    return proc.returncode, [line for line in output if UNIT.name in line]


def unit_for_verify() -> str:
    """The unit with ExecStart= pointed at this venv's ``compute-agent`` script.

    verify refuses an ExecStart= binary that does not exist, and
    /opt/compute-agent is not installed on a test machine; the rest of the
    command line (``run --config ...``) is kept. Nothing else is changed:
    User=compute-agent and SupplementaryGroups=libvirt stay as shipped because
    verify does not resolve users or groups (systemd 252), so the test needs
    neither to exist.
    """
    text = UNIT.read_text()
    assert text.count(f"ExecStart={INSTALLED_BINARY} ") == 1
    return text.replace(f"ExecStart={INSTALLED_BINARY} ", f"ExecStart={VENV_BINARY} ")


def test_unit_passes_systemd_analyze_verify(tmp_path):
    assert VENV_BINARY.exists(), "run `make install`: the compute-agent script is missing"
    status, complaints = verify(unit_for_verify(), tmp_path)
    assert status == 0 and not complaints, "\n".join(complaints) or f"exit status {status}"


@pytest.mark.parametrize(
    ("good", "bad"),
    [
        ("ProtectSystem=strict", "ProtectSytem=strict"),
        ("Type=notify", "Type=notfy"),
        ("RestartPreventExitStatus=2 5", "RestartPreventExitStatus=two five"),
        ("ExecReload=/bin/kill", "ExecReload=/bin/kil"),
    ],
)
def test_verify_catches_a_broken_directive(tmp_path, good, bad):
    """Proof that the verify test above can fail: one mistake at a time."""
    text = unit_for_verify()
    assert good in text
    status, complaints = verify(text.replace(good, bad, 1), tmp_path)
    assert status != 0 or complaints


# -- sysusers.d and tmpfiles.d ---------------------------------------------


def test_sysusers_and_tmpfiles_create_the_user_and_configuration_directory(tmp_path):
    sysusers, tmpfiles = required_tool("systemd-sysusers"), required_tool("systemd-tmpfiles")
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    for cmd in (
        [sysusers, f"--root={root}", str(SYSTEMD / "compute-agent.sysusers")],
        [tmpfiles, f"--root={root}", "--create", str(SYSTEMD / "compute-agent.tmpfiles")],
    ):
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
        assert proc.returncode == 0, proc.stderr
    passwd = [line.split(":") for line in (root / "etc/passwd").read_text().splitlines()]
    group = [line.split(":") for line in (root / "etc/group").read_text().splitlines()]
    users = {fields[0]: fields for fields in passwd}
    groups = {fields[2]: fields[0] for fields in group}
    user = users["compute-agent"]
    assert user[5] == default_of("DEFAULT", "state_path")
    assert user[6].endswith("nologin")
    conf_dir = root / "etc/compute-agent"
    assert conf_dir.stat().st_mode & 0o777 == 0o750
    assert conf_dir.stat().st_uid == 0
    assert groups[str(conf_dir.stat().st_gid)] == "compute-agent"
    assert one(read_unit(UNIT)["Service"], "ConfigurationDirectoryMode") == "0750"


# -- MemoryDenyWriteExecute= and SystemCallFilter= -------------------------

SANDBOXED_RUN = r"""
import ctypes, ctypes.util, errno, json, mmap, sys

mode, syscalls, commands = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
libc = ctypes.CDLL(None, use_errno=True)
if mode == "mdwe":
    PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN = 65, 1
    if libc.prctl(PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN, 0, 0, 0) != 0:
        sys.exit(77)
    try:
        mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
        sys.exit(78)
    except PermissionError:
        pass
else:
    name = ctypes.util.find_library("seccomp")
    if name is None:
        sys.exit(77)
    seccomp = ctypes.CDLL(name)
    seccomp.seccomp_init.restype = ctypes.c_void_p
    seccomp.seccomp_init.argtypes = [ctypes.c_uint32]
    rule_args = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint]
    seccomp.seccomp_rule_add.argtypes = rule_args
    seccomp.seccomp_load.argtypes = [ctypes.c_void_p]
    seccomp.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    KILL_PROCESS, ALLOW, EPERM = 0x80000000, 0x7FFF0000, 0x00050000 | errno.EPERM
    ctx = seccomp.seccomp_init(KILL_PROCESS)
    for call in syscalls.split(","):
        nr = seccomp.seccomp_syscall_resolve_name(call.encode())
        if nr >= 0:  # names of other architectures resolve to -1
            assert seccomp.seccomp_rule_add(ctx, ALLOW, nr, 0) == 0, call
    # chroot is outside the list: it answers EPERM instead of killing, which
    # shows the filter is loaded (unfiltered, chroot("") fails with ENOENT).
    chroot = seccomp.seccomp_syscall_resolve_name(b"chroot")
    assert seccomp.seccomp_rule_add(ctx, EPERM, chroot, 0) == 0
    assert seccomp.seccomp_load(ctx) == 0
    if libc.chroot(b"") == 0 or ctypes.get_errno() != errno.EPERM:
        sys.exit(78)
import ssl
ssl.create_default_context()
import pyudev
monitor = pyudev.Monitor.from_netlink(pyudev.Context())
monitor.filter_by("pci")
monitor.start()
try:
    import libvirt
except ImportError:
    pass
else:
    libvirt.open("test:///default").listAllDomains()
from agent.cli.main import main
for command in commands:
    status = main(command)
    if status:
        sys.exit(status)
"""


def run_sandboxed(tmp_path: Path, mode: str, syscalls: str = "") -> subprocess.CompletedProcess:
    """The agent's stack under one restriction: TLS set-up, pyudev's netlink
    monitor, libvirt's client library (test driver), a sync of the fake
    driver into the embedded Placement (SQLAlchemy, SQLite, wsgi-intercept)
    and a host-driver discovery of a sysfs fixture (psutil, sysfs reads)."""
    conf = tmp_path / "agent.conf"
    conf.write_text(f"[DEFAULT]\nstate_path = {tmp_path / 'state'}\n")
    host = EXAMPLES / "small-host.yaml"
    sysfs = REPO / "tests" / "fixtures" / "sysfs" / "two-socket"
    commands = [
        ["sync", "--once", "--config", str(conf), "--driver", "fake", "--fake-host", str(host)],
        ["discover", "--config", str(conf), "--driver", "host", "--sysfs-root", str(sysfs)],
    ]
    proc = subprocess.run(
        [sys.executable, "-c", SANDBOXED_RUN, mode, syscalls, json.dumps(commands)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        check=False,
    )
    assert proc.returncode != 78, f"{mode}: the restriction did not take effect"
    return proc


def test_agent_runs_with_memory_deny_write_execute(tmp_path):
    """MemoryDenyWriteExecute=yes is safe: the agent needs no W+X memory.

    systemd 252 enforces it with a seccomp filter; the kernel's PR_SET_MDWE
    (Linux 6.3+) refuses the same things (a writable and executable mapping,
    making memory executable) and needs no systemd, so the test uses it.
    Covers CPython, ctypes callbacks (libffi), OpenSSL, libudev, libvirt.
    """
    proc = run_sandboxed(tmp_path, "mdwe")
    assert proc.returncode != 77, "this kernel has no PR_SET_MDWE (Linux 6.3+ is needed)"
    assert proc.returncode == 0, proc.stderr


def syscall_set(name: str) -> set[str]:
    """The system calls of a systemd set (``@system-service``), nested sets expanded."""
    listing = subprocess.run(
        ["systemd-analyze", "syscall-filter", name],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    calls: set[str] = set()
    for line in listing.splitlines()[1:]:
        entry = line.strip()
        if entry.startswith("@"):
            calls |= syscall_set(entry)
        elif entry and not entry.startswith("#"):
            calls.add(entry)
    return calls


def test_agent_runs_within_the_system_call_filter(tmp_path, service):
    """The unit's SystemCallFilter= allows every system call the agent makes.

    The filter is rebuilt from the unit (sets expanded by systemd-analyze,
    plus the calls systemd always allows) and loaded with libseccomp; any
    other call kills the process (SIGSYS), stricter than the unit's
    SystemCallErrorNumber=EPERM, so a call that would fail quietly in
    production fails here. A kill means: find the call with strace and add
    it to the unit, or avoid it.
    """
    required_tool("systemd-analyze")
    allowed = {"execve", "exit", "exit_group", "getrlimit", "rt_sigreturn", "sigreturn"}
    for entry in one(service, "SystemCallFilter").split():
        assert not entry.startswith("~"), "the unit's filter is an allow list"
        allowed |= syscall_set(entry) if entry.startswith("@") else {entry}
    proc = run_sandboxed(tmp_path, "seccomp", ",".join(sorted(allowed)))
    assert proc.returncode != 77, "libseccomp is not installed (package libseccomp2, with systemd)"
    killed = "killed by SIGSYS: a call outside the filter" if proc.returncode == -31 else ""
    assert proc.returncode == 0, f"exit status {proc.returncode} {killed}: {proc.stderr}"


# -- the example configuration ---------------------------------------------


def test_sample_config_is_up_to_date(tmp_path):
    from oslo_config import generator

    entry_points = importlib.metadata.entry_points(group="oslo.config.opts", name="compute-agent")
    assert entry_points, "the oslo.config.opts entry point is not installed: run `make install`"
    generated = tmp_path / "compute-agent.conf.sample"
    generator.main(
        [
            "--config-file",
            str(SYSTEMD / "compute-agent-config-generator.conf"),
            "--output-file",
            str(generated),
        ]
    )
    committed = SYSTEMD / "compute-agent.conf.sample"
    assert filecmp.cmp(generated, committed, shallow=False), (
        "systemd/compute-agent.conf.sample is out of date with the options in the code: "
        "run `make sample-config` and commit the result"
    )


def test_sample_config_lists_every_option():
    sample = (SYSTEMD / "compute-agent.conf.sample").read_text()
    missing = [
        f"[{group}] {opt.name}"
        for group, opts in catalog.list_opts()
        for opt in opts
        if f"#{opt.dest} = " not in sample and f"#{opt.dest} =\n" not in sample
    ]
    assert not missing, f"not in the sample: {missing}; run `make sample-config`"
