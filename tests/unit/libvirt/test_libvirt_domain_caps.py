"""vTPM traits and the domain capabilities of every guest arch and machine type, as nova 34.

nova's rules: ``nova/virt/libvirt/driver.py`` ``_get_tpm_traits``,
``_check_vtpm_support``, ``_get_video_model_traits``, ``_get_storage_bus_traits``;
``nova/virt/libvirt/host.py`` ``get_domain_capabilities`` (which machine types),
``supports_secure_boot``, ``tpm_models``, ``tpm_versions``.

Real libvirt through its test driver, which cannot answer
virConnectGetDomainCapabilities: saved documents stand in for it
(``[libvirt] domain_capabilities_file``), and, where the test is which calls
nova's rules make, a connection whose ``getDomainCapabilities`` answers from
those documents and refuses a non-native arch with kvm as libvirt does.
"""

from __future__ import annotations

import libvirt
import pytest

from agent.model.exceptions import ConfigError
from drivers.libvirt.guests import machine_types, parse_guest_arches
from drivers.libvirt.reader import CapabilityTraits
from drivers.libvirt.traits import (
    TraitSettings,
    capability_traits,
    parse_domain_capabilities,
    vtpm_problem,
)
from tests.helpers.libvirt_fixtures import laid_out, libvirt_driver, make_conf
from tests.helpers.paths import LIBVIRT

Q35 = LIBVIRT / "numa-sriov" / "domcapabilities.xml"
PC = LIBVIRT / "numa-sriov" / "domcapabilities-pc.xml"
SECRET = {
    "COMPUTE_SECURITY_TPM_SECRET_SECURITY_USER",
    "COMPUTE_SECURITY_TPM_SECRET_SECURITY_HOST",
    "COMPUTE_SECURITY_TPM_SECRET_SECURITY_DEPLOYMENT",
}

CAPS = """<capabilities>
  <host><cpu><arch>x86_64</arch></cpu></host>
  <guest>
    <os_type>hvm</os_type>
    <arch name='x86_64'>
      <emulator>/usr/bin/qemu-system-x86_64</emulator>
      <machine maxCpus='255'>pc-i440fx-8.2</machine>
      <machine canonical='pc-i440fx-8.2' maxCpus='255'>pc</machine>
      <machine maxCpus='288'>pc-q35-8.2</machine>
      <machine canonical='pc-q35-8.2' maxCpus='288'>q35</machine>
      <domain type='qemu'/>
      <domain type='kvm'/>
    </arch>
  </guest>
  <guest>
    <os_type>hvm</os_type>
    <arch name='aarch64'>
      <emulator>/usr/bin/qemu-system-aarch64</emulator>
      <machine canonical='virt-8.2' maxCpus='512'>virt</machine>
      <domain type='qemu'/>
    </arch>
  </guest>
</capabilities>"""


def _traits(*docs, **settings) -> frozenset[str]:
    domains = [parse_domain_capabilities(d.read_text()) for d in docs]
    return capability_traits(
        "x86_64", frozenset({"x86_64"}), domains, 9_000_000, TraitSettings(**settings)
    )


def test_vtpm_traits_and_secret_security_policies():
    on = _traits(Q35, swtpm_enabled=True)
    assert {"COMPUTE_SECURITY_TPM_2_0", "COMPUTE_SECURITY_TPM_CRB"} | SECRET <= on
    assert "COMPUTE_SECURITY_TPM_1_2" not in on  # backendVersion lists 2.0 only
    host_only = _traits(Q35, swtpm_enabled=True, tpm_secret_security=("host",))
    assert {t for t in host_only if "SECRET" in t} == {"COMPUTE_SECURITY_TPM_SECRET_SECURITY_HOST"}
    # swtpm off (nova's default): no TPM trait at all, secret security included.
    assert not any("_TPM_" in t for t in _traits(Q35))
    # virt_type lxc: nova refuses to start; the agent reports no TPM trait and says why.
    lxc = _traits(Q35, swtpm_enabled=True, virt_type="lxc")
    assert not any("_TPM_" in t for t in lxc)
    dom = parse_domain_capabilities(Q35.read_text())
    assert "virt_type" in vtpm_problem("x86_64", [dom], "lxc")
    assert vtpm_problem("x86_64", [dom], "kvm") == ""


def test_no_emulator_backend_means_no_vtpm(tmp_path):
    text = Q35.read_text().replace("<value>emulator</value>", "")
    path = tmp_path / "domcaps.xml"
    path.write_text(text)
    assert not any("_TPM_" in t for t in _traits(path, swtpm_enabled=True))
    driver = libvirt_driver(
        tmp_path,
        "numa-sriov",
        libvirt={"domain_capabilities_file": [str(path)], "swtpm_enabled": True},
    )
    root = laid_out(driver).data("cn1").traits
    assert not any("_TPM_" in t for t in root)
    assert [w for w in driver.warnings if "swtpm_enabled" in w and "emulated TPM" in w]


def test_an_unknown_secret_security_policy_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="supported_tpm_secret_security"):
        libvirt_driver(tmp_path, "numa-sriov", libvirt={"supported_tpm_secret_security": ["usr"]})


def test_graphics_and_buses_from_every_machine_type_tpm_from_the_first():
    traits = _traits(PC, Q35, swtpm_enabled=True)
    # pc (i440fx) adds QXL, VMVGA and IDE; q35 adds BOCHS, SATA and secure boot.
    assert {
        "COMPUTE_GRAPHICS_MODEL_QXL",
        "COMPUTE_GRAPHICS_MODEL_VMVGA",
        "COMPUTE_GRAPHICS_MODEL_BOCHS",
        "COMPUTE_STORAGE_BUS_IDE",
        "COMPUTE_STORAGE_BUS_SATA",
        "COMPUTE_SECURITY_UEFI_SECURE_BOOT",
    } <= traits
    assert "COMPUTE_GRAPHICS_MODEL_QXL" not in _traits(Q35)
    # Another arch's video models count too; its loader and TPM do not.
    arm = PC.read_text().replace("<arch>x86_64</arch>", "<arch>aarch64</arch>")
    domains = [parse_domain_capabilities(Q35.read_text()), parse_domain_capabilities(arm)]
    other = capability_traits("x86_64", frozenset(), domains, 0, TraitSettings())
    assert "COMPUTE_GRAPHICS_MODEL_QXL" in other


def test_the_machine_types_nova_asks_for():
    x86, arm = parse_guest_arches(CAPS, "kvm")
    assert (x86.arch, x86.emulator, x86.canonical) == (
        "x86_64",
        "/usr/bin/qemu-system-x86_64",
        ("pc", "q35"),
    )
    assert machine_types(x86, ()) == ("pc", "q35")
    assert machine_types(x86, ("x86_64=q35",)) == ("q35", "pc")
    assert machine_types(arm, ()) == ("virt",)


class _Answering:
    """A connection answering getDomainCapabilities from saved documents (module docstring)."""

    def __init__(self, docs: dict[tuple[str, str], str]) -> None:
        self.docs = docs
        self.asked: list[tuple[str | None, str, str | None, str]] = []

    def getDomainCapabilities(self, emulator, arch, machine, virt_type, flags):
        self.asked.append((emulator, arch, machine, virt_type))
        if (arch, machine) not in self.docs:
            raise libvirt.libvirtError(f"KVM is not supported on {arch} by this host")
        return self.docs[(arch, machine)]


def test_every_guest_arch_and_machine_type_is_asked_a_refused_arch_costs_itself(tmp_path):
    docs = {("x86_64", "pc"): PC.read_text(), ("x86_64", "q35"): Q35.read_text()}
    conn = _Answering(docs)
    driver = libvirt_driver(tmp_path, "numa-sriov")
    reader = CapabilityTraits(
        make_conf(tmp_path, "numa-sriov", libvirt={"swtpm_enabled": True}), driver._warn
    )
    domains = reader.domains(driver.connection, conn, "x86_64", CAPS)
    assert conn.asked == [
        ("/usr/bin/qemu-system-x86_64", "x86_64", "pc", "kvm"),
        ("/usr/bin/qemu-system-x86_64", "x86_64", "q35", "kvm"),
        ("/usr/bin/qemu-system-aarch64", "aarch64", "virt", "kvm"),
    ]
    assert [(d.arch, d.machine) for d in domains] == [
        ("x86_64", "pc-i440fx-8.2"),
        ("x86_64", "pc-q35-8.2"),
    ]
    assert driver.warnings == []  # a non-native arch refused with kvm is expected (nova: debug)


def test_test_driver_with_swtpm_warns_that_no_tpm_is_reported(tmp_path):
    driver = libvirt_driver(tmp_path, "numa-sriov", libvirt={"swtpm_enabled": True})
    root = laid_out(driver).data("cn1").traits
    assert not any("_TPM_" in t for t in root)
    assert [w for w in driver.warnings if "swtpm_enabled" in w]


def test_a_refused_arch_gives_no_arch_or_viommu_trait():
    """nova: COMPUTE_ARCH_* and vIOMMU models from the arches with domain capabilities."""
    x86 = [parse_domain_capabilities(Q35.read_text())]
    guests = frozenset({"x86_64", "aarch64"})
    traits = capability_traits("x86_64", guests, x86, 9_000_000, TraitSettings())
    assert "COMPUTE_ARCH_X86_64" in traits and "COMPUTE_VIOMMU_MODEL_INTEL" in traits
    assert "COMPUTE_ARCH_AARCH64" not in traits
    assert "COMPUTE_VIOMMU_MODEL_SMMUV3" not in traits
    # Without any domain capabilities (libvirt's test driver) the guest arches stand in.
    fallback = capability_traits("x86_64", guests, [], 9_000_000, TraitSettings())
    assert {"COMPUTE_ARCH_AARCH64", "COMPUTE_VIOMMU_MODEL_SMMUV3"} <= fallback
