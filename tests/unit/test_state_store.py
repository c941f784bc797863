"""agent.state.store: a read-only store keeps what it would write in memory."""

from __future__ import annotations

from agent.state.store import StateStore

UUID = "7d7c4a47-0c1f-4a3e-9d2b-2f0c9b1e5a10"


def test_read_only_store_reads_back_its_writes_and_touches_no_file(tmp_path):
    written = StateStore(tmp_path / "state")
    written.set_root_uuid("cn1", UUID)
    before = sorted((tmp_path / "state").iterdir())
    store = StateStore(tmp_path / "state", read_only=True)
    assert store.root_uuid("cn1") == UUID  # reads what is on disk
    store.set_root_uuid("cn2", UUID)
    store.set_seen_providers("cn2", [{"uuid": UUID}])
    store.set_consumers("cn2", {"instances": []})
    store.set_last_cycle({"ok": True})
    assert store.root_uuids() == {"cn1": UUID, "cn2": UUID}
    assert store.seen_providers("cn2") == [{"uuid": UUID}]
    assert store.consumers("cn2") == {"instances": []}
    assert store.last_cycle() == {"ok": True}
    assert sorted((tmp_path / "state").iterdir()) == before
    assert StateStore(tmp_path / "state").root_uuids() == {"cn1": UUID}


def test_store_that_writes_creates_its_files(tmp_path):
    StateStore(tmp_path / "state").set_seen_providers("cn1", [])
    assert (tmp_path / "state" / "placement_seen.json").is_file()
