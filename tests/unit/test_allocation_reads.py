"""One node's allocation reads of one cycle: the vouch and the audit share them (issue 33).

A fake Placement (two dicts) counts the reads: a moved device provider is known from its
changed consumers' reads when they explain its move, and read otherwise; nothing is read
twice (agent.placement.allocation_reads).
"""

from __future__ import annotations

from agent.model.allocations import ConsumerAllocations, ProviderAllocations
from agent.model.provider_tree import ProviderTree
from agent.placement.allocation_reads import AllocationReads, Known, explains
from agent.placement.pool import Pool

CPU = {"VCPU": 1, "MEMORY_MB": 512}
VF = {"SRIOV_NET_VF": 1}


def tree() -> ProviderTree:
    t = ProviderTree()
    t.new_root("cn", "00000000-0000-0000-0000-000000000001", 10)
    t.update_inventory("cn", {"VCPU": {"total": 8}, "MEMORY_MB": {"total": 4096}})
    for name, n in (("pf1", 2), ("pf2", 3)):
        t.new_child(name, "cn", f"00000000-0000-0000-0000-00000000000{n}")
        t.update_inventory(name, {"SRIOV_NET_VF": {"total": 8}})
    return t


CN, PF1, PF2 = (f"00000000-0000-0000-0000-00000000000{n}" for n in (1, 2, 3))


class FakePlacement:
    def __init__(self) -> None:
        self.providers: dict[str, ProviderAllocations] = {}
        self.consumers: dict[str, ConsumerAllocations] = {}
        self.reads: list[str] = []

    def provider(self, rp: str) -> ProviderAllocations:
        self.reads.append(rp)
        return self.providers[rp]

    def consumer(self, uuid: str) -> ConsumerAllocations:
        self.reads.append(uuid)
        return self.consumers[uuid]


def reads(placement: FakePlacement, known: Known) -> AllocationReads:
    return AllocationReads(placement.provider, placement.consumer, Pool(1), lambda: known)


def held() -> dict[str, ProviderAllocations]:
    return {
        CN: ProviderAllocations(10, {"a": CPU}, {"a": 1}),
        PF1: ProviderAllocations(5, {"a": VF}, {"a": 1}),
        PF2: ProviderAllocations(7, {}, {}),
    }


def claimed(placement: FakePlacement, consumer: str, pf: str) -> None:
    """nova's claim: ``consumer`` on the compute node and on ``pf`` (one request)."""
    placement.consumers[consumer] = ConsumerAllocations({CN: CPU, pf: VF}, generation=1)


def test_a_claim_is_known_from_its_consumer_without_reading_its_pf():
    placement = FakePlacement()
    placement.providers[CN] = ProviderAllocations(11, {"a": CPU, "b": CPU}, {"a": 1, "b": 1})
    claimed(placement, "b", PF2)
    r = reads(placement, Known(held()))
    answers = r({CN: (10, 11), PF2: (7, 8)}, tree())
    assert answers == {CN: 11, PF2: 8}
    assert placement.reads == [CN, "b"]  # not PF2
    assert r.provider(PF2, 8) == (ProviderAllocations(8, {"b": VF}, {"b": 1}), False)
    assert r.of_consumers(["b"]) == {"b": placement.consumers["b"]}
    assert r.provider(CN, 11)[1] is False
    assert placement.reads == [CN, "b"]  # the audit's reads cost nothing more
    assert r.requests == 2


def test_a_move_the_consumers_do_not_explain_reads_the_pf():
    placement = FakePlacement()
    placement.providers[CN] = ProviderAllocations(11, {"a": CPU, "b": CPU}, {"a": 1, "b": 1})
    claimed(placement, "b", PF2)
    # someone else put "x" on PF2 alone: two moves there, one consumer the compute node names
    placement.providers[PF2] = ProviderAllocations(9, {"b": VF, "x": VF}, {"b": 1, "x": 1})
    r = reads(placement, Known(held()))
    assert r({CN: (10, 11), PF2: (7, 9)}, tree()) == {CN: 11, PF2: 9}
    assert placement.reads == [CN, "b", PF2]


def test_a_write_of_the_agents_own_explains_nothing():
    placement = FakePlacement()
    placement.providers[CN] = ProviderAllocations(11, {"a": CPU, "b": CPU}, {"a": 1, "b": 1})
    claimed(placement, "b", PF2)
    placement.providers[PF2] = ProviderAllocations(8, {"b": VF}, {"b": 1})
    r = reads(placement, Known(held(), own=frozenset({"b"})))
    assert r({CN: (10, 11), PF2: (7, 8)}, tree()) == {CN: None, PF2: None}
    assert placement.reads == [CN, "b", PF2]


def test_a_provider_the_record_knows_at_another_generation_is_not_asked_about():
    placement = FakePlacement()
    r = reads(placement, Known(held()))
    assert r({PF1: (4, 6)}, tree()) == {PF1: None}
    assert placement.reads == []


def test_created_providers_hold_nothing_and_cost_no_read():
    placement = FakePlacement()
    r = reads(placement, Known({}))
    assert r.created([PF1], {PF1: 0}) == {PF1: ProviderAllocations(0, {})}
    assert r.provider(PF1, 0) == (ProviderAllocations(0, {}), False)
    assert placement.reads == []


def test_with_parts_replaces_each_changed_consumers_part():
    before = ProviderAllocations(5, {"a": VF, "b": VF}, {"a": 1, "b": 1})
    now = {"a": {CN: CPU}, "c": {PF1: VF}}
    derived = before.with_parts(PF1, now, 7, {"a": 2, "c": 1})
    assert derived == ProviderAllocations(7, {"b": VF, "c": VF})
    assert derived.consumer_generations == {"b": 1, "c": 1}


def test_a_move_of_one_consumer_to_another_is_one_request():
    """Issue 39, case 9: nova's move_allocations empties the instance and places the
    migration record with its amounts in one POST (one generation move): with an operator's
    write in the same interval (two moves), the pair explains one, so the details are read."""
    old = ProviderAllocations(5, {"inst": CPU}, {"inst": 1})
    moved = ProviderAllocations(6, {"mig": CPU}, {"mig": 1})
    assert explains(old, moved)
    assert not explains(old, ProviderAllocations(7, {"mig": CPU}, {"mig": 1}))
