"""Resource objects: inventory records, capacity and claims.

Spec: ``resource-objects.txt`` (the ``Inventory`` class with ``can_provide``
and ``consume``). Field limits follow the Placement API reference for
``PUT /resource_providers/{uuid}/inventories`` (openstack-placement 16.0.0,
``placement/schemas/inventory.py``): every integer field is at most
2147483647; ``total`` >= 1; ``reserved`` >= 0; ``min_unit``, ``max_unit`` and
``step_size`` >= 1; ``allocation_ratio`` <= 3.40282e+38; and from
microversion 1.26 capacity may be 0 (``reserved == total``) but not negative.

This agent is stricter than Placement in two places, because a record that
breaks them cannot be allocated from sensibly: ``min_unit <= max_unit`` and
``allocation_ratio > 0``. ``max_unit`` above ``total`` is accepted: it is
Placement's own default (2147483647) for providers other services create.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from agent.model.exceptions import CapacityExceeded, InvalidInventory

MAX_INT = 0x7FFFFFFF
"""Largest integer Placement stores in an inventory field (db MAX_INT)."""

MAX_RATIO = 3.40282e38
"""Largest allocation ratio Placement stores (single-precision float max)."""

PLACEMENT_FIELDS = ("total", "reserved", "min_unit", "max_unit", "step_size", "allocation_ratio")
"""Fields of one inventory record in Placement's JSON, in the API reference's order."""


def _check_int(name: str, value: object, minimum: int, rc: str) -> None:
    # bool is an int subclass; Placement's JSON schema refuses true/false.
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInventory(name, value, "must be an integer", rc)
    if value < minimum or value > MAX_INT:
        raise InvalidInventory(name, value, f"must be between {minimum} and {MAX_INT}", rc)


@dataclass(frozen=True, slots=True)
class Inventory:
    """One resource class's inventory on one resource provider.

    Immutable: providers' snapshots are shared between threads, so
    :meth:`consume` returns a new record instead of changing this one.

    Attributes:
        total: units the provider has (count, MiB or GiB by class).
        reserved: units kept back from consumers (e.g. ``reserved_host_memory_mb``).
        min_unit: smallest amount one allocation may take.
        max_unit: largest amount one allocation may take.
        step_size: an allocation must be a multiple of this.
        allocation_ratio: overcommit factor applied to ``total - reserved``.
        resource_class: the class name, used only to make errors specific;
            not compared and not sent.
        used: units allocated against this record, tracked by claims; not
            compared and not sent to Placement.

    Raises:
        InvalidInventory: on construction, naming the first field at fault.
    """

    total: int
    reserved: int = 0
    min_unit: int = 1
    max_unit: int | None = None
    step_size: int = 1
    allocation_ratio: float = 1.0
    resource_class: str = field(default="", compare=False, repr=False)
    used: int = field(default=0, compare=False)

    def __post_init__(self) -> None:
        rc = self.resource_class
        _check_int("total", self.total, 1, rc)
        if self.max_unit is None:
            object.__setattr__(self, "max_unit", self.total)
        _check_int("reserved", self.reserved, 0, rc)
        _check_int("min_unit", self.min_unit, 1, rc)
        _check_int("max_unit", self.max_unit, 1, rc)
        _check_int("step_size", self.step_size, 1, rc)
        ratio = self.allocation_ratio
        if isinstance(ratio, bool) or not isinstance(ratio, int | float):
            raise InvalidInventory("allocation_ratio", ratio, "must be a number", rc)
        if not math.isfinite(ratio) or ratio <= 0 or ratio > MAX_RATIO:
            raise InvalidInventory(
                "allocation_ratio", ratio, f"must be greater than 0 and at most {MAX_RATIO}", rc
            )
        object.__setattr__(self, "allocation_ratio", float(ratio))
        if self.reserved > self.total:
            raise InvalidInventory(
                "reserved", self.reserved, f"must not exceed total ({self.total})", rc
            )
        assert self.max_unit is not None  # set above; narrows the type
        if self.min_unit > self.max_unit:
            raise InvalidInventory(
                "min_unit", self.min_unit, f"must not exceed max_unit ({self.max_unit})", rc
            )
        _check_int("used", self.used, 0, rc)

    @property
    def capacity(self) -> int:
        """Units that may be allocated: ``int((total - reserved) * allocation_ratio)``.

        The same float arithmetic as Placement's ``Inventory.capacity``, so
        both sides agree on the last unit.
        """
        return int((self.total - self.reserved) * self.allocation_ratio)

    @property
    def free(self) -> int:
        """``capacity - used``; may be negative after a ratio or total was lowered."""
        return self.capacity - self.used

    def check(self, amount: int, used: int | None = None) -> None:
        """Raise :class:`CapacityExceeded` unless one allocation of ``amount`` fits.

        Args:
            amount: units one consumer asks for.
            used: units already allocated; defaults to ``self.used``.

        Raises:
            CapacityExceeded: ``amount`` breaks min_unit, max_unit or
                step_size, or ``used + amount`` exceeds capacity (Placement's
                own checks when it writes an allocation).
            InvalidInventory: ``amount`` or ``used`` is not a non-negative integer.
        """
        used = self.used if used is None else used
        rc = self.resource_class
        if isinstance(amount, bool) or not isinstance(amount, int) or amount < 0:
            raise InvalidInventory("amount", amount, "must be a non-negative integer", rc)
        if isinstance(used, bool) or not isinstance(used, int) or used < 0:
            raise InvalidInventory("used", used, "must be a non-negative integer", rc)
        if amount < self.min_unit:
            raise CapacityExceeded(
                rc, amount, used, self.capacity, f"below min_unit {self.min_unit}"
            )
        assert self.max_unit is not None
        if amount > self.max_unit:
            raise CapacityExceeded(
                rc, amount, used, self.capacity, f"above max_unit {self.max_unit}"
            )
        if amount % self.step_size:
            raise CapacityExceeded(
                rc, amount, used, self.capacity, f"not a multiple of step_size {self.step_size}"
            )
        if used + amount > self.capacity:
            raise CapacityExceeded(rc, amount, used, self.capacity, "not enough free capacity")

    def can_provide(self, amount: int, used: int | None = None) -> bool:
        """True when one allocation of ``amount`` fits (spec: ``can_provide``).

        Args:
            amount: units one consumer asks for.
            used: units already allocated; defaults to ``self.used``.

        Raises:
            InvalidInventory: ``amount`` or ``used`` is not a non-negative integer.
        """
        try:
            self.check(amount, used)
        except CapacityExceeded:
            return False
        return True

    def consume(self, amount: int) -> Inventory:
        """Return a copy with ``amount`` added to ``used`` (spec: ``consume``).

        A positive amount is a claim and must pass :meth:`check`; a negative
        amount gives units back and must not take ``used`` below zero.

        Raises:
            CapacityExceeded: the claim does not fit, or more is given back
                than is used.
            InvalidInventory: ``amount`` is not an integer.
        """
        if isinstance(amount, bool) or not isinstance(amount, int):
            raise InvalidInventory("amount", amount, "must be an integer", self.resource_class)
        if amount >= 0:
            if amount:
                self.check(amount)
        elif self.used + amount < 0:
            raise CapacityExceeded(
                self.resource_class,
                amount,
                self.used,
                self.capacity,
                "gives back more than is used",
            )
        return replace(self, used=self.used + amount)

    def to_placement(self) -> dict[str, int | float]:
        """The record as Placement's JSON wants it (one value of ``inventories``)."""
        return {name: getattr(self, name) for name in PLACEMENT_FIELDS}

    @classmethod
    def from_placement(cls, record: Mapping[str, Any], resource_class: str = "") -> Inventory:
        """Build from one inventory record of Placement's JSON (or the same dict shape).

        Keys other than :data:`PLACEMENT_FIELDS` (e.g. ``capacity`` shown by
        ``discover``) are ignored; ``total`` is required.

        Raises:
            InvalidInventory: a field is missing or out of range.
        """
        if "total" not in record:
            raise InvalidInventory("total", None, "is required", resource_class)
        kwargs = {k: record[k] for k in PLACEMENT_FIELDS if k in record}
        return cls(resource_class=resource_class, **kwargs)


InventoryDict = dict[str, Inventory]
"""Inventories of one provider, keyed by resource class."""


def to_inventories(records: Mapping[str, Inventory | Mapping[str, Any]]) -> InventoryDict:
    """Turn a mapping of resource class to record (``Inventory`` or dict) into Inventories.

    Raises:
        InvalidInventory: a record is out of range (the class is named).
    """
    out: InventoryDict = {}
    for rc, rec in records.items():
        if isinstance(rec, Inventory):
            out[rc] = rec if rec.resource_class == rc else replace(rec, resource_class=rc)
        else:
            out[rc] = Inventory.from_placement(rec, rc)
    return out


def inventory_body(inventories: Mapping[str, Inventory]) -> dict[str, dict[str, int | float]]:
    """``{rc: record}`` as ``PUT .../inventories`` and ``POST /reshaper`` carry it.

    The one place an inventory set is turned into Placement's JSON (Placement
    API reference, "Update resource provider inventories").
    """
    return {rc: inv.to_placement() for rc, inv in sorted(inventories.items())}


__all__ = [
    "MAX_INT",
    "MAX_RATIO",
    "PLACEMENT_FIELDS",
    "Inventory",
    "InventoryDict",
    "inventory_body",
    "to_inventories",
]
