"""What ``compute-agent discover`` says about a corpus host: the golden document.

The host is built (:mod:`tests.corpus.build`) and ``compute-agent discover
--format json`` is run on it in-process, once with NUMA modelled and once
flat, with the corpus configuration (README.md, "Configuration"). The
document keeps, per provider, its parent, inventories and traits (UUIDs
left out: they derive from the names), the flat compute node's
inventories, and every warning the drivers logged, with the build
directory written ``<root>``. A host that cannot be read gives the exit
code and the one error line instead.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
from pathlib import Path
from typing import Any

from agent.cli import main as cli
from tests.corpus.build import Host, build

NODENAME = "cn1"
DEFAULT_SPECS = ['{"vendor_id": "*"}']


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def mdev_type_ids(host: Host) -> list[str]:
    """Every mdev type id the description names, sorted (the default enabled types)."""
    data = host.data
    types: set[str] = set()
    for dev in data.get("devices") or ():
        types.update(dev.get("mdev_types") or {})
    for fn in data.get("pci") or ():
        types.update(fn.get("mdev_types") or {})
    return sorted(types)


def write_conf(host: Host, built: Path, work: Path, numa: bool) -> Path:
    """The configuration file of one run (README.md, "Configuration").

    Args:
        host: the corpus host.
        built: what :func:`tests.corpus.build.build` returned.
        work: a scratch directory (state, instances path).
        numa: ``[numa] model_in_placement``.
    """
    config = host.config
    specs = config.get("device_spec", DEFAULT_SPECS)
    enabled = config.get("enabled_mdev_types", mdev_type_ids(host))
    lines = [
        "[DEFAULT]",
        f"host = {NODENAME}",
        f"state_path = {work / 'state'}",
        "reserved_host_memory_mb = 0",
        "[compute]",
        f"driver = {'libvirt' if host.kind == 'libvirt' else 'host'}",
        f"instances_path = {work / 'instances'}",
        # DISK_GB would be the size of this machine's disk: not the host's.
        "shared_storage = true",
        "[numa]",
        f"model_in_placement = {str(numa).lower()}",
        "[pci]",
        *(f"device_spec = {s}" for s in specs),
        "[devices]",
        f"enabled_mdev_types = {','.join(enabled)}",
    ]
    if host.kind == "libvirt":
        lines += [
            "[libvirt]",
            f"connection_uri = test://{built / 'host.xml'}",
            "reconnect_attempts = 1",
        ]
        if (built / "capabilities.xml").exists():
            lines.append(f"capabilities_file = {built / 'capabilities.xml'}")
    else:
        lines += ["[host_driver]", f"sysfs_root = {built}"]
    path = work / ("numa.conf" if numa else "flat.conf")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def run_discover(conf: Path) -> tuple[int, dict[str, Any] | None, str, list[str]]:
    """``compute-agent discover --config CONF --format json`` in-process.

    Returns:
        ``(exit code, parsed JSON or None, stderr, warnings logged)``.
    """
    handler = _Collect()
    logger = logging.getLogger("drivers")
    logger.addHandler(handler)
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = cli.main(["discover", "--config", str(conf), "--format", "json"])
    finally:
        logger.removeHandler(handler)
    document = json.loads(out.getvalue()) if code == 0 else None
    return code, document, err.getvalue(), handler.lines


def _inventory(inv: dict[str, Any]) -> dict[str, Any]:
    # min_unit and step_size are always 1 and capacity follows from the rest.
    return {k: inv[k] for k in ("total", "reserved", "max_unit", "allocation_ratio")}


def _providers(document: dict[str, Any]) -> dict[str, Any]:
    (node,) = document["nodes"]
    names = {p["uuid"]: p["name"] for p in node["providers"]}
    return {
        p["name"]: {
            "parent": names.get(p["parent_provider_uuid"]),
            "inventories": {rc: _inventory(inv) for rc, inv in p["inventories"].items()},
            "traits": p["traits"],
        }
        for p in sorted(node["providers"], key=lambda p: p["name"])
    }


def observe(host: Host, work: Path) -> dict[str, Any]:
    """The golden document of ``host``, built and read below ``work``.

    Raises:
        AssertionError: the two runs disagree on the exit code (a host
            readable flat must be readable with NUMA modelled).
    """
    built = build(host, work / "host")
    root = str(built)
    numa = run_discover(write_conf(host, built, work, numa=True))
    flat = run_discover(write_conf(host, built, work, numa=False))
    assert numa[0] == flat[0], (numa[2], flat[2])
    if numa[0] != 0:
        return {"exit": numa[0], "error": numa[2].replace(root, "<root>").strip()}
    assert numa[1] is not None and flat[1] is not None
    return {
        "exit": 0,
        "providers": _providers(numa[1]),
        "flat": _providers(flat[1])[NODENAME]["inventories"],
        "warnings": sorted({w.replace(root, "<root>") for w in numa[3]}),
    }


def dumps(document: dict[str, Any]) -> str:
    """The golden file's text (stable key order, one value per line)."""
    return json.dumps(document, indent=1, sort_keys=True) + "\n"
