"""The state directory's per-node files, and the conversion of the earlier layout.

Until issue 28 each kind of per-node record was one file holding every node
(``placement_seen.json``, ``consumers.json`` and its copy
``consumers.bak.json``), rewritten whole by each node's cycle: an agent of
1,000 nodes wrote about a million node records in one start-up. Now each node
has a file of its own in a directory per kind (:func:`node_file`).

The conversion reads the old files and writes the new ones: every node's
record into each directory (the audit's record into both of its copies),
then removes the old files, the main one before its copy. A crash part-way
leaves the old main file, so the next start converts again from it (nothing
else writes the new files before the conversion ends); a crash between the
two removals leaves only the old copy beside the new directory, which is
then removed unread (its records were converted). A directory that cannot be
written keeps the old files, which are read until a conversion succeeds.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

LOG = logging.getLogger(__name__)

PLACEMENT_SEEN_DIR = "placement_seen"
"""``NODE.json``: ``[provider record, ...]``, what Placement held after the last write."""

CONSUMERS_DIR = "consumers"
"""``NODE.json``: the audit record: known instances, unknown consumers, allocations seen."""

CONSUMERS_COPY_DIR = "consumers.bak"
"""The same, written after it: read when ``consumers/NODE.json`` is lost or unreadable."""

CHILD_TRAITS_DIR = "child_traits"
"""``NODE.json``: ``{provider UUID: [trait, ...]}``, the traits the agent last laid out on
each child provider (:data:`agent.shape.layout.ChildTraits`): so one it no longer lays
out is removed after a restart too, while an operator's stays."""

FIELDS_DIR = "fields"
"""``NODE.json``: the fields of the node's providers the agent wrote (its value, and whether it
overwrote another writer's) and those it yields to another writer
(:class:`agent.model.yields.FieldLedger`): so a restarted agent does not start the fight again."""

COPIES: dict[str, tuple[str, ...]] = {CONSUMERS_DIR: (CONSUMERS_COPY_DIR,)}
"""Directories written after a kind's own, in this order."""

OLD_FILES: dict[str, tuple[str, ...]] = {
    PLACEMENT_SEEN_DIR: ("placement_seen.json",),
    CONSUMERS_DIR: ("consumers.json", "consumers.bak.json"),
}
"""The earlier layout: ``{directory: (file holding every node, its copies)}``."""


def node_file(directory: str, nodename: str) -> str:
    """The path, relative to the state directory, of ``nodename``'s file in ``directory``.

    The name is percent-encoded, so any node name makes one file name and
    never a path. A name too long for a file name (over 200 characters
    encoded) is replaced by its SHA-256 after ``%sha256-``, which no encoded
    name begins with (``%`` there is always followed by two hex digits).
    """
    encoded = quote(nodename, safe="")
    if len(encoded) > 200:
        encoded = "%sha256-" + hashlib.sha256(nodename.encode()).hexdigest()
    return f"{directory}/{encoded}.json"


def convert(
    path: Path,
    read: Callable[[str], Any | None],
    write: Callable[[str, Any], bool],
) -> None:
    """Convert ``path``'s old single files to a file per node (module docstring).

    Args:
        path: the state directory.
        read: reads one file (relative name) as JSON; None when missing or unreadable.
        write: writes one file atomically; False when it could not (logged by it).
    """
    for directory, names in OLD_FILES.items():
        _convert(path, directory, names, read, write)


def _convert(
    path: Path,
    directory: str,
    names: tuple[str, ...],
    read: Callable[[str], Any | None],
    write: Callable[[str, Any], bool],
) -> None:
    if (path / directory).is_dir() and not (path / names[0]).exists():
        for name in names[1:]:  # a conversion stopped between the two removals
            (path / name).unlink(missing_ok=True)
        return
    doc = next((d for d in map(read, names) if isinstance(d, dict)), None)
    if doc is None:
        return  # nothing readable to convert: the old files stay, as they were read
    for nodename, record in doc.items():
        for target in (directory, *COPIES.get(directory, ())):
            if not write(node_file(target, str(nodename)), record):
                return  # kept as it is; tried again at the next start
    (path / directory).mkdir(parents=True, exist_ok=True)  # also with no node at all
    for name in names:
        (path / name).unlink(missing_ok=True)
    LOG.info(
        "state directory %s: %s converted to a file per node in %s/ (%d nodes)",
        path,
        names[0],
        directory,
        len(doc),
    )
