"""Read a fake host description (YAML) into driver records.

Format: docs/fake-host.md. Structure is checked with a JSON schema
(:mod:`drivers.fake_host.schema`); what a schema cannot say (unique addresses,
devices that instances name, VF counts) is checked after, by one reader per
section (:mod:`drivers.fake_host.nodes`). Any fault is one
:class:`HostDescriptionError` naming the file and the place in it, e.g.
``examples/big-host.yaml at nodes[0].gpus[1]: mdev type 'nvidia-99' is not
offered by this GPU``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from drivers.errors import HostDescriptionError
from drivers.fake_host.nodes import FakeNode, read_node
from drivers.fake_host.schema import SCHEMA


def _where(path: Sequence[Any]) -> str:
    """A JSON path as the description's place: ``nodes[0].gpus[1]``."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def parse_host_description(document: Any, path: str = "<host description>") -> list[FakeNode]:
    """Validate a parsed YAML document and build its nodes.

    Raises:
        HostDescriptionError: the first fault, with its place in the document.
    """
    validator = jsonschema.Draft202012Validator(SCHEMA)
    error = jsonschema.exceptions.best_match(validator.iter_errors(document))
    if error is not None:
        raise HostDescriptionError(path, _where(error.absolute_path), error.message)
    nodes = [read_node(raw, f"nodes[{i}]", path) for i, raw in enumerate(document["nodes"])]
    names = [n.host.nodename for n in nodes]
    for i, name in enumerate(names):
        if name in names[:i]:
            raise HostDescriptionError(path, f"nodes[{i}].nodename", f"nodename {name!r} repeats")
    return nodes


def load_host_description(path: str | Path) -> list[FakeNode]:
    """Read and validate a host description file.

    Args:
        path: the YAML file.

    Returns:
        One :class:`FakeNode` per entry of ``nodes``, in file order.

    Raises:
        HostDescriptionError: unreadable file, bad YAML, or a fault in the
            description (one line, naming the place).
    """
    path = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise HostDescriptionError(path, "", f"cannot read the file: {exc.strerror}") from None
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise HostDescriptionError(path, where, f"not valid YAML: {problem}") from None
    return parse_host_description(document, path)
