"""A vTPM server finds a libvirt host the agent reported, by nova 34's own scheduler query.

The host: the numa-sriov libvirt fixture (real libvirt, test driver) with its
saved domain capabilities (TPM models tpm-tis and tpm-crb, backend emulator,
version 2.0). The agent's cycle writes it into a real Placement; nova's
``process_reqspec`` and ``ResourceRequest`` (tests/helpers/nova_requests.py)
build the query of a flavor with ``hw:tpm_version``, ``hw:tpm_model`` and
``hw:tpm_secret_security``: ``_translate_vtpm_request`` requires
``COMPUTE_SECURITY_TPM_2_0`` and ``COMPUTE_SECURITY_TPM_CRB``,
``tpm_secret_security_filter`` requires
``COMPUTE_SECURITY_TPM_SECRET_SECURITY_{USER,HOST,DEPLOYMENT}`` on the root.
"""

from __future__ import annotations

import pytest

from agent.placement.report import ReportClient
from agent.state.store import StateStore
from tests.helpers.libvirt_fixtures import libvirt_driver
from tests.helpers.nova_requests import candidate_roots, request_spec
from tests.helpers.paths import LIBVIRT
from tests.helpers.sync import cycle, remote_client

DOMCAPS = str(LIBVIRT / "numa-sriov" / "domcapabilities.xml")
NODE = "vtpm-host"
VTPM = {"hw:tpm_version": "2.0", "hw:tpm_model": "tpm-crb"}


@pytest.fixture
def report(tmp_path, served) -> ReportClient:
    return ReportClient(
        remote_client(tmp_path, served.url), StateStore(tmp_path / "state"), sleep=lambda s: None
    )


def _report_host(tmp_path, report: ReportClient, **libvirt: object) -> str:
    """One cycle of the libvirt driver with ``[libvirt]`` overrides; the root's UUID."""
    options = {"domain_capabilities_file": [DOMCAPS], **libvirt}
    driver = libvirt_driver(tmp_path, "numa-sriov", DEFAULT={"host": NODE}, libvirt=options)
    cycle(report, driver, NODE)
    return report.get_provider_tree_and_ensure_root(NODE).data(NODE).uuid


def _finds(base: str, extra_specs: dict[str, str]) -> set[str]:
    return candidate_roots(base, request_spec(extra_specs))


def test_a_vtpm_flavor_finds_the_host_only_with_swtpm(tmp_path, served, report):
    root = _report_host(tmp_path, report, swtpm_enabled=True)
    for policy in ("user", "host", "deployment"):
        assert _finds(served.url, {**VTPM, "hw:tpm_secret_security": policy}) == {root}
    assert _finds(served.url, VTPM) == {root}  # no policy asked: nova's default, user
    assert _finds(served.url, {**VTPM, "hw:tpm_version": "1.2", "hw:tpm_model": "tpm-tis"}) == set()

    _report_host(tmp_path, report)  # swtpm_enabled off, nova's default
    assert _finds(served.url, {**VTPM, "hw:tpm_secret_security": "user"}) == set()
    assert _finds(served.url, {}) == {root}  # still a host for a server without vTPM


def test_only_the_supported_secret_security_policies_find_the_host(tmp_path, served, report):
    root = _report_host(
        tmp_path, report, swtpm_enabled=True, supported_tpm_secret_security=["deployment"]
    )
    assert _finds(served.url, {**VTPM, "hw:tpm_secret_security": "deployment"}) == {root}
    assert _finds(served.url, {**VTPM, "hw:tpm_secret_security": "host"}) == set()
    assert _finds(served.url, VTPM) == set()  # the default policy, user, is not offered
