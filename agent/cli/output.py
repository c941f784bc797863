"""What commands print: rich on a terminal, plain unwrapped lines in a pipe.

A pipe or a file gets one line per item, no colour, no box-drawing and no
wrapping, so ``grep``, ``awk`` and ``diff`` see whole lines; only a terminal
gets rich's colours and tree guides.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any, TextIO

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

__all__ = ["Output", "escape"]

INDENT = "  "
"""Indentation of one tree level in plain output."""


def _plain(label: object) -> str:
    if isinstance(label, Text):
        return label.plain
    return Text.from_markup(str(label)).plain


class Output:
    """A command's standard output.

    Args:
        stream: where to write; ``sys.stdout`` by default.
        terminal: force rich (True) or plain (False) output; by default rich
            exactly when ``stream`` is a terminal.
    """

    def __init__(self, stream: TextIO | None = None, terminal: bool | None = None) -> None:
        self.stream = stream or sys.stdout
        self.terminal = self.stream.isatty() if terminal is None else terminal
        self._console = Console(file=self.stream) if self.terminal else None

    def print(self, markup: str) -> None:
        """One line of rich markup (``[bold]...[/bold]``); plain text outside a terminal.

        Text from elsewhere (Placement's messages) must be passed through
        :func:`escape` first, or its brackets are read as markup.
        """
        if self._console is not None:
            self._console.print(markup)
        else:
            self.stream.write(_plain(markup) + "\n")

    def tree(self, tree: Tree) -> None:
        """A rich tree: guides on a terminal, two spaces per level otherwise."""
        if self._console is not None:
            self._console.print(tree)
            return
        stack: list[tuple[Tree, int]] = [(tree, 0)]
        while stack:
            node, depth = stack.pop()
            self.stream.write(INDENT * depth + _plain(node.label) + "\n")
            stack.extend((child, depth + 1) for child in reversed(node.children))

    def table(self, title: str, headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
        """Rows under headers: a rich table on a terminal; tab-separated lines otherwise.

        Plain output has the headers as its first line and no title, so
        ``cut -f`` and ``awk -F'\\t'`` work on it; cells hold no tab or newline.
        """
        if self._console is not None:
            table = Table(*headers, title=title, show_lines=False)
            for row in rows:
                table.add_row(*(escape(cell) for cell in row))
            self._console.print(table)
            return
        for row in (headers, *rows):
            cells = (" ".join(str(c).split()) for c in row)
            self.stream.write("\t".join(cells) + "\n")

    def json(self, document: Any) -> None:
        """``document`` as indented JSON (keys in the order given), then a newline."""
        json.dump(document, self.stream, indent=2)
        self.stream.write("\n")
