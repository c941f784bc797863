"""Fake host descriptions built from data: a base loaded into a dict, edited as data, dumped.

The format is the fake driver's host file (docs/fake-host.md): ``{"nodes":
[{"nodename": ..., "memory_mb": ..., "pci_devices": [...], "instances":
[...]}, ...]}``. Only that file format is relied on here, never the
driver's loader, so a test states its host as data (``set`` a field, ``add``
a device or an instance, ``clone_node``) instead of patching YAML text.
"""

from __future__ import annotations

import copy
import uuid
from pathlib import Path
from typing import Any

import yaml

from tests.helpers.paths import EXAMPLES

BIG_HOST = EXAMPLES / "big-host.yaml"
SMALL_HOST = EXAMPLES / "small-host.yaml"
EXAMPLE_PREFIX = "4f7d1e2a-5b6c-4d8e-9f01-a2b3c4d5e6"
"""examples/big-host.yaml's instance UUIDs are this prefix + ``01`` .. ``04``."""


class _Dumper(yaml.SafeDumper):
    """``yaml.SafeDumper`` that writes a shared dict (one flavor for two instances) twice
    instead of as an anchor and alias, so the file reads like the examples."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


class HostDescription:
    """One fake host file's document, edited in place; every edit returns ``self``.

    ``nodename=None`` in an edit means the only node (ValueError when there are several).
    """

    def __init__(self, document: dict[str, Any]) -> None:
        self.document = document

    @classmethod
    def load(cls, path: Path = BIG_HOST) -> HostDescription:
        """The description in ``path`` (a YAML host file, e.g. examples/big-host.yaml)."""
        return cls(yaml.safe_load(path.read_text()))

    @classmethod
    def of_node(cls, node: dict[str, Any]) -> HostDescription:
        """A description of one node given as data (``{"nodename": ..., ...}``)."""
        return cls({"nodes": [node]})

    @property
    def nodes(self) -> list[dict[str, Any]]:
        """The ``nodes`` list itself (edits to it are edits to the description)."""
        return self.document["nodes"]

    def node(self, nodename: str | None = None) -> dict[str, Any]:
        """The node named ``nodename`` (or the only node); KeyError when there is none."""
        if nodename is None:
            if len(self.nodes) != 1:
                raise ValueError(f"{len(self.nodes)} nodes: name the one to edit")
            return self.nodes[0]
        for node in self.nodes:
            if node["nodename"] == nodename:
                return node
        raise KeyError(nodename)

    def rename(self, nodename: str, old: str | None = None) -> HostDescription:
        """Node ``old`` (or the only node) becomes ``nodename``."""
        self.node(old)["nodename"] = nodename
        return self

    def prefix_instances(self, prefix: str, nodename: str | None = None) -> HostDescription:
        """Each instance's UUID becomes ``prefix`` + its last two characters.

        With a ``prefix`` of 34 characters (``str(uuid4())[:-2]``) a test gets
        instance UUIDs of its own, numbered as in the base file.
        """
        for instance in self.node(nodename).get("instances", []):
            instance["uuid"] = prefix + instance["uuid"][-2:]
        return self

    def set(self, field: str, value: Any, nodename: str | None = None) -> HostDescription:
        """Node field ``field`` (e.g. ``shared_storage``) becomes ``value``."""
        self.node(nodename)[field] = value
        return self

    def add(
        self, field: str, item: Any, nodename: str | None = None, position: int | None = None
    ) -> HostDescription:
        """``item`` joins the node's list ``field`` (``pci_devices``, ``instances`` ...),
        at ``position`` or last; the list is created when the node has none."""
        items = self.node(nodename).setdefault(field, [])
        items.insert(len(items) if position is None else position, item)
        return self

    def clone_node(self, nodename: str, new_name: str, instance_prefix: str) -> HostDescription:
        """A copy of node ``nodename`` joins the host as ``new_name``, its instances
        renumbered under ``instance_prefix`` (see :meth:`prefix_instances`)."""
        clone = copy.deepcopy(self.node(nodename))
        clone["nodename"] = new_name
        self.nodes.append(clone)
        return self.prefix_instances(instance_prefix, new_name)

    def write(self, path: Path) -> Path:
        """The description as YAML in ``path`` (safe dump, keys kept in order); ``path``."""
        path.write_text(yaml.dump(self.document, Dumper=_Dumper, sort_keys=False))
        return path


def host_file(tmp_path: Path, nodename: str, src: Path = BIG_HOST) -> Path:
    """The example host ``src`` under a nodename of the test's own (the in-process
    Placement database is shared by the session), written to ``tmp_path/NODENAME.yaml``."""
    return HostDescription.load(src).rename(nodename).write(tmp_path / f"{nodename}.yaml")


def flat_nodes_file(path: Path, prefix: str, count: int) -> Path:
    """``count`` flat nodes (the bare-metal shape), each running one instance of its own.

    Nodes ``{prefix}-00000`` ...: 32 VCPUs, 128 GiB (131,072 MiB), 1 TiB
    (1,024 GiB); the instance takes half of each (16 VCPUs, 65,536 MiB,
    500 GiB), its UUID derived from ``prefix`` and the node's index.
    For ``bench/many_nodes.py`` and ``tests/functional/test_many_nodes.py``.
    """
    doc = {
        "nodes": [
            {
                "nodename": f"{prefix}-{i:05d}",
                "cpu": {"vcpus": 32},
                "memory_mb": 131072,
                "disk_gb": 1024,
                "instances": [
                    {
                        "uuid": str(uuid.uuid5(uuid.NAMESPACE_URL, f"{prefix}/{i}")),
                        "project_id": "p-bm",
                        "user_id": "u-bm",
                        "flavor": {"vcpus": 16, "memory_mb": 65536, "root_gb": 500},
                    }
                ],
            }
            for i in range(count)
        ]
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path
