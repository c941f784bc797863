"""The audit's record changes only through its own methods (issue 33).

:class:`agent.audit.consumer_record.ConsumerRecord` owns every transition of
what the audit remembers, as openstack/placement's ``objects/consumer.py``
owns a consumer's; :class:`agent.audit.held.HeldAllocations` owns its copy
of what Placement holds. So no other module of ``agent`` assigns, deletes or
edits in place (``add``, ``pop``, ``[k] = v``, ``&=`` ...) a field of a
record: read by the AST, any name ending in ``record`` counts as a record.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

from agent.audit.consumer_record import ConsumerRecord

ROOT = Path(__file__).resolve().parents[2]
OWNERS = {
    "agent/audit/consumer_record.py",
    "agent/audit/record_claims.py",
    "agent/audit/record_gone.py",
    "agent/audit/held.py",
    "agent/audit/record_json.py",
}
FIELDS = {f.name for f in dataclasses.fields(ConsumerRecord)}
EDITS = {
    "add", "discard", "remove", "pop", "popitem", "clear", "update", "setdefault",
    "append", "extend", "insert", "difference_update", "intersection_update",
    "symmetric_difference_update", "__setitem__", "__delitem__",
}  # fmt: skip


def _is_record(node: ast.expr) -> bool:
    if isinstance(node, ast.Name):
        return node.id.endswith("record")
    return isinstance(node, ast.Attribute) and node.attr.endswith("record")


def _field_of_record(node: ast.expr) -> str | None:
    """``F`` when ``node`` is ``<record>.F`` or ``<record>.F[...]`` of a record field."""
    while isinstance(node, ast.Subscript):
        node = node.value
    if isinstance(node, ast.Attribute) and node.attr in FIELDS and _is_record(node.value):
        return node.attr
    return None


def edits(source: str) -> list[tuple[int, str]]:
    """``(line, field)`` for each edit of a record's field in ``source``."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign | ast.Delete):
            targets = list(node.targets)
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in EDITS
        ):
            targets = [node.func.value]
        for target in targets:
            field = _field_of_record(target)
            if field:
                found.append((node.lineno, field))
    return sorted(found)


def test_the_finder_sees_every_kind_of_edit():
    source = (
        "record.held[rp] = x\nview.record.shared.pop(c)\nrecord.wrote &= kept\n"
        "del record.claims[c]\nrecord.moving = set()\nrecord.statuses.clear()\n"
        "record.held.read_again(rps)\nx = record.gone\nother.held[rp] = x\n"
    )
    assert edits(source) == [
        (1, "held"), (2, "shared"), (3, "wrote"), (4, "claims"), (5, "moving"), (6, "statuses"),
    ]  # fmt: skip


def test_no_module_edits_the_records_fields_but_their_owners():
    found = []
    for path in sorted((ROOT / "agent").rglob("*.py")):
        name = path.relative_to(ROOT).as_posix()
        if name in OWNERS:
            continue
        found += [f"{name}:{line}: record.{field}" for line, field in edits(path.read_text())]
    assert not found, "edit through a ConsumerRecord method instead:\n" + "\n".join(found)
