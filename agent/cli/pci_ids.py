"""Vendor, device and class names from the system's PCI ID database (``pci.ids``).

The file is the one ``lspci`` reads (Debian's ``pci.ids`` package,
``/usr/share/misc/pci.ids``, which ``make run`` installs when missing; ``hwdata``
elsewhere). It is optional: without it names are empty and the ids are shown
alone.

Format (its own header documents it): ``vvvv  vendor`` at the start of a
line, ``<TAB>dddd  device`` under it, ``<TAB><TAB>ssss ssss  subsystem``
(not used here); ``C cc  class``, ``<TAB>ss  subclass``, ``<TAB><TAB>pp
programming interface``; ``#`` starts a comment.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

SEARCH_PATHS: tuple[str, ...] = (
    "/usr/share/misc/pci.ids",
    "/usr/share/hwdata/pci.ids",
    "/usr/share/pci.ids",
)
"""Where distributions install the database, first found wins."""


@dataclass
class PciIds:
    """Names by id, all ids lower-case hex.

    Attributes:
        path: the file read, or None when none was found.
        vendors: vendor id -> name.
        devices: (vendor id, device id) -> name.
        classes: class (2 digits), class+subclass (4) and class+subclass+prog-if
            (6) -> name.
    """

    path: str | None = None
    vendors: dict[str, str] = field(default_factory=dict)
    devices: dict[tuple[str, str], str] = field(default_factory=dict)
    classes: dict[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, lines: Iterable[str], path: str | None = None) -> PciIds:
        """Parse the database's lines; lines that fit no form are skipped."""
        ids = cls(path)
        vendor: str | None = None
        klass: str | None = None
        subclass: str | None = None
        for raw in lines:
            line = raw.rstrip("\n")
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            depth = len(line) - len(line.lstrip("\t"))
            text = line.lstrip("\t")
            if depth == 0 and text.startswith("C "):
                code, _, name = text[2:].partition(" ")
                klass, subclass, vendor = code.lower(), None, None
                ids.classes[klass] = name.strip()
                continue
            key, _, name = text.partition(" ")
            key, name = key.lower(), name.strip()
            if depth == 0:
                vendor, klass = key, None
                ids.vendors[key] = name
            elif depth == 1 and vendor is not None:
                ids.devices[(vendor, key)] = name
            elif depth == 1 and klass is not None:
                subclass = klass + key
                ids.classes[subclass] = name
            elif depth == 2 and klass is not None and subclass is not None:
                ids.classes[subclass + key] = name
        return ids

    @classmethod
    def load(cls, paths: Iterable[str] = SEARCH_PATHS) -> PciIds:
        """The first database of ``paths`` that exists; an empty one when none does.

        Raises:
            OSError: a database exists but cannot be read.
        """
        for path in paths:
            if os.path.isfile(path):
                with Path(path).open(encoding="utf-8", errors="replace") as f:
                    return cls.parse(f, path)
        return cls()

    def vendor(self, vendor_id: str) -> str:
        """The vendor's name, or ``""``."""
        return self.vendors.get(vendor_id.lower(), "")

    def device(self, vendor_id: str, device_id: str) -> str:
        """The device's name, or ``""``."""
        return self.devices.get((vendor_id.lower(), device_id.lower()), "")

    def class_name(self, class_code: str) -> str:
        """The most precise name of a 6-digit class code (prog-if, else subclass, else class)."""
        code = class_code.lower()
        for n in (6, 4, 2):
            name = self.classes.get(code[:n])
            if name:
                return name
        return ""
