"""Fields the agent yields to another writer that disagrees (docs/service.md,
"When another writer disagrees").

A **field** is the smallest part of a provider two writers can disagree on
and the agent can leave alone while it writes the rest: one resource class's
inventory record (``PUT .../inventories`` replaces the whole set, so a
yielded class is sent with the other writer's record, never removed), one
trait (``PUT .../traits`` likewise: the other writer's choice is kept), one
aggregate. Its value is the inventory record as Placement's JSON (None: no
record of that class), or the presence of the trait or aggregate.

The rule, owned by :class:`FieldLedger`:

* every write of a field is recorded with the agent's value and whether it
  **overwrote another writer's value**: the value held before the write was
  neither the agent's own last write of that field nor on a provider nobody
  but the agent had written yet (one it created);
* when the agent wants a value V, Placement holds another, and the agent's
  last write of that field was V over another writer's value, that writer
  changed it back: the agent **yields** the field. It stops writing it (the
  tree it writes takes the held value), and says so once;
* the yield ends when the value the agent wants is no longer V (its
  configuration or the host changed: it writes the new value once) or when
  Placement holds V again (the other writer came round).

So a single change by another writer of a field the agent wrote is undone
once (as an out-of-band change always was); the second is that writer's
decision, and no field is written back and forth. Nova's resource tracker is
the writer in mind: it writes the compute node's inventories and traits at
every claim once its cache is refreshed (nova/compute/resource_tracker.py
``_update_to_placement``). A field the agent never decides (an operator's
trait on the compute node) is never written by it, so never recorded here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

INVENTORY = "inventory"
TRAIT = "trait"
AGGREGATE = "aggregate"
KINDS: tuple[str, ...] = (INVENTORY, TRAIT, AGGREGATE)
"""The kinds of field, as metrics and ``show`` name them."""

Value = dict[str, Any] | bool | None
"""An inventory record as Placement's JSON (None: no record), or a trait's or an aggregate's
presence."""


@dataclass(frozen=True, slots=True, order=True)
class FieldKey:
    """One field of one provider.

    Attributes:
        provider: the provider's UUID.
        kind: one of :data:`KINDS`.
        key: the resource class, trait name or aggregate UUID.
    """

    provider: str
    kind: str
    key: str

    def to_json(self) -> list[str]:
        """``[provider, kind, key]``."""
        return [self.provider, self.kind, self.key]


def show_value(kind: str, value: Value) -> str:
    """A field's value for a person: ``present``/``absent``, an inventory record, or ``none``."""
    if kind == INVENTORY:
        if value is None:
            return "none"
        assert isinstance(value, Mapping)
        return "{" + ", ".join(f"{k}: {v}" for k, v in sorted(value.items())) + "}"
    return "present" if value else "absent"


@dataclass(slots=True)
class Written:
    """The agent's last write of a field: its value, and whether it overwrote another writer's."""

    value: Value
    contested: bool


@dataclass(slots=True)
class Yielded:
    """A field the agent yields: what it wants and what the other writer holds there.

    Attributes:
        field: the field.
        name: the provider's name.
        agent: the value the agent wants (and wrote before).
        other: the value the other writer keeps (as last read).
    """

    field: FieldKey
    name: str
    agent: Value
    other: Value

    def describe(self) -> str:
        """One line: the provider, the field and both values."""
        f = self.field
        what = {
            INVENTORY: f"inventory of {f.key}",
            TRAIT: f"trait {f.key}",
            AGGREGATE: f"aggregate {f.key}",
        }[f.kind]
        return (
            f"provider {self.name} ({f.provider}) {what}: the agent wants "
            f"{show_value(f.kind, self.agent)}, another writer keeps "
            f"{show_value(f.kind, self.other)}"
        )

    def to_json(self) -> dict[str, Any]:
        """``{provider, provider_uuid, kind, key, agent, other}`` (``show``, the cycle's record)."""
        return {
            "provider": self.name,
            "provider_uuid": self.field.provider,
            "kind": self.field.kind,
            "key": self.field.key,
            "agent": self.agent,
            "other": self.other,
        }


class FieldLedger:
    """One node's record of the fields the agent wrote and of those it yields (module docstring).

    Not thread-safe: one node's flush uses it at a time (under the node's lock).

    Attributes:
        written: the agent's last write of each field it wrote.
        yielded: the fields yielded, by field.
        started: yields begun since the caller last took them (to log once).
        ended: ``(yield, why)`` of the yields ended since the caller last took them.
        dirty: changed since last saved.
    """

    def __init__(
        self,
        written: dict[FieldKey, Written] | None = None,
        yielded: dict[FieldKey, Yielded] | None = None,
    ) -> None:
        self.written = written or {}
        self.yielded = yielded or {}
        # The contested ones of written, kept apart: reviewed every flush, unlike the rest.
        self._contested = {k for k, w in self.written.items() if w.contested}
        self.started: list[Yielded] = []
        self.ended: list[tuple[Yielded, str]] = []
        self.dirty = False

    def review(self, key: FieldKey, name: str, wanted: Value, held: Value) -> bool:
        """Decide one field before a write: True when the agent keeps the ``held`` value.

        Args:
            key: the field.
            name: its provider's name (for the lines that say so).
            wanted: the value the agent's layout gives it.
            held: the value Placement holds (as last read).

        Returns:
            True: the field is yielded, write ``held`` (the other writer's
            value); False: write ``wanted`` (nothing when it is ``held``).
        """
        current = self.yielded.get(key)
        if current is not None:
            if wanted == current.agent and held != wanted:
                if held != current.other:
                    current.other = held
                    self.dirty = True
                return True
            del self.yielded[key]
            self.dirty = True
            why = (
                "Placement holds the agent's value again"
                if held == wanted
                else f"the agent now wants {show_value(key.kind, wanted)}: it writes it once"
            )
            self.ended.append((current, why))
        last = self.written.get(key)
        if wanted == held:
            if last is not None and last.value != wanted:
                # The agent came round to the held value: the fight is over, and a
                # later change of its mind writes once again.
                del self.written[key]
                self._contested.discard(key)
                self.dirty = True
            return False
        if last is not None and last.contested and last.value == wanted:
            started = Yielded(key, name, wanted, held)
            self.yielded[key] = started
            self.started.append(started)
            self.dirty = True
            return True
        return False

    def wrote(self, key: FieldKey, value: Value, held: Value, new_provider: bool) -> None:
        """Record the agent's write of ``value`` over ``held``.

        Args:
            new_provider: the provider was created by the agent and written by
                nobody else yet (its ``held`` values are nobody's).
        """
        last = self.written.get(key)
        own = last is not None and last.value == held
        contested = not (new_provider or own)
        self.written[key] = Written(value, contested)
        (self._contested.add if contested else self._contested.discard)(key)
        self.dirty = True

    def watched(self) -> set[FieldKey]:
        """The fields reviewed even when the layout and Placement agree: those yielded, and
        those the agent wrote over another writer's value (few)."""
        return set(self.yielded) | self._contested

    def keep_providers(self, providers: Iterable[str]) -> None:
        """Forget the fields of every provider not in ``providers`` (removed from the tree)."""
        keep = set(providers)
        for key in [k for k in self.written if k.provider not in keep]:
            del self.written[key]
            self._contested.discard(key)
            self.dirty = True
        for key in [k for k in self.yielded if k.provider not in keep]:
            del self.yielded[key]
            self.dirty = True

    def yields(self) -> list[Yielded]:
        """The fields yielded, sorted by field."""
        return [self.yielded[k] for k in sorted(self.yielded)]

    def to_json(self) -> dict[str, Any]:
        """The ledger as the state directory stores it."""
        return {
            "written": [
                [*k.to_json(), w.value, w.contested] for k, w in sorted(self.written.items())
            ],
            "yielded": [y.to_json() for y in self.yields()],
        }

    @classmethod
    def from_json(cls, doc: Any) -> FieldLedger:
        """The ledger stored by :meth:`to_json`; entries not shaped so are dropped."""
        if not isinstance(doc, Mapping):
            return cls()
        written: dict[FieldKey, Written] = {}
        for row in doc.get("written") or ():
            if isinstance(row, list) and len(row) == 5 and row[1] in KINDS:
                written[FieldKey(str(row[0]), row[1], str(row[2]))] = Written(row[3], bool(row[4]))
        yielded: dict[FieldKey, Yielded] = {}
        for y in doc.get("yielded") or ():
            if isinstance(y, Mapping) and y.get("kind") in KINDS:
                key = FieldKey(str(y.get("provider_uuid")), str(y["kind"]), str(y.get("key")))
                yielded[key] = Yielded(key, str(y.get("provider")), y.get("agent"), y.get("other"))
        return cls(written, yielded)
