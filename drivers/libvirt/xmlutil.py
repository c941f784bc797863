"""Parsing the XML documents libvirt returns, with errors that name the object.

libvirt's documents (capabilities, node devices, domains) are parsed with the
standard library's ElementTree: they come from a local, trusted daemon, carry
no DTD and no entities, and are small.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from drivers.errors import AgentError


class LibvirtXMLError(AgentError):
    """A document from libvirt cannot be used.

    Attributes:
        what: the object it describes (``domain vm-1 (uuid)``, ``node device pci_...``).
        reason: why, in a few words.
    """

    def __init__(self, what: str, reason: str) -> None:
        self.what = what
        self.reason = reason
        super().__init__(f"{what}: {reason}")


def parse_xml(text: str, what: str) -> ET.Element:
    """The root element of ``text``.

    Args:
        text: the XML as libvirt returned it.
        what: the object it describes, for the error message.

    Raises:
        LibvirtXMLError: the text is not well-formed XML.
    """
    try:
        return ET.fromstring(text)
    except ET.ParseError as exc:
        raise LibvirtXMLError(what, f"unparsable XML from libvirt ({exc})") from None


def int_text(elem: ET.Element | None, what: str, field: str, base: int = 10) -> int:
    """The integer text of ``elem`` (``0x`` prefixes allowed with base 16).

    Raises:
        LibvirtXMLError: ``elem`` is missing or its text is not an integer.
    """
    if elem is None or elem.text is None:
        raise LibvirtXMLError(what, f"no {field}")
    return to_int(elem.text, what, field, base)


def to_int(text: str | None, what: str, field: str, base: int = 10) -> int:
    """``text`` as an integer (``0x`` prefixes allowed with base 16 or 0).

    Raises:
        LibvirtXMLError: ``text`` is None or not an integer.
    """
    if text is None:
        raise LibvirtXMLError(what, f"no {field}")
    try:
        return int(text.strip(), base)
    except ValueError:
        raise LibvirtXMLError(what, f"{field} {text.strip()!r} is not an integer") from None


def local_name(tag: str) -> str:
    """``{namespace}name`` -> ``name``."""
    return tag.rpartition("}")[2]


def namespace(tag: str) -> str:
    """``{namespace}name`` -> ``namespace`` ("" when there is none)."""
    return tag[1:].partition("}")[0] if tag.startswith("{") else ""
