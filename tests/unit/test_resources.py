"""Inventory rules (resource-objects spec; limits of the Placement API reference)."""

from __future__ import annotations

import math

import pytest

from agent.model.exceptions import CapacityExceeded, InvalidInventory
from agent.model.resources import MAX_INT, MAX_RATIO, Inventory, to_inventories

ACCEPTED = [
    {"total": 1},
    {"total": MAX_INT, "reserved": MAX_INT, "max_unit": MAX_INT, "step_size": MAX_INT},
    {"total": 10, "reserved": 10},  # capacity 0 is legal from microversion 1.26
    {"total": 10, "min_unit": 10, "max_unit": 10},
    {"total": 10, "allocation_ratio": MAX_RATIO},
    {"total": 10, "allocation_ratio": 0.0001},
    {"total": 10, "allocation_ratio": 16},
]

REFUSED = [
    ({"total": 0}, "total"),
    ({"total": -1}, "total"),
    ({"total": MAX_INT + 1}, "total"),
    ({"total": "8"}, "total"),
    ({"total": 1.5}, "total"),
    ({"total": True}, "total"),
    ({"total": 8, "reserved": -1}, "reserved"),
    ({"total": 8, "reserved": 9}, "reserved"),
    ({"total": 8, "min_unit": 0}, "min_unit"),
    ({"total": 8, "max_unit": 0}, "max_unit"),
    ({"total": 8, "min_unit": 4, "max_unit": 2}, "min_unit"),
    ({"total": 8, "step_size": 0}, "step_size"),
    ({"total": 8, "step_size": MAX_INT + 1}, "step_size"),
    ({"total": 8, "allocation_ratio": 0}, "allocation_ratio"),
    ({"total": 8, "allocation_ratio": -1.0}, "allocation_ratio"),
    ({"total": 8, "allocation_ratio": math.inf}, "allocation_ratio"),
    ({"total": 8, "allocation_ratio": math.nan}, "allocation_ratio"),
    ({"total": 8, "allocation_ratio": MAX_RATIO * 10}, "allocation_ratio"),
    ({"total": 8, "allocation_ratio": "1.0"}, "allocation_ratio"),
]


@pytest.mark.parametrize("fields", ACCEPTED)
def test_accepted_values(fields):
    inv = Inventory(**fields)
    assert inv.to_placement()["total"] == fields["total"]


@pytest.mark.parametrize(("fields", "field"), REFUSED)
def test_refused_values_name_the_field(fields, field):
    with pytest.raises(InvalidInventory) as err:
        Inventory(resource_class="VCPU", **fields)
    assert err.value.field == field
    assert f"{field}=" in str(err.value)
    assert "VCPU" in str(err.value)


def test_max_unit_above_total_is_placements_default_and_accepted():
    inv = Inventory.from_placement({"total": 8, "max_unit": MAX_INT})
    assert inv.max_unit == MAX_INT
    assert not inv.can_provide(9)  # capacity still bounds one allocation


def test_max_unit_defaults_to_total():
    assert Inventory(total=12).max_unit == 12


@pytest.mark.parametrize(
    ("total", "reserved", "ratio", "capacity"),
    [(10, 2, 1.5, 12), (3, 0, 0.33, 0), (64, 4, 16.0, 960), (8, 8, 4.0, 0), (7, 0, 1.1, 7)],
)
def test_capacity_is_total_less_reserved_times_ratio(total, reserved, ratio, capacity):
    inv = Inventory(total=total, reserved=reserved, allocation_ratio=ratio)
    assert inv.capacity == capacity == int((total - reserved) * ratio)


def test_can_provide_honours_units_step_and_capacity():
    inv = Inventory(total=16, reserved=4, min_unit=2, max_unit=8, step_size=2)
    assert inv.can_provide(2)
    assert inv.can_provide(8)
    assert not inv.can_provide(1)  # below min_unit
    assert not inv.can_provide(10)  # above max_unit
    assert not inv.can_provide(3)  # not a step
    assert inv.can_provide(4, used=8)  # 8 + 4 == capacity 12
    assert not inv.can_provide(6, used=8)  # 14 > 12


def test_can_provide_refuses_bad_amounts():
    inv = Inventory(total=4)
    with pytest.raises(InvalidInventory):
        inv.can_provide(-1)
    with pytest.raises(InvalidInventory):
        inv.can_provide(1, used=-2)


def test_consume_adds_and_gives_back():
    inv = Inventory(total=8, allocation_ratio=2.0, resource_class="VCPU")
    inv = inv.consume(6).consume(6)
    assert inv.used == 12
    assert inv.free == 4
    assert inv.consume(-12).used == 0


def test_consume_beyond_capacity_names_the_numbers():
    inv = Inventory(total=4, resource_class="MEMORY_MB").consume(3)
    with pytest.raises(CapacityExceeded) as err:
        inv.consume(2)
    e = err.value
    assert (e.resource_class, e.requested, e.used, e.capacity) == ("MEMORY_MB", 2, 3, 4)
    assert "MEMORY_MB" in str(e) and "used 3" in str(e) and "capacity 4" in str(e)
    assert inv.used == 3  # the record did not change


def test_consume_cannot_give_back_more_than_used():
    with pytest.raises(CapacityExceeded):
        Inventory(total=4).consume(1).consume(-2)


def test_used_and_class_do_not_count_in_equality():
    assert Inventory(total=4, resource_class="A") == Inventory(total=4).consume(2)
    assert Inventory(total=4) != Inventory(total=4, reserved=1)


def test_placement_round_trip():
    inv = Inventory(
        total=100, reserved=5, min_unit=1, max_unit=50, step_size=5, allocation_ratio=1.5
    )
    doc = inv.to_placement()
    assert doc == {
        "total": 100,
        "reserved": 5,
        "min_unit": 1,
        "max_unit": 50,
        "step_size": 5,
        "allocation_ratio": 1.5,
    }
    assert Inventory.from_placement({**doc, "capacity": 142}) == inv


def test_from_placement_needs_total():
    with pytest.raises(InvalidInventory) as err:
        Inventory.from_placement({"reserved": 1}, "DISK_GB")
    assert err.value.field == "total"


def test_to_inventories_accepts_records_and_dicts():
    invs = to_inventories({"VCPU": {"total": 4}, "PCPU": Inventory(total=2)})
    assert invs["VCPU"].resource_class == "VCPU"
    assert invs["PCPU"].resource_class == "PCPU"
    with pytest.raises(InvalidInventory) as err:
        to_inventories({"DISK_GB": {"total": 0}})
    assert "DISK_GB" in str(err.value)
