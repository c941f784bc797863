"""Small parts of the service: the metrics address, the watchdog period, the audit record."""

from __future__ import annotations

import pytest

from agent.audit import record_json
from agent.audit.consumer_record import ConsumerRecord as AuditRecord
from agent.audit.held import HeldAllocations
from agent.model.allocations import ProviderAllocations
from agent.model.exceptions import ConfigError
from agent.service.metrics import parse_listen
from agent.service.notify import Notifier


@pytest.mark.parametrize(
    ("text", "want"),
    [("127.0.0.1:9180", ("127.0.0.1", 9180)), ("[::1]:0", ("::1", 0)), ("node1:80", ("node1", 80))],
)
def test_parse_listen(text, want):
    assert parse_listen(text) == want


@pytest.mark.parametrize("text", ["9180", "127.0.0.1", "127.0.0.1:http", ":9180", "h:70000"])
def test_parse_listen_refuses_with_the_option_name(text):
    with pytest.raises(ConfigError, match=r"\[metrics\] listen"):
        parse_listen(text)


def test_watchdog_interval_is_half_of_watchdog_usec(monkeypatch):
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    monkeypatch.setenv("WATCHDOG_USEC", "300000000")
    monkeypatch.delenv("WATCHDOG_PID", raising=False)
    notifier = Notifier()
    assert notifier.watchdog_interval == 150.0
    assert not notifier.enabled
    notifier.ready()  # no socket: nothing happens, nothing raised
    monkeypatch.setenv("WATCHDOG_PID", "1")  # meant for another process
    assert notifier.watchdog_interval is None
    monkeypatch.delenv("WATCHDOG_USEC")
    assert Notifier().watchdog_interval is None


def test_audit_record_round_trip_and_corrupt_state():
    record = AuditRecord(
        instances={"i1"},
        unknown={"u1": 5.0},
        held=HeldAllocations({"rp": ProviderAllocations(7, {"i1": {"VCPU": 2}})}),
        claims={"i2": 4.0},
        gone={"i3"},
    )
    assert record_json.load(record_json.dump(record)) == record
    assert record_json.load({"instances": 3}) == AuditRecord()
    assert record_json.load(None) == AuditRecord()
