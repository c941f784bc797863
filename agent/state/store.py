"""The agent's state directory (``[DEFAULT] state_path``).

What lives there survives restarts: each compute node's UUID,
the last state seen in Placement, the consumers the allocation audit knows,
the last cycle's outcome. Files are JSON, written atomically
(temporary file, fsync, rename) so a crash never leaves half a file; a file
that cannot be read is reported and treated as absent, because everything
in it can be found again in Placement.

A state directory that cannot be written (read-only, full) does not stop
the agent: Placement is still kept in step, the failure is logged once, and
:attr:`StateStore.save_error` says it (the cycle's outcome and ``status``
carry it). What is lost meanwhile: restarts cost more (Placement is read
again), and the known consumers of the allocation audit (a gone instance's
allocation can then only be removed while this process runs). The audit's
record is written twice (``consumers/NODE.json`` and ``consumers.bak/NODE.json``)
so the loss or corruption of one still leaves the known consumers.

Per-node records (what Placement held, the audit's record) are a file per
node (``placement_seen/NODE.json``, ``consumers/NODE.json`` and its copy
``consumers.bak/NODE.json``): a node's cycle writes only its own files, so
an agent of N nodes writes O(N) bytes a cycle, not O(N^2) (issue 28: each
node's start-up rewrote files holding every node). A state directory of the
earlier layout (one ``placement_seen.json``, ``consumers.json`` and
``consumers.bak.json`` holding every node) is converted on first use
(:mod:`agent.state.layout`).
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import threading
import uuid as uuidlib
from pathlib import Path
from typing import Any

from agent.state import layout, node_identity
from agent.state.layout import (
    CHILD_TRAITS_DIR,
    CONSUMERS_COPY_DIR,
    CONSUMERS_DIR,
    FIELDS_DIR,
    PLACEMENT_SEEN_DIR,
    node_file,
)

LOG = logging.getLogger(__name__)

COMPUTE_NODES_FILE = "compute_nodes.json"
"""``{nodename: root provider UUID}``."""

NOVA_COMPUTE_ID_FILE = node_identity.COMPUTE_ID_FILE
"""nova-compute's node identity: the compute node's (and its provider's) UUID, one line.

nova 34 (``nova/virt/node.py``) writes it in its ``[DEFAULT] state_path`` the
first time a libvirt compute node starts and reads it on every start; the
agent, run with nova.conf, shares that directory, reads it, and writes it when
it creates a one-node host's compute node first (:mod:`agent.state.node_identity`)."""

LAST_CYCLE_FILE = "last_cycle.json"
"""The service's last cycle: when, how long, outcome per node (``compute-agent status``)."""


def read_json(path: Path) -> Any | None:
    """The JSON document at ``path``, or None when it is missing or unreadable (logged)."""
    try:
        with path.open(encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        LOG.warning("state file %s is unreadable (%s); ignoring it", path, exc)
        return None


def write_json(path: Path, document: Any) -> None:
    """Write ``document`` to ``path`` atomically (readers see the old or the new file).

    Raises:
        OSError: the directory is not writable.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        # One compact string from the C encoder, written once: json.dump with an
        # indent encodes in Python chunk by chunk, and an agent of 1,000 nodes
        # rewrote its state files 1,000 times in a start-up (most of its CPU).
        text = json.dumps(document, sort_keys=True, separators=(",", ":"))
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


def boot_id() -> str:
    """This boot's id (Linux): monotonic times are comparable only within one boot."""
    try:
        return BOOT_ID.read_text().strip()
    except OSError:
        return ""


def record_age(record: dict[str, Any], now_wall: float, now_monotonic: float) -> float:
    """Seconds since a cycle recorded by the service finished, never negative.

    On the same boot the monotonic clock decides, so a wall-clock step changes
    nothing; otherwise (a reboot since) the wall clock, floored at 0.
    """
    finished = record.get("finished_monotonic")
    if finished is not None and record.get("boot_id") and record.get("boot_id") == boot_id():
        return max(0.0, now_monotonic - float(finished))
    return max(0.0, now_wall - float(record.get("finished", now_wall)))


class StateStore:
    """Reads and writes the files of one state directory.

    Args:
        state_path: the directory (created on first write).
        read_only: write nothing there: what would be written is kept in
            memory for this store's own reads (a command that promises to
            write nothing, e.g. ``adopt --dry-run``, still lets the mirror
            record what it read while it runs).
    """

    def __init__(
        self,
        state_path: str | Path,
        *,
        read_only: bool = False,
        config_files: tuple[str, ...] | list[str] = (),
        nova_state_path: str | Path | None = None,
    ) -> None:
        self.path = Path(state_path)
        self.read_only = read_only
        # nova-compute's state_path (compute_id), and the configuration files' directories
        # nova looks in too.
        self.nova_path = Path(nova_state_path) if nova_state_path else self.path
        self.identity_dirs = node_identity.locations(config_files, self.nova_path)
        # name -> document a read-only store would have written (read back first).
        self._unwritten: dict[str, Any] = {}
        self.save_error: str | None = None
        """Why the last write failed (None after a write that succeeded)."""
        # name -> ((mtime_ns, size, inode), parsed document): a file is parsed once
        # per version (compute_nodes.json holds every node, and is read per node).
        # A write renames a new file in (a new inode), so a stale key cannot match.
        self._parsed: dict[str, tuple[tuple[int, int, int], Any]] = {}
        # Held around every read-modify-write of a file, and the conversion.
        self._lock = threading.Lock()
        self._converted = False

    def _read(self, name: str) -> Any | None:
        """The document of file ``name`` (parsed once per version of the file); do not mutate it."""
        if name in self._unwritten:
            return self._unwritten[name]
        path = self.path / name
        try:
            st = path.stat()
        except OSError:
            self._parsed.pop(name, None)
            return read_json(path)
        key = (st.st_mtime_ns, st.st_size, st.st_ino)
        cached = self._parsed.get(name)
        if cached is not None and cached[0] == key:
            return cached[1]
        doc = read_json(path)
        self._parsed[name] = (key, doc)
        return doc

    def _remember(self, name: str, document: Any) -> None:
        try:
            st = (self.path / name).stat()
        except OSError:
            self._parsed.pop(name, None)
            return
        self._parsed[name] = ((st.st_mtime_ns, st.st_size, st.st_ino), document)

    def _write(self, name: str, document: Any) -> bool:
        """Write one file; a failure is logged once and kept in :attr:`save_error`.

        Returns:
            True when written (kept in memory when read-only).
        """
        if self.read_only:
            self._unwritten[name] = document
            return True
        try:
            write_json(self.path / name, document)
            self._remember(name, document)
        except OSError as exc:
            error = f"state directory {self.path} cannot be written ({exc.strerror or exc})"
            # Once per outage: files and per-node directories fail with different
            # errors (a file in place of the directory: "File exists", "Not a directory").
            if self.save_error is None:
                LOG.error(
                    "%s: Placement is still kept in step, but restarts will read it all "
                    "again and the consumers known to the audit are not saved; make the "
                    "directory writable (or free space) and it is used again",
                    error,
                )
            self.save_error = error
            return False
        if self.save_error is not None:
            LOG.info("state directory %s is writable again", self.path)
            self.save_error = None
        return True

    def _node_record(self, nodename: str, shape: type, *directories: str) -> Any | None:
        """``nodename``'s record: from the first of ``directories`` holding a ``shape``.

        Before the state directory is converted (a read-only store never
        converts it, an unwritable directory cannot), the earlier layout's
        single files are read instead.
        """
        self._convert()
        for directory in directories:
            doc = self._read(node_file(directory, nodename))
            if isinstance(doc, shape):
                return doc
        for name in layout.OLD_FILES.get(directories[0], ()):
            doc = self._read(name)
            if isinstance(doc, dict) and isinstance(doc.get(nodename), shape):
                return doc[nodename]
        return None

    def _set_record(self, nodename: str, value: Any, *directories: str) -> None:
        """Write ``nodename``'s record in each of ``directories`` in turn.

        One file after the other, each only once the one before it is written:
        a crash leaves at least one of them whole.
        """
        self._convert()
        for directory in directories:
            if not self._write(node_file(directory, nodename), value):
                return

    def _convert(self) -> None:
        """Convert the earlier single-file layout, once per store (:mod:`agent.state.layout`)."""
        if self._converted or self.read_only:
            return
        with self._lock:
            if not self._converted:
                layout.convert(self.path, self._read, self._write)
                self._converted = True

    def nova_compute_id(self) -> str | None:
        """The UUID in nova's ``compute_id`` file, or None when there is none.

        Read as nova 34 reads it (:func:`agent.state.node_identity.read`): next to each
        configuration file, then in nova's state_path (:attr:`nova_path`).

        Raises:
            ConfigError: a file holds no UUID, or two disagree (nova refuses to start then too).
        """
        return node_identity.read(self.identity_dirs)

    def write_nova_compute_id(self, node_uuid: str) -> str:
        """Write nova's ``compute_id`` in nova's state_path holding ``node_uuid`` unless
        one exists (as nova does, exclusively); the UUID nova will read. A read-only store
        writes nothing.

        Raises:
            ConfigError: the file cannot be written (:func:`agent.state.node_identity.write`).
        """
        held = self.nova_compute_id()
        if held is not None or self.read_only:
            return held or node_uuid
        return node_identity.write(self.nova_path, node_uuid, self.identity_dirs)

    def root_uuids(self) -> dict[str, str]:
        """``{nodename: UUID}`` of every compute node recorded; invalid entries are dropped."""
        doc = self._read(COMPUTE_NODES_FILE)
        if not isinstance(doc, dict):
            return {}
        out = {}
        for name, value in doc.items():
            try:
                out[str(name)] = str(uuidlib.UUID(str(value)))
            except ValueError:
                LOG.warning(
                    "state file %s: %r is not a UUID; ignoring it", COMPUTE_NODES_FILE, value
                )
        return out

    def root_uuid(self, nodename: str) -> str | None:
        """The recorded UUID of compute node ``nodename``, or None (an invalid entry: None)."""
        doc = self._read(COMPUTE_NODES_FILE)
        value = doc.get(nodename) if isinstance(doc, dict) else None
        if value is None:
            return None
        try:
            return str(uuidlib.UUID(str(value)))
        except ValueError:
            LOG.warning("state file %s: %r is not a UUID; ignoring it", COMPUTE_NODES_FILE, value)
            return None

    def set_root_uuid(self, nodename: str, uuid: str) -> None:
        """Record the UUID of compute node ``nodename``.

        A failure to write is logged and kept in :attr:`save_error`.
        """
        with self._lock:
            doc = self.root_uuids()
            doc[nodename] = str(uuidlib.UUID(uuid))
            self._write(COMPUTE_NODES_FILE, doc)

    def seen_providers(self, nodename: str) -> list[dict[str, Any]] | None:
        """Provider records of ``nodename`` as Placement last held them, or None.

        Records are shaped like ``GET /resource_providers`` items plus
        ``inventories``, ``traits`` and ``aggregates``.
        """
        return self._node_record(nodename, list, PLACEMENT_SEEN_DIR)

    def set_seen_providers(self, nodename: str, records: list[dict[str, Any]]) -> None:
        """Record what Placement holds for ``nodename`` after a write.

        A failure to write is logged and kept in :attr:`save_error`.
        """
        self._set_record(nodename, records, PLACEMENT_SEEN_DIR)

    def child_traits(self, nodename: str) -> dict[str, list[str]]:
        """The traits the agent last laid out on each child provider of ``nodename``.

        Returns:
            ``{provider UUID: [trait, ...]}``; empty when none are recorded
            (entries not shaped so are dropped).
        """
        doc = self._node_record(nodename, dict, CHILD_TRAITS_DIR) or {}
        return {
            str(uuid): [str(t) for t in traits]
            for uuid, traits in doc.items()
            if isinstance(traits, list)
        }

    def set_child_traits(self, nodename: str, record: dict[str, list[str]]) -> None:
        """Record the traits laid out on ``nodename``'s child providers.

        A failure to write is logged and kept in :attr:`save_error`.
        """
        self._set_record(nodename, record, CHILD_TRAITS_DIR)

    def fields(self, nodename: str) -> dict[str, Any] | None:
        """The fields of ``nodename``'s tree the agent wrote and yields, or None
        (``FieldLedger.to_json``'s shape: ``{"written": [...], "yielded": [...]}``)."""
        return self._node_record(nodename, dict, FIELDS_DIR)

    def set_fields(self, nodename: str, record: dict[str, Any]) -> None:
        """Record the fields of ``nodename``'s tree the agent wrote and yields (failure: logged)."""
        self._set_record(nodename, record, FIELDS_DIR)

    def consumers(self, nodename: str) -> dict[str, Any] | None:
        """The allocation audit's record of ``nodename``, or None.

        Stored as :func:`agent.audit.record_json.dump` writes it:
        ``{"instances": [consumer UUID], "unknown": {consumer UUID: first seen,
        seconds since the epoch}, "held": {provider UUID: {consumer UUID:
        {resource class: amount}}}, "generations": {provider UUID: generation}}``.
        """
        return self._node_record(nodename, dict, CONSUMERS_DIR, CONSUMERS_COPY_DIR)

    def set_consumers(self, nodename: str, record: dict[str, Any]) -> None:
        """Record the allocation audit's view of ``nodename``.

        A failure to write is logged and kept in :attr:`save_error`.
        """
        self._set_record(nodename, record, CONSUMERS_DIR, CONSUMERS_COPY_DIR)

    def last_cycle(self) -> dict[str, Any] | None:
        """The outcome of the service's last cycle (``CycleOutcome.to_json``), or None."""
        if LAST_CYCLE_FILE in self._unwritten:
            doc = self._unwritten[LAST_CYCLE_FILE]
        else:
            doc = read_json(self.path / LAST_CYCLE_FILE)
        return doc if isinstance(doc, dict) else None

    def set_last_cycle(self, record: dict[str, Any]) -> None:
        """Record the outcome of a cycle, for ``compute-agent status``.

        A failure to write is logged and kept in :attr:`save_error`.
        """
        self._write(LAST_CYCLE_FILE, record)
