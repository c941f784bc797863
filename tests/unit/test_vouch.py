"""The vouching rule: allocation writes explain a provider's generation move, or they do not.

Placement moves a provider's generation once per allocation write request
that leaves allocations on it, and once per inventory, trait or aggregate
write (placement's ``_set_allocations`` and ``resource_provider.py``); a
``DELETE /allocations/{consumer}`` moves nothing, a ``PUT`` of empty allocations moves
one (agent.placement.allocation_reads).
"""

from __future__ import annotations

from agent.model.allocations import ProviderAllocations
from agent.placement.allocation_reads import explains

A = {"VCPU": 2, "MEMORY_MB": 2048}
B = {"VCPU": 1, "MEMORY_MB": 512}


def pa(generation, consumers, generations=None):
    gens = generations if generations is not None else {c: 1 for c in consumers}
    return ProviderAllocations(generation, dict(consumers), dict(gens))


def test_a_claim_explains_one_move():
    old = pa(7, {"i1": A})
    assert explains(old, pa(8, {"i1": A, "new": B}))


def test_a_move_beyond_the_changed_consumers_is_not_explained():
    old = pa(7, {"i1": A})
    # a claim and something else (an inventory, trait or aggregate write)
    assert not explains(old, pa(9, {"i1": A, "new": B}))


def test_a_resized_consumer_counts_and_an_untouched_one_does_not():
    old = pa(7, {"i1": A, "i2": A}, {"i1": 1, "i2": 1})
    assert explains(old, pa(8, {"i1": B, "i2": A}, {"i1": 2, "i2": 1}))
    # rewritten with the same amounts: its write is not seen, so the move is not explained
    assert not explains(old, pa(8, {"i1": A, "i2": A}, {"i1": 2, "i2": 1}))


def test_deletes_move_nothing_and_a_consumer_made_and_deleted_is_not_explained():
    old = pa(7, {"i1": A, "i2": A})
    assert explains(old, pa(7, {"i1": A}))  # DELETE: no move to explain
    assert not explains(old, pa(8, {"i1": A, "i2": A}))  # a claim since deleted, or a trait


def test_a_consumer_emptied_by_a_put_explains_one_move_and_no_more():
    """nova's ``delete_allocation_for_instance`` without force PUTs empty allocations:
    Placement records allocations of 0 on the provider, moving its generation by one."""
    old = pa(7, {"i1": A, "i2": A})
    assert explains(old, pa(8, {"i1": A}))
    assert not explains(old, pa(9, {"i1": A}))  # the emptying and something else
    assert not explains(old, pa(8, {"i1": A}), own={"i2"})  # the agent's own: counted exactly


def test_what_cannot_be_compared_is_never_explained():
    old = pa(7, {"i1": A})
    assert not explains(pa(None, {"i1": A}), pa(8, {"i1": A, "n": B}))
    assert not explains(old, pa(None, {"i1": A, "n": B}))
    assert not explains(old, pa(6, {}))  # generations only grow: another provider
    # before microversion 1.28 the listing has no consumer generations
    assert not explains(old, pa(8, {"i1": A, "n": B}, {}))
