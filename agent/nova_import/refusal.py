"""A nova row the import will not use: which row, which column, why, and the fix."""

from __future__ import annotations

from dataclasses import dataclass

from agent.model.exceptions import AgentError


class RowRefused(AgentError):
    """One row (or one consumer) cannot be imported; the rest of the import goes on.

    Args:
        table: nova's table, e.g. ``compute_nodes``, or ``placement`` for a
            conflict found in Placement.
        key: what names the row: ``id 3``, ``uuid ...``, a hostname.
        column: the column at fault (empty when the row as a whole is).
        reason: what is wrong.
        fix: what the operator can do about it.
    """

    def __init__(self, table: str, key: str, column: str, reason: str, fix: str) -> None:
        self.refusal = Refusal(table, key, column, reason, fix)
        super().__init__(self.refusal.line())


@dataclass(frozen=True, slots=True)
class Refusal:
    """What :class:`RowRefused` carries, kept for the summary."""

    table: str
    key: str
    column: str
    reason: str
    fix: str

    def line(self) -> str:
        """``compute_nodes id 3 column vcpus: -4 is negative; fix: ...`` (one line)."""
        where = f"{self.table} {self.key}" + (f" column {self.column}" if self.column else "")
        return f"{where}: {self.reason}; {self.fix}"


def whole_number(table: str, key: str, column: str, value: object, minimum: int = 0) -> int:
    """``value`` as an int of at least ``minimum``.

    Raises:
        RowRefused: NULL, not an integer, or below ``minimum``.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise RowRefused(
            table, key, column, f"{value!r} is not a whole number", "correct the row in nova"
        )
    if value < minimum:
        raise RowRefused(
            table, key, column, f"{value} is below {minimum}", "correct the row in nova"
        )
    return value
