"""The audit's decision as a value: each rule of docs/service.md's state table, without
Placement (issue 33: "the audit's decision is a value ... which tests can assert").

A node with a compute node ``CN`` and a device provider ``PF`` owned by the
agent, and a pool ``POOL`` outside its tree. The record is what the last audit
left; :func:`decide` must answer from it alone and change nothing.
"""

from __future__ import annotations

import pytest

from agent.audit import record_json
from agent.audit.absence import Absence, Absences
from agent.audit.audit_decision import Alone, Listing, decide, migration_records
from agent.audit.audit_view import AuditView
from agent.audit.authorship import Authorship
from agent.audit.consumer_record import ConsumerRecord
from agent.audit.held import HeldAllocations
from agent.model.allocations import UNKNOWN, ConsumerAllocations, ProviderAllocations

CN, PF, POOL, OTHER_CN = "cn", "pf", "pool", "other-cn"
OWNER = ("project", "user")
PLAN = {CN: {"VCPU": 2, "MEMORY_MB": 512}}


def plan(allocations=None) -> ConsumerAllocations:
    return ConsumerAllocations(dict(PLAN if allocations is None else allocations), *OWNER)


def view(
    held: dict[str, dict], record: ConsumerRecord | None = None, produces=None, gens=None
) -> AuditView:
    """A view whose record holds ``held`` (``{consumer: {provider: amounts}}``) on CN and PF,
    stored as the last audit left it; ``gens``: ``{consumer: consumer generation}`` read."""
    record = record or ConsumerRecord()
    per_rp: dict[str, dict] = {CN: {}, PF: {}}
    for consumer, parts in held.items():
        for rp, amounts in parts.items():
            per_rp.setdefault(rp, {})[consumer] = amounts
    gens = gens or {}
    record.held = HeldAllocations(
        {
            rp: ProviderAllocations(1, c, {k: gens[k] for k in c if k in gens})
            for rp, c in per_rp.items()
        }
    )
    stored = record_json.dump(record)
    v = AuditView("node", record, {CN, PF}, stored, frozenset({CN, PF}))
    v.produces = produces
    return v


def listing(expected: dict[str, ConsumerAllocations], **kw) -> Listing:
    return Listing(expected, frozenset(kw.pop("present", expected)), **kw)


def test_a_listed_instance_holding_nothing_is_written_in_bulk():
    decision = decide(view({}), listing({"a": plan()}), {})
    assert decision.bulk == {"a": plan()}
    assert not decision.alone and not decision.moving


def test_an_instance_holding_its_plan_is_in_step_and_one_using_nothing_too():
    decision = decide(view({"a": PLAN}), listing({"a": plan(), "b": plan({})}), {})
    assert decision.in_step == {"a"}
    assert decision.uses_nothing == {"b"}
    assert not decision.bulk


@pytest.mark.parametrize(
    ("rewrite", "drift", "alone"), [(False, True, {}), (True, False, {"a": Alone.REWRITE})]
)
def test_a_differing_allocation_is_drift_rewritten_only_when_asked(rewrite, drift, alone):
    decision = decide(
        view({"a": {CN: {"VCPU": 4, "MEMORY_MB": 512}}}), listing({"a": plan()}), {}, rewrite
    )
    assert bool(decision.drift) is drift
    assert decision.alone == alone
    if drift:
        assert "VCPU=4" in decision.drift["a"] and "VCPU=2" in decision.drift["a"]


def test_a_part_of_the_plan_held_nowhere_is_added_alone():
    want = plan({**PLAN, PF: {"SRIOV_NET_VF": 1}})
    decision = decide(view({"a": PLAN}), listing({"a": want}), {})
    assert decision.alone == {"a": Alone.ADD}
    assert not decision.drift


def test_a_class_the_planner_does_not_produce_is_kept_as_held_not_drift():
    held = {CN: {**PLAN[CN], "CUSTOM_LICENCE": 1}}
    decision = decide(view({"a": held}, produces=frozenset(PLAN[CN])), listing({"a": plan()}), {})
    assert decision.in_step == {"a"}


def test_gone_the_agents_own_is_removed_another_writers_waits_for_the_grace():
    """Issue 39: the agent's own write goes at once while it is at the generation its write
    produced; another writer's once absent past the grace over two periodic audits."""
    absent = Absences(
        {
            "novas-past": Absence(since=0.0, audits=2),
            "novas-once": Absence(since=0.0, audits=1),
            "novas-young": Absence(since=950.0, audits=5),
        }
    )
    gone = {"mine", "mine-rewritten", "novas-past", "novas-once", "novas-young", "empty"}
    record = ConsumerRecord(
        gone=gone, wrote=Authorship({"mine": 1, "mine-rewritten": 1}), absent=absent
    )
    holding = dict.fromkeys(gone - {"empty"}, PLAN)
    v = view(holding, record, gens={"mine": 1, "mine-rewritten": 2})
    decision = decide(v, listing({}), {}, now=1000.0, grace=100)
    assert decision.remove == ("mine", "novas-past")
    assert decision.deferred == ("mine-rewritten", "novas-once", "novas-young")
    assert decision.confirmed == ("empty",)


def test_an_event_decides_within_its_scope_only():
    """An event's instances: nothing outside the scope is decided (gone, unknown, drift)."""
    record = ConsumerRecord(gone={"g"}, wrote=Authorship({"g": 1}), unknown={"u": 0.0})
    v = view({"g": PLAN, "u": PLAN, "b": {CN: {"VCPU": 9}}}, record, gens={"g": 1})
    scoped = Listing({"a": plan()}, frozenset({"a", "b"}), scope=frozenset({"a"}))
    decision = decide(v, scoped, {}, remove_unknown_after=10, now=1000.0)
    assert decision.bulk == {"a": plan()}
    assert not decision.remove and not decision.drift and not decision.unknown_due


def test_unknown_consumers_past_the_grace_are_due_migration_records_never():
    record = ConsumerRecord(unknown={"old": 0.0, "new": 950.0, "mig": 0.0}, migrations={"mig"})
    v = view({"old": PLAN, "new": PLAN, "mig": PLAN}, record)
    decision = decide(v, listing({}), {}, remove_unknown_after=100, now=1000.0)
    assert decision.unknown_due == ("old",)
    assert decision.left_alone == ("mig", "new")
    assert decide(v, listing({}), {}, remove_unknown_after=0, now=1000.0).unknown_due == ()


def test_novas_migration_record_holding_the_share_makes_the_instance_moving():
    """The conductor's window: the instance holds nothing, a consumer without type of its
    project and user holds exactly its share here (nova's ``replace_allocation_with_migration``)."""
    v = view({"mig": PLAN})
    assert migration_records(v, listing({"a": plan()})) == {"mig", "a"}
    nova = {"mig": ConsumerAllocations({CN: PLAN[CN]}, *OWNER, consumer_type=UNKNOWN)}
    decision = decide(v, listing({"a": plan()}), nova)
    assert "nova's migration record" in decision.moving["a"]
    assert not decision.bulk
    strangers = {"mig": ConsumerAllocations({CN: PLAN[CN]}, "other", "user", consumer_type=UNKNOWN)}
    assert decide(v, listing({"a": plan()}), strangers).bulk == {"a": plan()}


def test_a_new_instances_claim_of_the_same_amounts_is_no_record():
    """A typed claim sorting before nova's record must not take it (one record, one instance)."""
    v = view({"claim": PLAN, "mig": PLAN})
    read = {
        "claim": ConsumerAllocations({CN: PLAN[CN]}, *OWNER),  # typed INSTANCE
        "mig": ConsumerAllocations({CN: PLAN[CN]}, *OWNER, consumer_type=UNKNOWN),
    }
    assert migration_records(v, listing({"a": plan()})) == {"claim", "mig", "a"}
    assert "consumer mig" in decide(v, listing({"a": plan()}), read).moving["a"]


def test_a_record_holding_an_unplanned_class_too_still_explains_the_instance():
    """Issue 33 case 3: booted with a licence and moved before the host's first audit."""
    held = {CN: {**PLAN[CN], "CUSTOM_LICENCE": 1}}
    v = view({"mig": held}, produces=frozenset(PLAN[CN]))
    nova = {"mig": ConsumerAllocations(held, *OWNER, consumer_type=UNKNOWN)}
    assert decide(v, listing({"a": plan()}), nova).moving.keys() == {"a"}


def test_last_seen_moving_is_read_and_decided_by_what_it_holds():
    v = view({}, ConsumerRecord(moving={"a"}))
    assert migration_records(v, listing({"a": plan()})) == {"a"}
    elsewhere = {"a": ConsumerAllocations({OTHER_CN: PLAN[CN]}, *OWNER, generation=3)}
    assert "outside this node" in decide(v, listing({"a": plan()}), elsewhere).moving["a"]
    nowhere = {"a": ConsumerAllocations({}, *OWNER, generation=4)}
    decision = decide(v, listing({"a": plan()}), nowhere)
    assert decision.alone == {"a": Alone.HEAL}
    assert not decision.bulk and not decision.moving


def test_one_record_goes_to_the_instance_holding_a_destination_claim():
    """Issue 39, case 8: C resizing away (its claim on another compute node) and D, deleted
    by an operator, both match the record here; C takes it, D is healed."""
    v = view({"mig": PLAN})
    reads = {
        "mig": ConsumerAllocations({CN: PLAN[CN]}, *OWNER, consumer_type=UNKNOWN, generation=1),
        "c": ConsumerAllocations({OTHER_CN: {"VCPU": 4, "MEMORY_MB": 1024}}, *OWNER, generation=3),
        "d": ConsumerAllocations({}, *OWNER),
    }
    both = listing({"c": plan(), "d": plan()})
    assert migration_records(v, both) == {"mig", "c", "d"}
    decision = decide(v, both, reads)
    assert decision.moving.keys() == {"c"}
    assert decision.bulk == {"d": plan()}


def test_deciding_changes_nothing():
    record = ConsumerRecord(gone={"g"}, unknown={"u": 0.0}, moving={"m"})
    v = view({"g": PLAN, "u": PLAN, "a": {CN: {"VCPU": 9}}}, record)
    before = record_json.dump(record)
    decide(v, listing({"a": plan(), "m": plan()}), {}, True, 10, 1000.0)
    assert record_json.dump(record) == before
