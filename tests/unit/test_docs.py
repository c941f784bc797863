"""Operator documentation keeps up with the code."""

from __future__ import annotations

import re

from agent.conf import catalog
from tests.helpers.paths import REPO


def test_every_option_is_documented():
    docs = "\n".join(p.read_text() for p in (REPO / "docs").glob("*.md"))
    sections = {m.group(1): m.start() for m in re.finditer(r"^## \[(\w+)\]", docs, re.M)}
    missing = []
    for group, opts in catalog.list_opts():
        if group not in sections:
            missing.append(f"[{group}] (no section)")
            continue
        for opt in opts:
            if f"`{opt.name}`" not in docs:
                missing.append(f"[{group}] {opt.name}")
    assert not missing, f"options missing from docs/: {missing}"


def test_readme_has_the_two_setup_commands():
    readme = (REPO / "README.md").read_text()
    assert "make run" in readme and "make test" in readme


def readme_layout() -> str:
    readme = (REPO / "README.md").read_text()
    section = readme.split("## Layout\n", 1)[1]
    return section.split("```", 2)[1]


def layout_entries(block: str) -> dict[str, set[str]]:
    """``{package: words listed for it}`` from README's Layout block.

    A line ``  name/  text`` (two-space indent under ``agent/``) opens a
    package; continuation lines (deeper indent) add to the open one.
    """
    entries: dict[str, set[str]] = {}
    current = ""
    for line in block.splitlines():
        opened = re.match(r"^  ([a-z_]+)/\s+(.*)$", line)
        if opened:
            current = opened.group(1)
            entries[current] = set(re.findall(r"[a-z_]+", opened.group(2)))
        elif current and line.startswith("    "):
            entries[current] |= set(re.findall(r"[a-z_]+", line))
        else:
            current = ""
    return entries


def test_readme_layout_lists_every_agent_package_and_module():
    entries = layout_entries(readme_layout())
    packages = {p.name for p in (REPO / "agent").iterdir() if (p / "__init__.py").exists()}
    assert set(entries) == packages
    for package in packages:
        modules = {
            p.stem
            for p in (REPO / "agent" / package).glob("*.py")
            if p.stem not in ("__init__", "__main__")
        }
        modules |= {
            p.name for p in (REPO / "agent" / package).iterdir() if (p / "__init__.py").exists()
        }
        assert modules <= entries[package], f"agent/{package}/: {modules - entries[package]}"
