"""Who owns a domain and with which flavor: the metadata element in the domain XML.

Two formats are read from ``<metadata>``, the agent's own first:

The agent's element (namespace :data:`AGENT_NS`)::

    <ca:instance xmlns:ca="http://compute-agent/xmlns/instance/1.0">
      <ca:owner project="8f2c..." user="1b7e..."/>
      <ca:flavor name="m1.small" vcpus="2" memory_mb="2048"
                 root_gb="20" ephemeral_gb="0" swap_mb="0"/>
      <ca:root type="volume"/>
    </ca:instance>

``<ca:owner>`` is required (both attributes); ``<ca:flavor>`` and
``<ca:root>`` are optional (flavor attributes left out: vcpus and memory_mb
from the domain, disks 0; root type ``image`` or ``volume``).

nova's element (namespace ``http://openstack.org/xmlns/libvirt/nova/1.x``,
written by nova's libvirt driver, ``_get_guest_config_meta``)::

    <nova:instance><nova:flavor name=><nova:memory/><nova:disk/><nova:swap/>
      <nova:ephemeral/><nova:vcpus/>
      <nova:extraSpecs><nova:extraSpec name="hw:cpu_policy">mixed</nova:extraSpec>
      </nova:extraSpecs></nova:flavor>
      <nova:image uuid=><nova:properties>
        <nova:property name="hw_cpu_realtime_mask">^0-1</nova:property>
      </nova:properties></nova:image>
      <nova:owner><nova:user uuid=/><nova:project uuid=/></nova:owner>
      <nova:root type="image" uuid=/></nova:instance>

nova writes ``<nova:root>`` only for instances booted from an image, so its
absence means the instance was booted from a volume.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from drivers.libvirt.xmlutil import LibvirtXMLError, local_name, namespace, to_int

AGENT_NS = "http://compute-agent/xmlns/instance/1.0"
"""Namespace of the agent's ``<instance>`` metadata element."""

NOVA_NS_PREFIX = "http://openstack.org/xmlns/libvirt/nova/"
"""Every version of nova's namespace (1.0, 1.1, 1.2 ...) starts with this."""


@dataclass(frozen=True, slots=True)
class FlavorMeta:
    """Flavor amounts from metadata; None where the metadata does not say.

    Attributes:
        name: flavor name ("" when not given).
        vcpus: CPU count, or None (take the domain's).
        memory_mb: MiB, or None (take the domain's).
        root_gb: GiB.
        ephemeral_gb: GiB.
        swap_mb: MiB.
        extra_specs: nova's recorded flavor extra specs (``<nova:extraSpecs>``; empty
            for the agent's element and for nova before it wrote them).
    """

    name: str = ""
    vcpus: int | None = None
    memory_mb: int | None = None
    root_gb: int = 0
    ephemeral_gb: int = 0
    swap_mb: int = 0
    extra_specs: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True, slots=True)
class InstanceMeta:
    """What a domain's metadata says.

    Attributes:
        source: ``compute-agent`` or ``nova``.
        project_id: owning project.
        user_id: owning user.
        flavor: :class:`FlavorMeta`, or None when the metadata has none.
        boot_from_volume: True/False when the metadata says, else None.
        name: the instance's display name, or "".
        image_properties: the image's properties nova records
            (``<nova:image><nova:properties><nova:property name=...>``, as nova 34's
            ``_get_guest_config_meta`` writes them; empty when absent), e.g.
            ``hw_cpu_realtime_mask``.
    """

    source: str
    project_id: str
    user_id: str
    flavor: FlavorMeta | None = None
    boot_from_volume: bool | None = None
    name: str = ""
    image_properties: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))


def _nonneg(value: str | None, what: str, field: str) -> int:
    number = to_int(value, what, field)
    if number < 0:
        raise LibvirtXMLError(what, f"{field} {number} is negative")
    return number


def _agent(elem: ET.Element, what: str) -> InstanceMeta:
    ns = f"{{{AGENT_NS}}}"
    owner = elem.find(f"{ns}owner")
    project = owner.get("project", "").strip() if owner is not None else ""
    user = owner.get("user", "").strip() if owner is not None else ""
    if not project or not user:
        raise LibvirtXMLError(
            what, "compute-agent metadata needs <owner project=... user=...> (both non-empty)"
        )
    flavor = None
    f = elem.find(f"{ns}flavor")
    if f is not None:
        opt = {
            k: _nonneg(f.get(k), what, f"flavor {k}") for k in ("vcpus", "memory_mb") if f.get(k)
        }
        flavor = FlavorMeta(
            name=f.get("name", ""),
            vcpus=opt.get("vcpus"),
            memory_mb=opt.get("memory_mb"),
            root_gb=_nonneg(f.get("root_gb", "0"), what, "flavor root_gb"),
            ephemeral_gb=_nonneg(f.get("ephemeral_gb", "0"), what, "flavor ephemeral_gb"),
            swap_mb=_nonneg(f.get("swap_mb", "0"), what, "flavor swap_mb"),
        )
    bfv = None
    r = elem.find(f"{ns}root")
    if r is not None:
        kind = r.get("type", "")
        if kind not in ("image", "volume"):
            raise LibvirtXMLError(what, f"<root type={kind!r}>: expected 'image' or 'volume'")
        bfv = kind == "volume"
    return InstanceMeta("compute-agent", project, user, flavor, bfv, elem.get("name", ""))


def _nova(elem: ET.Element, what: str) -> InstanceMeta:
    ns = f"{{{namespace(elem.tag)}}}"
    user = elem.find(f"{ns}owner/{ns}user")
    project = elem.find(f"{ns}owner/{ns}project")
    user_id = user.get("uuid", "").strip() if user is not None else ""
    project_id = project.get("uuid", "").strip() if project is not None else ""
    if not user_id or not project_id:
        raise LibvirtXMLError(what, "nova metadata has no <nova:owner> user and project uuid")
    flavor = None
    f = elem.find(f"{ns}flavor")
    if f is not None:

        def amount(tag: str) -> int:
            return _nonneg(f.findtext(f"{ns}{tag}", "0"), what, f"nova:flavor {tag}")

        flavor = FlavorMeta(
            name=f.get("name", ""),
            vcpus=amount("vcpus"),
            memory_mb=amount("memory"),
            root_gb=amount("disk"),
            ephemeral_gb=amount("ephemeral"),
            swap_mb=amount("swap"),
            extra_specs=MappingProxyType(
                {
                    e.get("name", ""): (e.text or "").strip()
                    for e in f.findall(f"{ns}extraSpecs/{ns}extraSpec")
                    if e.get("name")
                }
            ),
        )
    bfv = elem.find(f"{ns}root") is None
    name = (elem.findtext(f"{ns}name") or "").strip()
    image = {
        e.get("name", ""): (e.text or "").strip()
        for e in elem.findall(f"{ns}image/{ns}properties/{ns}property")
        if e.get("name")
    }
    return InstanceMeta("nova", project_id, user_id, flavor, bfv, name, MappingProxyType(image))


def read_metadata(domain: ET.Element, what: str) -> InstanceMeta | None:
    """The owner metadata of a parsed domain: the agent's element, else nova's, else None.

    Args:
        domain: the ``<domain>`` root element.
        what: the domain, for messages (``domain vm-1 (uuid)``).

    Raises:
        LibvirtXMLError: an element of either format is present but malformed
            (no owner, a negative or non-integer amount, an unknown root type).
    """
    meta = domain.find("metadata")
    if meta is None:
        return None
    children = list(meta)
    for child in children:
        if namespace(child.tag) == AGENT_NS and local_name(child.tag) == "instance":
            return _agent(child, what)
    for child in children:
        if namespace(child.tag).startswith(NOVA_NS_PREFIX) and local_name(child.tag) == "instance":
            return _nova(child, what)
    return None
