"""Memory encryption (AMD SEV) and mixed CPUs on a libvirt host (fixtures/libvirt/sev-host).

The host's ``<sev>`` and ``<launchSecurity>`` come from libvirt's own test data
(domcapabilities.xml: an excerpt of libvirt's
``tests/domaincapsdata/qemu_10.0.0-q35.x86_64+amdsev.xml``, maxGuests 59,
maxESGuests 450, sectypes sev and sev-snp); the kvm_amd module's parameters
from the fixture's sysfs. Rules: nova 34 ``nova/virt/libvirt/host.py``
(``supports_amd_sev*``, ``get_mem_encryption_inventories``) and
``nova/virt/libvirt/driver.py`` (``_ensure_memory_encryption_providers``).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from drivers.host.sysfs import SysfsReader
from drivers.libvirt.cpu_policy import cpu_policy
from drivers.libvirt.mem_encryption import (
    MIN_QEMU_SEV_ES,
    SevCapabilities,
    guest_model,
    host_models,
    parse_sev,
)
from tests.helpers.libvirt_fixtures import (
    allocations_by_name,
    laid_out,
    libvirt_driver,
    sev_host_groups,
    tree_view,
)
from tests.helpers.paths import LIBVIRT

DOMCAPS = (LIBVIRT / "sev-host" / "domcapabilities.xml").read_text()
SEV = "5e5e5e5e-0000-4000-8000-000000000001"
SEV_ES = "5e5e5e5e-0000-4000-8000-000000000002"
MIXED = "5e5e5e5e-0000-4000-8000-000000000003"
MIXED_XML_ONLY = "5e5e5e5e-0000-4000-8000-000000000004"
DEDICATED = "5e5e5e5e-0000-4000-8000-000000000005"


def kvm_amd(tmp_path: Path, **params: str) -> SysfsReader:
    base = tmp_path / "sys/module/kvm_amd/parameters"
    base.mkdir(parents=True)
    for name, value in params.items():
        (base / name).write_text(value + "\n")
    return SysfsReader(tmp_path)


def models(caps: SevCapabilities, reader: SysfsReader, qemu: int = MIN_QEMU_SEV_ES, arch="x86_64"):
    return {m.model: (m.slots, m.trait) for m in host_models(arch, caps, reader, qemu)}


def test_libvirts_sev_element_is_read():
    assert parse_sev(DOMCAPS) == SevCapabilities(True, 59, 450, frozenset({"sev", "sev-snp"}))
    assert (
        parse_sev(
            "<domainCapabilities><features><sev supported='no'/></features></domainCapabilities>"
        )
        == SevCapabilities()
    )


def test_sev_and_sev_es_by_novas_rules(tmp_path):
    caps = parse_sev(DOMCAPS)
    reader = kvm_amd(tmp_path, sev="Y", sev_es="1", sev_snp="N")
    assert models(caps, reader) == {
        "amd_sev": (59, "HW_CPU_X86_AMD_SEV"),
        "amd_sev_es": (450, "HW_CPU_X86_AMD_SEV_ES"),
    }
    # QEMU before 8.0.0: no SEV-ES (MIN_QEMU_SEV_ES_VERSION).
    assert set(models(caps, reader, qemu=7_002_000)) == {"amd_sev"}


def test_sev_snp_replaces_sev_es(tmp_path):
    reader = kvm_amd(tmp_path, sev="Y", sev_es="Y", sev_snp="Y")
    assert models(parse_sev(DOMCAPS), reader) == {
        "amd_sev": (59, "HW_CPU_X86_AMD_SEV"),
        "amd_sev_snp": (450, "HW_CPU_X86_AMD_SEV_SNP"),
    }
    # libvirt without sev-snp among the launch security types: no SNP, and still no ES.
    no_snp = SevCapabilities(True, 59, 450, frozenset({"sev"}))
    assert set(models(no_snp, reader)) == {"amd_sev"}


@pytest.mark.parametrize(
    "arch,params,caps",
    [
        ("aarch64", {"sev": "Y"}, None),  # not x86_64
        ("x86_64", {"sev": "N"}, None),  # kernel has SEV off
        ("x86_64", {}, None),  # no kvm_amd module (an Intel host)
        ("x86_64", {"sev": "Y"}, SevCapabilities()),  # libvirt/QEMU without SEV
        ("x86_64", {"sev": "Y"}, SevCapabilities(True, 0, 0)),  # no slots: no provider
    ],
)
def test_no_memory_encryption(tmp_path, arch, params, caps):
    reader = kvm_amd(tmp_path, **params)
    assert models(caps or parse_sev(DOMCAPS), reader, arch=arch) == {}


@pytest.mark.parametrize(
    "launch,model",
    [
        ("", ""),
        ("<launchSecurity type='sev'><policy>0x0033</policy></launchSecurity>", "amd_sev"),
        ("<launchSecurity type='sev'><policy>0x0037</policy></launchSecurity>", "amd_sev_es"),
        (
            "<launchSecurity type='sev-snp'><policy>0x00030000</policy></launchSecurity>",
            "amd_sev_snp",
        ),
        # nova 34's TDX guest (LibvirtConfigGuestTDXLaunchSecurity).
        ("<launchSecurity type='tdx'><quoteGenerationService/></launchSecurity>", "intel_tdx"),
        ("<launchSecurity type='s390-pv'/>", "s390-pv"),
    ],
)
def test_guest_model_from_launch_security(launch, model):
    assert guest_model(ET.fromstring(f"<domain>{launch}</domain>"), "d") == model


def pins(*sets: str) -> dict[int, frozenset[int]]:
    def cpus(text: str) -> frozenset[int]:
        lo, _, hi = text.partition("-")
        return frozenset(range(int(lo), int(hi or lo) + 1))

    return {i: cpus(s) for i, s in enumerate(sets)}


SHARED = frozenset(range(8))


@pytest.mark.parametrize(
    "vcpus,vcpu_pins,emulator,specs,expected",
    [
        # Extra specs decide: mixed with a mask, isolate.
        (
            4,
            pins("0-7", "8", "9", "10"),
            {11},
            {
                "hw:cpu_policy": "mixed",
                "hw:cpu_dedicated_mask": "^0",
                "hw:emulator_threads_policy": "isolate",
            },
            (3, True),
        ),
        (4, {}, set(), {"hw:cpu_policy": "mixed", "hw:cpu_dedicated_mask": "2-3"}, (2, False)),
        # Realtime mask of a mixed guest without a dedicated mask.
        (
            4,
            {},
            set(),
            {"hw:cpu_policy": "mixed", "hw:cpu_realtime": "yes", "hw:cpu_realtime_mask": "^0-1"},
            (2, False),
        ),
        (2, {}, set(), {"hw:cpu_policy": "dedicated"}, (2, False)),
        # isolate on a shared guest: nova adds nothing.
        (2, {}, set(), {"hw:emulator_threads_policy": "isolate"}, (0, False)),
        # No extra specs: <cputune> alone.
        (4, pins("0-7", "12", "0-7", "13"), {14}, {}, (2, True)),
        (1, pins("15"), {15}, {}, (1, False)),  # emulator on the guest's own CPU
        (1, pins("15"), {0, 1, 2, 3, 4, 5, 6, 7}, {}, (1, False)),  # on the shared set
        (2, pins("3", "4"), {5}, {}, (0, False)),  # pinned inside cpu_shared_set: shared
        # <cputune> first: nova pinned 2 vCPUs (the image's realtime mask ^0-1 won over
        # the flavor's ^0, which would make 3).
        (
            4,
            pins("0-7", "0-7", "8", "9"),
            {0, 1, 2, 3, 4, 5, 6, 7},
            {"hw:cpu_policy": "mixed", "hw:cpu_realtime": "yes", "hw:cpu_realtime_mask": "^0"},
            (2, False),
        ),
    ],
)
def test_cpu_policy(vcpus, vcpu_pins, emulator, specs, expected):
    got = cpu_policy(vcpus, vcpu_pins, frozenset(emulator), specs, SHARED, "d")
    assert (got.dedicated, got.emulator_isolated) == expected


@pytest.mark.parametrize(
    "specs,image,expected",
    [
        # The image's realtime mask before the flavor's (nova's get_realtime_cpu_constraint).
        ({"hw:cpu_realtime_mask": "^0"}, {"hw_cpu_realtime_mask": "^0-1"}, 2),
        ({}, {"hw_cpu_realtime_mask": "^0-1"}, 2),
        ({"hw:cpu_realtime_mask": "^0"}, {}, 3),
        ({}, {}, 4),  # no mask anywhere: every vCPU realtime
    ],
)
def test_a_silent_domain_takes_the_image_realtime_mask_first(specs, image, expected):
    specs = {"hw:cpu_policy": "mixed", "hw:cpu_realtime": "yes", **specs}
    assert cpu_policy(4, {}, frozenset(), specs, SHARED, "d", image).dedicated == expected


def test_a_silent_domain_takes_the_images_cpu_policy():
    """No hw:cpu_policy in the flavor: the image's hw_cpu_policy (get_cpu_policy_constraint)."""
    image = {"hw_cpu_policy": "dedicated"}
    assert cpu_policy(2, {}, frozenset(), {}, SHARED, "d", image).dedicated == 2


def test_sev_host_tree(tmp_path):
    driver = libvirt_driver(tmp_path, "sev-host", **sev_host_groups())
    tree = tree_view(laid_out(driver))
    assert {n: v for n, v in tree.items() if n != "cn1"} == {
        "cn1_amd_sev": {
            "parent": "cn1",
            "inv": {"MEM_ENCRYPTION_CONTEXT": (59, 0, 1, 1.0)},
            "traits": {"HW_CPU_X86_AMD_SEV"},
        },
        "cn1_amd_sev_snp": {
            "parent": "cn1",
            "inv": {"MEM_ENCRYPTION_CONTEXT": (450, 0, 1, 1.0)},
            "traits": {"HW_CPU_X86_AMD_SEV_SNP"},
        },
    }
    assert not {t for t in tree["cn1"]["traits"] if "SEV" in t}
    assert "MEM_ENCRYPTION_CONTEXT" not in tree["cn1"]["inv"]


def test_sev_host_instances_and_allocations(tmp_path, caplog):
    driver = libvirt_driver(tmp_path, "sev-host", **sev_host_groups())
    found = {i.uuid: i for i in driver.list_instances("cn1")}
    assert (found[SEV].mem_encryption, found[SEV_ES].mem_encryption) == ("amd_sev", "amd_sev_es")
    mixed = found[MIXED]
    assert (mixed.pinned, mixed.dedicated_vcpus, mixed.emulator_isolated) == (False, 3, True)
    tree = laid_out(driver)
    allocs = {u: a["allocations"] for u, a in allocations_by_name(driver, tree).items()}
    assert allocs[SEV] == {
        "cn1": {"DISK_GB": 20, "MEMORY_MB": 2048, "VCPU": 2},
        "cn1_amd_sev": {"MEM_ENCRYPTION_CONTEXT": 1},
    }
    # SEV-ES is not offered here (SEV-SNP enabled): nothing for it, and a warning.
    assert allocs[SEV_ES] == {"cn1": {"DISK_GB": 20, "MEMORY_MB": 2048, "VCPU": 2}}
    assert "amd_sev_es" in caplog.text
    assert allocs[MIXED]["cn1"] == {"DISK_GB": 20, "MEMORY_MB": 4096, "PCPU": 4, "VCPU": 1}
    assert allocs[MIXED_XML_ONLY]["cn1"] == {
        "DISK_GB": 20,
        "MEMORY_MB": 4096,
        "PCPU": 3,
        "VCPU": 2,
    }
    assert allocs[DEDICATED]["cn1"] == {"DISK_GB": 20, "MEMORY_MB": 1024, "PCPU": 1}
