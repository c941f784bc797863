"""Names of a test's own, for a Placement database shared by the session."""

from __future__ import annotations

import uuid as uuidlib


def unique(prefix: str) -> str:
    """``prefix`` plus 8 random hex digits, e.g. ``cn-1f2e3d4c``: a nodename or provider name
    no other test of the session uses (the in-process Placement is one database)."""
    return f"{prefix}-{uuidlib.uuid4().hex[:8]}"
