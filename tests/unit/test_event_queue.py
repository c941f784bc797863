"""The service's event queue: bursts coalesce into what must be read again."""

from __future__ import annotations

from agent.service.events import EventQueue
from drivers.events import (
    DevicesChanged,
    HostResync,
    InstanceChanged,
    InstanceDestroyed,
    InstanceSpawning,
)
from drivers.records import Flavor, Instance


def make_queue():
    calls = {"wake": 0, "resync": 0, "kinds": []}
    queue = EventQueue(
        lambda: calls.__setitem__("wake", calls["wake"] + 1),
        lambda: calls.__setitem__("resync", calls["resync"] + 1),
        calls["kinds"].append,
    )
    return queue, calls


def test_a_burst_about_few_instances_becomes_one_batch_naming_each_once():
    queue, calls = make_queue()
    for i in range(100):
        queue.put(InstanceChanged("n1", f"uuid-{i % 10}", "started"))
    queue.put(DevicesChanged("n1", ("0000:81:00.1",), "add"))
    queue.put(DevicesChanged("n1", ("0000:81:00.2",), "add"))
    queue.put(DevicesChanged(None, (), "udev"))
    assert queue.pending and calls["wake"] == 103
    batch, since = queue.take()
    assert batch.events == 103 and since is not None
    assert batch.instances == {"n1": {f"uuid-{i}" for i in range(10)}}
    assert batch.devices == {"n1", None}
    assert batch.addresses["n1"] == {"0000:81:00.1", "0000:81:00.2"}
    assert calls["kinds"].count("instance") == 100 and calls["kinds"].count("devices") == 3
    assert not queue.pending and not queue.take()[0]


def test_a_resync_asks_for_a_cycle_and_queues_nothing():
    queue, calls = make_queue()
    queue.put(HostResync("libvirt re-opened"))
    assert calls["resync"] == 1 and calls["kinds"] == ["resync"] and not queue.pending


def test_claim_events_are_not_the_queues():
    queue, calls = make_queue()
    instance = Instance("u1", "p", "u", Flavor(vcpus=1, memory_mb=1))
    queue.put(InstanceSpawning("n1", instance))
    queue.put(InstanceDestroyed("n1", instance))
    assert not queue.pending and calls["wake"] == 0


def test_a_cycle_starting_drops_what_it_covers():
    queue, _calls = make_queue()
    queue.put(InstanceChanged("n1", "u1"))
    queue.put(InstanceChanged("n1", "u2"))
    assert queue.discard() == 2
    assert not queue.pending
    queue.put(InstanceChanged("n1", "u3"))  # heard during the cycle: kept for after it
    assert queue.take()[0].instances == {"n1": {"u3"}}
