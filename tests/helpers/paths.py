"""Where the repository's files are, for tests that read examples and fixtures."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
FIXTURES = REPO / "tests" / "fixtures"
LIBVIRT = FIXTURES / "libvirt"
"""libvirt test-driver hosts (``host.xml``, optional ``capabilities.xml``), one folder each."""
NOVA = FIXTURES / "nova"
"""nova's database schemas and JSON columns, made by nova's own code (see its README.md)."""
SYSFS = FIXTURES / "sysfs"
"""Captured sysfs/procfs trees of real hosts, one folder each (see its README.md)."""
