"""agent.state.store: a read-only store keeps what it would write in memory; a file per
node, and the conversion of the earlier single-file layout (agent.state.layout)."""

from __future__ import annotations

import json

from agent.state.layout import CONSUMERS_COPY_DIR, CONSUMERS_DIR, PLACEMENT_SEEN_DIR, node_file
from agent.state.store import StateStore

UUID = "7d7c4a47-0c1f-4a3e-9d2b-2f0c9b1e5a10"
SEEN = {"cn1": [{"uuid": UUID}], "cn/2": [{"uuid": "other"}]}
AUDIT = {"cn1": {"instances": ["i1"]}, "cn/2": {"instances": []}}


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
    assert (tmp_path / "state" / "placement_seen" / "cn1.json").is_file()


def test_each_node_writes_only_its_own_files(tmp_path):
    store = StateStore(tmp_path)
    store.set_consumers("cn1", AUDIT["cn1"])
    first = (tmp_path / node_file(CONSUMERS_DIR, "cn1")).stat().st_ino
    store.set_consumers("cn/2", AUDIT["cn/2"])  # a name with a slash is one file
    assert (tmp_path / node_file(CONSUMERS_DIR, "cn1")).stat().st_ino == first
    for directory in (CONSUMERS_DIR, CONSUMERS_COPY_DIR):
        names = sorted(p.name for p in (tmp_path / directory).iterdir())
        assert names == ["cn%2F2.json", "cn1.json"]
    long = "n" * 300
    store.set_consumers(long, {"instances": []})
    assert StateStore(tmp_path).consumers(long) == {"instances": []}
    assert StateStore(tmp_path).consumers("cn/2") == AUDIT["cn/2"]


def old_layout(path, *, copy_only=False):
    path.mkdir(parents=True, exist_ok=True)
    (path / "placement_seen.json").write_text(json.dumps(SEEN))
    if not copy_only:
        (path / "consumers.json").write_text(json.dumps(AUDIT))
    (path / "consumers.bak.json").write_text(json.dumps(AUDIT))


def test_the_old_single_files_are_converted_to_a_file_per_node(tmp_path):
    old_layout(tmp_path)
    store = StateStore(tmp_path)
    assert store.consumers("cn1") == AUDIT["cn1"]
    assert store.seen_providers("cn/2") == SEEN["cn/2"]
    for name in ("placement_seen.json", "consumers.json", "consumers.bak.json"):
        assert not (tmp_path / name).exists(), name
    for nodename in SEEN:
        seen = json.loads((tmp_path / node_file(PLACEMENT_SEEN_DIR, nodename)).read_text())
        assert seen == SEEN[nodename]
        for directory in (CONSUMERS_DIR, CONSUMERS_COPY_DIR):
            audit = json.loads((tmp_path / node_file(directory, nodename)).read_text())
            assert audit == AUDIT[nodename]


def test_a_lost_main_file_is_converted_from_its_copy(tmp_path):
    old_layout(tmp_path, copy_only=True)
    assert StateStore(tmp_path).consumers("cn1") == AUDIT["cn1"]
    assert not (tmp_path / "consumers.bak.json").exists()


def test_a_conversion_stopped_between_its_removals_drops_the_old_copy_unread(tmp_path):
    store = StateStore(tmp_path)
    store.set_consumers("cn1", {"instances": ["newer"]})
    # what a crash after removing consumers.json leaves: its copy, older than the new files
    (tmp_path / "consumers.bak.json").write_text(json.dumps(AUDIT))
    assert StateStore(tmp_path).consumers("cn1") == {"instances": ["newer"]}
    assert not (tmp_path / "consumers.bak.json").exists()


def test_a_read_only_store_reads_the_old_layout_and_converts_nothing(tmp_path):
    old_layout(tmp_path)
    before = sorted(tmp_path.iterdir())
    store = StateStore(tmp_path, read_only=True)
    assert store.consumers("cn/2") == AUDIT["cn/2"]
    assert store.seen_providers("cn1") == SEEN["cn1"]
    assert store.consumers("cn3") is None
    assert sorted(tmp_path.iterdir()) == before
