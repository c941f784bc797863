"""Operator documentation keeps up with the code."""

from __future__ import annotations

import re

from agent.conf import config as agent_config
from tests.helpers.paths import REPO


def test_every_option_is_documented():
    docs = "\n".join(p.read_text() for p in (REPO / "docs").glob("*.md"))
    sections = {m.group(1): m.start() for m in re.finditer(r"^## \[(\w+)\]", docs, re.M)}
    missing = []
    for group, opts in agent_config.list_opts():
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
