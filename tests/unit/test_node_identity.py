"""nova's compute_id read and written as nova 34 does, and the evidence of nova-compute beside.

The rules are nova 34's ``nova/virt/node.py`` (``read_local_node_uuid``: each
configuration file's directory, then ``state_path``, every UUID found must agree;
``write_local_node_uuid``: ``open(..., 'x')``), checked here against nova's own
functions where they can run (nova's global ``CONF`` untouched: the functions are
fed their paths through a patched ``CONF``).
"""

from __future__ import annotations

import logging
import subprocess
import sys
import uuid as uuidlib
from pathlib import Path
from types import SimpleNamespace
from unittest import mock

import pytest

from agent.conf import config as agent_config
from agent.model.exceptions import ConfigError
from agent.placement.roots import ComputeNodes
from agent.service import beside_nova, nova_evidence
from agent.state import node_identity
from agent.state.node_identity import IdentityNotWritten, nova_identity
from agent.state.store import StateStore

A = "6f0b4a4e-8d3e-4c9a-9d0f-0a1b2c3d4e5f"
B = "0d6c9f2e-5b7a-4e1d-8c3b-9a8f7e6d5c4b"


def _nova_reads(config_files: list[str], state_path: str) -> str | None:
    from nova.virt import node

    conf = SimpleNamespace(config_file=config_files, state_path=state_path)
    with mock.patch.object(node, "CONF", conf):
        return node.read_local_node_uuid()


def test_read_finds_what_nova_finds_next_to_a_configuration_file(tmp_path):
    etc, state = tmp_path / "etc", tmp_path / "state"
    etc.mkdir()
    state.mkdir()
    (etc / "nova.conf").write_text("[DEFAULT]\n")
    (etc / "compute_id").write_text(f"  {A}\n")
    store = StateStore(state, config_files=[str(etc / "nova.conf")])
    assert store.nova_compute_id() == A == _nova_reads([str(etc / "nova.conf")], str(state))
    # Without the configuration file, neither looks there.
    assert StateStore(state).nova_compute_id() is None is _nova_reads([], str(state))


def test_two_files_that_disagree_are_refused_as_nova_refuses_them(tmp_path):
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "compute_id").write_text(A)
    (tmp_path / "compute_id").write_text(B)
    files = [str(tmp_path / "etc" / "nova.conf")]
    with pytest.raises(ConfigError, match="disagree"):
        StateStore(tmp_path, config_files=files).nova_compute_id()
    from nova import exception

    with pytest.raises(exception.InvalidNodeConfiguration):
        _nova_reads(files, str(tmp_path))


def test_write_is_exclusive_and_a_file_that_appeared_meanwhile_wins(tmp_path):
    dirs = node_identity.locations([], tmp_path)
    assert node_identity.write(tmp_path, A, dirs) == A
    assert (tmp_path / "compute_id").read_text() == A
    assert _nova_reads([], str(tmp_path)) == A  # nova reads what the agent wrote
    # nova wrote B between the agent's read and its write: B stays and is used.
    (tmp_path / "compute_id").write_text(B)
    assert node_identity.write(tmp_path, A, dirs) == B
    assert (tmp_path / "compute_id").read_text() == B


BLOCKED = Path("/proc")
"""A directory where no file can be created, even by root (procfs): a read-only state_path."""


def test_a_compute_id_that_cannot_be_written_names_the_file_and_the_fix():
    with pytest.raises(IdentityNotWritten, match="/proc/compute_id cannot be written") as caught:
        node_identity.write(BLOCKED, A, [BLOCKED])
    assert "start nova-compute once first" in str(caught.value)


def test_nova_state_path_is_read_from_the_configuration(tmp_path):
    path = tmp_path / "agent.conf"
    path.write_text(
        f"[DEFAULT]\nstate_path = {tmp_path / 'agent'}\n"
        f"[compute_agent]\nnova_state_path = {tmp_path / 'nova'}\n"
    )
    conf = agent_config.load([str(path)])
    args = nova_identity(conf)
    assert args == {"config_files": (str(path),), "nova_state_path": str(tmp_path / "nova")}
    store = StateStore(conf.state_path, **args)
    assert store.write_nova_compute_id(A) == A
    assert (tmp_path / "nova" / "compute_id").read_text() == A
    assert not (tmp_path / "agent" / "compute_id").exists()


def test_unwritable_compute_id_is_an_error_only_beside_nova_compute(tmp_path, caplog):
    blocked = BLOCKED
    roots = ComputeNodes(client=None, state=StateStore(tmp_path, nova_state_path=blocked))
    roots.one_node.add("cn1")
    with caplog.at_level(logging.WARNING, logger="agent.placement.roots"):
        roots.identity("cn1", A)  # alone on the host: warned, the agent goes on
    assert "cannot be written" in caplog.text
    roots = ComputeNodes(client=None, state=StateStore(tmp_path, nova_state_path=blocked))
    roots.one_node.add("cn1")
    roots.nova_compute_beside = True
    with pytest.raises(IdentityNotWritten):
        roots.identity("cn1", A)


def test_identity_warns_when_compute_id_names_another_compute_node(tmp_path, caplog):
    (tmp_path / "compute_id").write_text(B)
    roots = ComputeNodes(client=None, state=StateStore(tmp_path))
    roots.one_node.add("cn1")
    with caplog.at_level(logging.WARNING, logger="agent.placement.roots"):
        roots.identity("cn1", A)
    assert f"nova's node identity (compute_id) names {B}" in caplog.text
    assert (tmp_path / "compute_id").read_text() == B  # never overwritten


PRESENT = nova_evidence.NovaEvidence(nova_evidence.PRESENT, "evidence")


def _conf(tmp_path, nova_compute: str, numa: bool, compute: str = ""):
    path = tmp_path / "agent.conf"
    path.write_text(
        f"[DEFAULT]\nstate_path = {tmp_path}\n[numa]\nmodel_in_placement = {numa}\n"
        f"[compute_agent]\nnova_compute = {nova_compute}\n[compute]\n{compute}\n"
    )
    return agent_config.load([str(path)])


def test_evidence_is_the_option_or_a_running_nova_compute(tmp_path, nova_compute_lock):
    assert beside_nova.nova_compute_beside(_conf(tmp_path, "true", False)).present
    declared = beside_nova.nova_compute_beside(_conf(tmp_path, "false", False))
    assert (declared.state, declared.refuses) == (nova_evidence.ABSENT, False)
    conf = _conf(tmp_path, "auto", False)
    # This test runs in the host's PID namespace, seeing every process (root, no hidepid).
    assert beside_nova.nova_compute_beside(conf) == nova_evidence.NovaEvidence(
        nova_evidence.ABSENT,
        "[compute_agent] nova_compute = auto: no nova-compute process runs (every process "
        "of this host is seen)",
    )
    # A compute_id left after a takeover is no evidence.
    (tmp_path / "compute_id").write_text(A)
    assert not beside_nova.nova_compute_beside(conf).refuses
    script = tmp_path / "nova-compute"
    script.write_text("import time\ntime.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, str(script)])
    try:
        evidence = beside_nova.nova_compute_beside(conf)
    finally:
        proc.terminate()
        proc.wait()
    assert evidence.present and evidence.words.endswith(f"pid {proc.pid} is nova-compute")


def test_numa_is_refused_in_one_line_beside_nova_compute(tmp_path):
    beside_nova.refuse_layouts(_conf(tmp_path, "true", False), PRESENT)  # flat: fine
    with pytest.raises(ConfigError) as caught:
        beside_nova.refuse_layouts(_conf(tmp_path, "true", True), PRESENT)
    text = str(caught.value)
    assert "\n" not in text
    assert text.startswith("[numa] model_in_placement = true is refused beside nova-compute")
    assert "VCPU, PCPU and MEMORY_MB" in text and "back to flat" in text


def test_resource_class_renames_are_refused_in_one_line_beside_nova_compute(tmp_path):
    renames = "resource_class_renames = CUSTOM_NVME:PCI_DEVICE"
    with pytest.raises(ConfigError) as caught:
        beside_nova.refuse_layouts(_conf(tmp_path, "true", False, renames), PRESENT)
    text = str(caught.value)
    assert "\n" not in text
    assert text.startswith(
        "[compute] resource_class_renames = CUSTOM_NVME:PCI_DEVICE is refused beside nova-compute"
    )
    assert "writes it back at every claim" in text and "remove the option" in text


def test_a_fresh_uuid_is_not_taken_for_granted(tmp_path):
    """The UUID written is the one the compute node gets (no second generation)."""
    store = StateStore(tmp_path)
    fresh = str(uuidlib.uuid4())
    assert store.write_nova_compute_id(fresh) == fresh
    assert store.write_nova_compute_id(str(uuidlib.uuid4())) == fresh
