"""The command as operators start it: ``python -m agent.cli``, and on a host without libvirt.

A GPU or bare-metal server running the host driver has no libvirt-python (it
is the ``libvirt`` extra). Each test runs the CLI in a fresh interpreter
where ``import libvirt`` fails (``sys.modules["libvirt"] = None``, what
Python does for a module that is not there), on a captured host.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from agent import __version__
from tests.helpers.paths import REPO, SYSFS

# The CLI with libvirt unimportable: every import of it raises ImportError.
WITHOUT_LIBVIRT = (
    "import sys\n"
    "sys.modules['libvirt'] = None\n"
    "from agent.cli.main import main\n"
    "raise SystemExit(main(sys.argv[1:]))\n"
)


def write_conf(tmp_path: Path) -> Path:
    conf = tmp_path / "agent.conf"
    conf.write_text(
        f"[DEFAULT]\nhost = cn1\nstate_path = {tmp_path}\ninstances_path = {tmp_path}/instances\n"
    )
    return conf


def cli(*args: str, prefix: tuple[str, ...]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *prefix, *args], capture_output=True, text=True, check=False, cwd=REPO
    )


def without_libvirt(*args: str) -> subprocess.CompletedProcess[str]:
    return cli(*args, prefix=("-c", WITHOUT_LIBVIRT))


def test_python_m_agent_cli_is_the_command(tmp_path):
    r = cli("--version", prefix=("-m", "agent.cli"))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"compute-agent {__version__}"
    conf = write_conf(tmp_path)
    r = cli(
        "discover",
        "--config",
        str(conf),
        "--driver",
        "host",
        "--sysfs-root",
        str(SYSFS / "gpu-host"),
        "--format",
        "json",
        prefix=("-m", "agent.cli"),
    )
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["driver"] == "host"


def test_discover_host_driver_without_libvirt(tmp_path):
    conf = write_conf(tmp_path)
    host = ("--driver", "host", "--sysfs-root", str(SYSFS / "gpu-host"))
    r = without_libvirt("discover", "--config", str(conf), *host, "--format", "json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    (node,) = doc["nodes"]
    root = next(p for p in node["providers"] if p["name"] == "cn1")
    assert root["inventories"]["VCPU"]["total"] > 0
    r = without_libvirt("discover", "--config", str(conf), *host, "--devices", "--format", "json")
    assert r.returncode == 0, r.stderr
    cap = tmp_path / "cap"
    r = without_libvirt("capture", "--sysfs-root", str(SYSFS / "gpu-host"), str(cap))
    assert r.returncode == 0, r.stderr
    assert (cap / "sys").is_dir()


def test_libvirt_driver_without_libvirt_says_what_to_install(tmp_path):
    conf = write_conf(tmp_path)
    r = without_libvirt("discover", "--config", str(conf), "--driver", "libvirt")
    assert r.returncode == 2
    assert r.stdout == ""
    (line,) = r.stderr.splitlines()
    assert line.startswith("compute-agent discover: [compute] driver = libvirt: ")
    assert "pip install 'compute-agent[libvirt]'" in line
    assert "python3-libvirt" in line
    assert "Traceback" not in r.stderr


def test_only_the_libvirt_driver_imports_libvirt():
    """Options, every command and the other drivers load without touching ``libvirt``."""
    probe = (
        "import sys\n"
        "from agent.cli import main\n"
        "from agent.conf import config\n"
        "import drivers.fake, drivers.host, drivers.libvirt.options\n"
        "main.build_parser()\n"
        "config.new_conf()\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'libvirt'))\n"
    )
    r = cli(prefix=("-c", probe))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"
