"""Write the corpus's golden files, showing what changes: ``python -m tests.corpus.regen``.

Usage::

    python -m tests.corpus.regen                 # every host
    python -m tests.corpus.regen NAME...         # those hosts
    python -m tests.corpus.regen --check         # only show the diff, write nothing
    python -m tests.corpus.regen --add DIR NAME  # copy a capture (compute-agent capture DIR)
                                                 # into captures/NAME, write its golden file
    python -m tests.corpus.regen --readme        # rewrite the provenance table in README.md

Each changed golden file is printed as a unified diff before it is written;
review it against the hardware the host describes before committing.
Exit status: 0 nothing changed (or written), 1 ``--check`` found a difference,
2 bad arguments.
"""

from __future__ import annotations

import argparse
import difflib
import shutil
import sys
import tempfile
from pathlib import Path

from tests.corpus.build import CAPTURES, CORPUS, EXPECTED, load_hosts
from tests.corpus.golden import dumps, observe

README = CORPUS / "README.md"
TABLE_START = "<!-- provenance table: python -m tests.corpus.regen --readme -->"
TABLE_END = "<!-- end of provenance table -->"


def provenance_table() -> str:
    """The README's table: one row per host with its source (project, path, commit, licence)."""
    rows = [
        "| host | kind | what it is | project | path | commit | licence |",
        "|---|---|---|---|---|---|---|",
    ]
    for host in load_hosts():
        source = host.data.get("source") or {}
        # "<memory>" in a summary would be read as HTML by Markdown.
        summary = " ".join(str(host.data.get("summary", "")).split()).replace("<", "&lt;")
        path = " ".join(str(source.get("path", "")).split())
        rows.append(
            f"| {host.name} | {host.kind} | {summary} | {source.get('project', 'capture')} "
            f"| {path} | {str(source.get('commit', ''))[:12]} | {source.get('licence', '')} |"
        )
    return "\n".join(rows)


def with_table(text: str) -> str:
    """``text`` with the part between the table markers replaced by :func:`provenance_table`.

    Raises:
        ValueError: the markers are missing.
    """
    head, start, rest = text.partition(TABLE_START)
    _, end, tail = rest.partition(TABLE_END)
    if not start or not end:
        raise ValueError(f"{README}: table markers missing")
    return f"{head}{start}\n{provenance_table()}\n{end}{tail}"


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status (module docstring)."""
    parser = argparse.ArgumentParser(prog="python -m tests.corpus.regen", description=__doc__)
    parser.add_argument("names", nargs="*", metavar="NAME", help="hosts to regenerate")
    parser.add_argument("--check", action="store_true", help="show differences, write nothing")
    parser.add_argument("--add", nargs=2, metavar=("DIR", "NAME"), help="add a capture")
    parser.add_argument("--readme", action="store_true", help="rewrite README.md's table")
    args = parser.parse_args(argv)
    if args.readme:
        README.write_text(with_table(README.read_text(encoding="utf-8")), encoding="utf-8")
        return 0
    if args.add:
        source, name = Path(args.add[0]), args.add[1]
        if not (source / "sys").is_dir() or not (source / "proc").is_dir():
            print(f"{source}: not a capture (no sys/ and proc/)", file=sys.stderr)
            return 2
        if (CAPTURES / name).exists():
            print(f"{CAPTURES / name} exists; choose another NAME", file=sys.stderr)
            return 2
        shutil.copytree(source, CAPTURES / name, symlinks=True)
        args.names = [name]
    hosts = load_hosts()
    unknown = set(args.names) - {h.name for h in hosts}
    if unknown:
        print(f"unknown corpus hosts: {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    changed = 0
    EXPECTED.mkdir(exist_ok=True)
    for host in hosts:
        if args.names and host.name not in args.names:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            new = dumps(observe(host, Path(tmp)))
        old = host.expected.read_text(encoding="utf-8") if host.expected.exists() else ""
        if new == old:
            continue
        changed += 1
        sys.stdout.writelines(
            difflib.unified_diff(
                old.splitlines(keepends=True),
                new.splitlines(keepends=True),
                f"a/{host.expected.name}",
                f"b/{host.expected.name}",
            )
        )
        if not args.check:
            host.expected.write_text(new, encoding="utf-8")
    print(f"{changed} golden file(s) {'differ' if args.check else 'written'}", file=sys.stderr)
    return 1 if args.check and changed else 0


if __name__ == "__main__":
    sys.exit(main())
