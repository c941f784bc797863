"""The libvirt driver on tests/fixtures/libvirt: configuration, trees and allocations.

Every test runs the real libvirt library through its test driver
(``test:///abs/path/host.xml``, in-process, no daemon).
"""

from __future__ import annotations

from pathlib import Path

import libvirt
from oslo_config import cfg

from agent.cli.render import discover_record
from agent.conf import config
from agent.model.provider_tree import ProviderTree
from agent.shape import layout
from agent.shape.adapter import adapt
from drivers.libvirt import LibvirtDriver
from tests.helpers.paths import LIBVIRT

ROOT_UUID = "00000000-0000-0000-0000-0000000000c1"
# The layout marks providers it made with an ownership trait; not hardware.
OWNED = {layout.OWNER_TRAIT, "COMPUTE_NODE"}


def uri(fixture: str) -> str:
    """The test driver URI of a fixture's host file."""
    return f"test://{LIBVIRT / fixture / 'host.xml'}"


def make_conf(tmp_path: Path, fixture: str | None, **groups: dict[str, object]) -> cfg.ConfigOpts:
    """A loaded configuration for ``fixture`` (its capabilities file when it has one)."""
    overrides: dict[str, dict[str, object]] = {
        "DEFAULT": {
            "host": "cn1",
            "state_path": str(tmp_path),
            "reserved_host_memory_mb": 0,
            "instances_path": str(tmp_path / "instances"),
        },
        "compute": {"driver": "libvirt"},
        "libvirt": {"reconnect_attempts": 2, "reconnect_min_delay": 0.0},
    }
    if fixture is not None:
        overrides["libvirt"]["connection_uri"] = uri(fixture)
        caps = LIBVIRT / fixture / "capabilities.xml"
        if caps.exists():
            overrides["libvirt"]["capabilities_file"] = str(caps)
    for group, values in groups.items():
        overrides.setdefault(group, {}).update(values)
    return config.load([], overrides)


def laid_out(driver: LibvirtDriver) -> ProviderTree:
    """A tree with the root created, after ``driver.update_provider_tree``."""
    tree = ProviderTree()
    tree.new_root("cn1", ROOT_UUID)
    adapt(driver, driver.conf).update_provider_tree(tree, "cn1")
    return tree


def hardware_view(view: dict[str, dict]) -> dict[str, dict]:
    """``view`` with only hardware traits (``HW_*``, ``CUSTOM_*``): the host driver
    cannot know the hypervisor's COMPUTE_* capability traits."""
    return {
        name: {**p, "traits": {t for t in p["traits"] if not t.startswith("COMPUTE_")}}
        for name, p in view.items()
    }


def tree_view(tree: ProviderTree) -> dict[str, dict]:
    """{name: {"parent", "inv": {rc: (total, reserved, max_unit, ratio)}, "traits"}}"""
    out = {}
    for p in tree.all_data():
        out[p.name] = {
            "parent": tree.data(p.parent_uuid).name if p.parent_uuid else None,
            "inv": {
                rc: (i.total, i.reserved, i.max_unit, i.allocation_ratio)
                for rc, i in p.inventory.items()
            },
            "traits": set(p.traits) - OWNED,
        }
    return out


def allocations_by_name(driver: LibvirtDriver, tree: ProviderTree) -> dict[str, dict]:
    """``expected_allocations`` with provider UUIDs replaced by provider names."""
    names = {p.uuid: p.name for p in tree.all_data()}
    out = {}
    for consumer, typed in adapt(driver, driver.conf).expected_allocations(tree, "cn1").items():
        record = discover_record(typed)
        out[consumer] = {
            "allocations": {
                names[rp]: body["resources"] for rp, body in record["allocations"].items()
            },
            "project_id": record["project_id"],
            "user_id": record["user_id"],
        }
    return out


def libvirt_driver(
    tmp_path: Path, fixture: str | None, **groups: dict[str, object]
) -> LibvirtDriver:
    """A :class:`LibvirtDriver` on ``fixture``."""
    return LibvirtDriver(make_conf(tmp_path, fixture, **groups))


def sev_host_groups() -> dict[str, dict[str, object]]:
    """The configuration of the ``sev-host`` fixture: its domain capabilities (libvirt's
    ``<sev>``), its kvm_amd parameters as the sysfs root, CPUs 0-7 shared and 8-15
    dedicated."""
    fixture = LIBVIRT / "sev-host"
    return {
        "libvirt": {"domain_capabilities_file": str(fixture / "domcapabilities.xml")},
        "host_driver": {"sysfs_root": str(fixture / "sysfs")},
        "compute": {"cpu_shared_set": "0-7", "cpu_dedicated_set": "8-15"},
    }


def tdx_host_groups() -> dict[str, dict[str, object]]:
    """The configuration of the ``tdx-host`` fixture: its domain capabilities
    (``<tdx supported='yes'/>``), its misc cgroup capacity file (``tdx 63``) below the
    sysfs root, and ``[libvirt] cpu_mode = host-passthrough`` (nova detects TDX only so)."""
    fixture = LIBVIRT / "tdx-host"
    return {
        "libvirt": {
            "domain_capabilities_file": str(fixture / "domcapabilities.xml"),
            "cpu_mode": "host-passthrough",
        },
        "host_driver": {"sysfs_root": str(fixture / "sysfs")},
    }


TDX_LAUNCH_SECURITY = "<launchSecurity type='tdx'><quoteGenerationService/></launchSecurity>"
"""What nova 34 writes in a TDX guest's domain (``LibvirtConfigGuestTDXLaunchSecurity``)."""


class TdxDomain:
    """A test driver domain whose XML carries :data:`TDX_LAUNCH_SECURITY`, as libvirt 11
    returns a TDX guest's: libvirt 9.0's parser (this environment's) refuses
    ``type='tdx'``, so the element cannot be in the fixture's host file. Every other
    call goes to the real domain."""

    def __init__(self, dom: libvirt.virDomain) -> None:
        self._dom = dom

    def __getattr__(self, name: str) -> object:
        return getattr(self._dom, name)

    def XMLDesc(self, flags: int = 0) -> str:
        return self._dom.XMLDesc(flags).replace("</domain>", TDX_LAUNCH_SECURITY + "</domain>")


def with_tdx_guests(driver: LibvirtDriver, uuids: set[str]) -> LibvirtDriver:
    """``driver`` listing the domains ``uuids`` as :class:`TdxDomain` (see there)."""
    listed = driver.instances.list_domains

    def list_domains() -> list[libvirt.virDomain]:
        return [TdxDomain(d) if d.UUIDString() in uuids else d for d in listed()]

    driver.instances.list_domains = list_domains  # type: ignore[method-assign]
    return driver
