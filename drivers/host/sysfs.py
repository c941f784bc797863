"""Reading sysfs and /proc under a configurable root, with warnings and recording.

Every collector reads through a :class:`SysfsReader` so that (1) tests and
``--sysfs-root`` point discovery at a fixture tree, (2) a file that is
missing, unreadable or garbled becomes one :class:`SysfsError` naming the
path, which the collector turns into a warning and leaves that device out,
and (3) ``compute-agent capture`` learns exactly which files discovery read
(:class:`Recorder`) and copies those and nothing else.

Paths given to the reader are relative to the root and start with ``sys/``
or ``proc/`` (the root holds both, like ``/``).
"""

from __future__ import annotations

import errno
import logging
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from drivers.errors import HostDescriptionError

LOG = logging.getLogger("drivers.host")

T = TypeVar("T")


class SysfsError(HostDescriptionError):
    """A sysfs or /proc file could not be used.

    Collectors turn it into a warning and leave the device out; when it
    escapes discovery (no CPU, no /proc/meminfo: the host itself cannot be
    read) it is bad input, so the commands exit 2 with its one line
    (README, exit codes).

    Attributes:
        path: the absolute path at fault (what the operator should look at).
        reason: why, in a few words.
    """

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(path, "", reason)


@dataclass(slots=True)
class Recorder:
    """What discovery read, for ``capture``.

    Failed reads are recorded too, so that a capture fails the same way
    where the original did (a capture must replay to the same records).

    Attributes:
        files: relative path -> content read.
        blobs: relative path -> bytes of a file that is not UTF-8 text.
        links: relative path -> the link's target, as ``readlink`` gave it.
        dirs: relative path -> entry names discovery kept from that listing.
        broken: relative path -> what a capture writes there to fail the same
            way: :data:`BROKEN_DIR` (a directory where a file or link was
            expected), :data:`BROKEN_FILE` (a file where a link was expected)
            or :data:`BROKEN_UNREADABLE` (exists, cannot be read or listed).
    """

    files: dict[str, str] = field(default_factory=dict)
    blobs: dict[str, bytes] = field(default_factory=dict)
    links: dict[str, str] = field(default_factory=dict)
    dirs: dict[str, set[str]] = field(default_factory=dict)
    broken: dict[str, str] = field(default_factory=dict)


BROKEN_DIR = "dir"
"""A directory stands where a file or a symlink was expected."""
BROKEN_FILE = "file"
"""A regular file stands where a symlink was expected."""
BROKEN_UNREADABLE = "unreadable"
"""The path exists but cannot be read (permissions, I/O error, symlink loop)."""


class SysfsReader:
    """Reads files below ``root`` (``/`` on a real host, a fixture in tests).

    Args:
        root: the directory holding ``sys/`` and ``proc/``.
        recorder: when given, every successful read is recorded in it.

    Attributes:
        warnings: the warnings emitted so far, one line each, naming the path.
    """

    def __init__(
        self, root: str | os.PathLike[str] = "/", recorder: Recorder | None = None
    ) -> None:
        self.root = os.path.abspath(os.fspath(root))
        self.recorder = recorder
        self.warnings: list[str] = []
        # Plain string joins: discovery of a large host does ~10k reads and
        # pathlib would double the time (bench/discover.py).
        self._prefix = "" if self.root == "/" else self.root

    @property
    def is_live(self) -> bool:
        """True when the root is the real ``/`` (pyudev and psutil see the same host)."""
        return os.path.realpath(self.root) == "/"

    def path(self, rel: str) -> str:
        """Absolute path of ``rel`` below the root."""
        return f"{self._prefix}/{rel}"

    def warn(self, message: str) -> None:
        """Log ``message`` as a warning and keep it in :attr:`warnings`."""
        self.warnings.append(message)
        LOG.warning("%s", message)

    def skip(self, exc: SysfsError, what: str) -> None:
        """Warn that ``what`` is left out because of ``exc``."""
        self.warn(f"{exc.path}: {exc.reason}; {what} left out")

    # -- raw reads -------------------------------------------------------------

    def _broken(self, rel: str, exc: OSError, *, link: bool = False) -> None:
        """Record a failed read so that ``capture`` can make it fail alike."""
        if self.recorder is None:
            return
        if os.path.isdir(self.path(rel)) and (link or exc.errno == errno.EISDIR):
            kind = BROKEN_DIR
        elif link:
            # readlink failed on something that is not a directory: a plain
            # file fails it the same way (EINVAL), whatever stood there.
            kind = BROKEN_FILE
        else:
            kind = BROKEN_UNREADABLE
        self.recorder.broken[rel] = kind

    def _read_bytes(self, rel: str, missing_ok: bool) -> bytes | None:
        p = self.path(rel)
        try:
            fd = os.open(p, os.O_RDONLY)
            try:
                chunks = []
                while chunk := os.read(fd, 65536):
                    chunks.append(chunk)
            finally:
                os.close(fd)
        except FileNotFoundError:
            if missing_ok:
                return None
            raise SysfsError(p, "missing") from None
        except OSError as exc:
            if exc.errno == errno.ENOTDIR:
                # A parent is a file: the path cannot exist, as if missing.
                if missing_ok:
                    return None
                raise SysfsError(p, "missing") from None
            self._broken(rel, exc)
            raise SysfsError(p, f"unreadable ({exc.strerror or exc})") from None
        return b"".join(chunks)

    def _read(self, rel: str, missing_ok: bool) -> str | None:
        data = self._read_bytes(rel, missing_ok)
        if data is None:
            return None
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            if self.recorder is not None:
                self.recorder.blobs[rel] = data
            raise SysfsError(self.path(rel), "garbled (not UTF-8 text)") from None
        if self.recorder is not None:
            self.recorder.files[rel] = text
        return text

    def optional_bytes(self, rel: str) -> bytes | None:
        """The bytes of a binary file that may be absent (a PCI function's ``vpd``).

        Raises:
            SysfsError: the file exists but cannot be read.
        """
        data = self._read_bytes(rel, missing_ok=True)
        if data is not None and self.recorder is not None:
            self.recorder.blobs[rel] = data
        return data

    def text(self, rel: str) -> str:
        """The stripped content of a file that must exist.

        Raises:
            SysfsError: missing, unreadable or not text.
        """
        value = self._read(rel, missing_ok=False)
        assert value is not None  # missing_ok=False never returns None
        return value.strip()

    def optional_text(self, rel: str) -> str | None:
        """The stripped content of a file that may be absent; None when it is.

        Raises:
            SysfsError: the file exists but cannot be read.
        """
        value = self._read(rel, missing_ok=True)
        return None if value is None else value.strip()

    def raw(self, rel: str) -> str:
        """The whole content of a file, unstripped (for multi-line files).

        Raises:
            SysfsError: missing, unreadable or not text.
        """
        value = self._read(rel, missing_ok=False)
        assert value is not None
        return value

    def parse(self, rel: str, parser: Callable[[str], T], *, optional: bool = False) -> T | None:
        """``parser(text)`` of a file; a parser's ValueError becomes "garbled".

        Returns:
            The parsed value; None when ``optional`` and the file is absent.

        Raises:
            SysfsError: missing (unless optional), unreadable or garbled.
        """
        text = self.optional_text(rel) if optional else self.text(rel)
        if text is None:
            return None
        try:
            return parser(text)
        except ValueError as exc:
            raise SysfsError(self.path(rel), f"garbled ({text[:40]!r}: {exc})") from None

    def integer(self, rel: str) -> int:
        """A decimal integer file such as ``sriov_numvfs``.

        Raises:
            SysfsError: missing, unreadable or not an integer.
        """
        value = self.parse(rel, int)
        assert value is not None
        return value

    def optional_integer(self, rel: str) -> int | None:
        """A decimal integer file that may be absent.

        Raises:
            SysfsError: present but unreadable or not an integer.
        """
        return self.parse(rel, int, optional=True)

    def link(self, rel: str) -> str | None:
        """The target of symlink ``rel`` (as ``readlink`` gives it), None when absent.

        Raises:
            SysfsError: ``rel`` exists but is not a symlink, or cannot be read.
        """
        p = self.path(rel)
        try:
            target = os.readlink(p)
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno == errno.ENOTDIR:
                return None
            self._broken(rel, exc, link=True)
            reason = "not a symlink" if exc.errno == errno.EINVAL else exc.strerror
            raise SysfsError(p, f"unreadable ({reason})") from None
        if self.recorder is not None:
            self.recorder.links[rel] = target
        return target

    def link_name(self, rel: str, depth: int = 1) -> str | None:
        """A component of link ``rel``'s target, counted from the end (1 = last).

        ``driver -> ../../../bus/pci/drivers/i40e`` gives ``i40e``; depth 2 of
        an mdev link gives its parent device.

        Raises:
            SysfsError: the link cannot be read or its target is too short.
        """
        target = self.link(rel)
        if target is None:
            return None
        parts = [p for p in target.split("/") if p]
        if len(parts) < depth:
            raise SysfsError(self.path(rel), f"garbled (link target {target!r})")
        return parts[-depth]

    def listdir(self, rel: str, pattern: re.Pattern[str]) -> list[str] | None:
        """Entries of directory ``rel`` whose names fully match ``pattern``, sorted.

        Returns:
            The names; None when the directory does not exist.

        Raises:
            SysfsError: the directory exists but cannot be listed.
        """
        p = self.path(rel)
        try:
            names = os.listdir(p)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            self._broken(rel, exc)
            raise SysfsError(p, f"unreadable ({exc.strerror})") from None
        kept = sorted(n for n in names if pattern.fullmatch(n))
        if self.recorder is not None:
            self.recorder.dirs.setdefault(rel, set()).update(kept)
        return kept


Root = str | os.PathLike[str] | SysfsReader
"""What the public ``discover_*`` functions accept: a root directory or a reader."""


def as_reader(root: Root) -> SysfsReader:
    """``root`` itself when it is a reader, else a new reader on that directory."""
    return root if isinstance(root, SysfsReader) else SysfsReader(root)


def natural_key(name: str) -> tuple[str, int]:
    """Sort key putting ``virtfn10`` after ``virtfn9`` (name prefix, trailing number)."""
    m = re.match(r"^(.*?)(\d+)$", name)
    return (m[1], int(m[2])) if m else (name, -1)
