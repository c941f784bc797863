"""The rule of :class:`agent.model.yields.FieldLedger`: when the agent yields a field, and when
it writes it again (docs/service.md, "When another writer disagrees")."""

from __future__ import annotations

from agent.model.yields import INVENTORY, TRAIT, FieldKey, FieldLedger

SSE3 = FieldKey("rp", TRAIT, "HW_CPU_X86_SSE3")
MEM = FieldKey("rp", INVENTORY, "MEMORY_MB")
OURS = {"total": 1024, "reserved": 512}
NOVAS = {"total": 1024, "reserved": 4096}


def test_written_on_a_new_provider_then_changed_once_is_undone_once() -> None:
    ledger = FieldLedger()
    ledger.wrote(SSE3, True, False, new_provider=True)
    assert ledger.review(SSE3, "cn1", True, False) is False  # a first change: written back
    ledger.wrote(SSE3, True, False, new_provider=False)
    assert ledger.review(SSE3, "cn1", True, False) is True  # changed back: yielded
    (y,) = ledger.yields()
    assert (y.agent, y.other) == (True, False)
    assert "trait HW_CPU_X86_SSE3: the agent wants present, another writer keeps absent" in (
        y.describe()
    )
    assert ledger.started == [y]


def test_written_over_another_writers_value_is_yielded_at_its_first_change_back() -> None:
    """nova first: the agent's first write of a field was over nova's value."""
    ledger = FieldLedger()
    assert ledger.review(MEM, "cn1", OURS, NOVAS) is False
    ledger.wrote(MEM, OURS, NOVAS, new_provider=False)
    assert ledger.review(MEM, "cn1", OURS, NOVAS) is True


def test_over_its_own_value_a_first_change_is_undone_once() -> None:
    """The agent's own configuration changed its value: what it overwrote was its own."""
    ledger = FieldLedger()
    ledger.wrote(MEM, OURS, None, new_provider=True)
    ledger.wrote(MEM, {**OURS, "reserved": 1024}, OURS, new_provider=False)
    assert ledger.review(MEM, "cn1", {**OURS, "reserved": 1024}, NOVAS) is False


def test_a_yield_ends_when_the_agent_wants_another_value_or_agrees() -> None:
    ledger = FieldLedger()
    ledger.wrote(MEM, OURS, NOVAS, new_provider=False)
    assert ledger.review(MEM, "cn1", OURS, NOVAS) is True
    assert ledger.review(MEM, "cn1", OURS, {**NOVAS, "reserved": 2048}) is True  # still
    assert ledger.yields()[0].other == {**NOVAS, "reserved": 2048}
    changed = {**OURS, "total": 2048}
    assert ledger.review(MEM, "cn1", changed, NOVAS) is False  # written once again
    assert not ledger.yielded and len(ledger.ended) == 1
    ledger.wrote(MEM, changed, NOVAS, new_provider=False)
    assert ledger.review(MEM, "cn1", changed, NOVAS) is True  # changed back: yielded at once
    assert ledger.review(MEM, "cn1", NOVAS, NOVAS) is False  # the agent agrees: over
    assert not ledger.yielded and MEM not in ledger.written
    assert ledger.review(MEM, "cn1", OURS, NOVAS) is False  # its mind changes: written once


def test_the_ledger_survives_its_json_and_forgets_removed_providers() -> None:
    ledger = FieldLedger()
    ledger.wrote(MEM, OURS, NOVAS, new_provider=False)
    ledger.wrote(SSE3, True, False, new_provider=False)
    assert ledger.review(SSE3, "cn1", True, False) is True
    again = FieldLedger.from_json(ledger.to_json())
    assert again.to_json() == ledger.to_json()
    assert again.watched() == {MEM, SSE3}
    assert again.review(MEM, "cn1", OURS, NOVAS) is True
    again.keep_providers({"another"})
    assert again.to_json() == {"written": [], "yielded": []}
    assert FieldLedger.from_json({"written": [["x"]], "yielded": [{"kind": "?"}]}).to_json() == {
        "written": [],
        "yielded": [],
    }
