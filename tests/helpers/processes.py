"""One test at a time may run a process named nova-compute on this machine.

``[compute_agent] nova_compute = auto`` looks at every process of the host
(agent/service/nova_evidence.py), so a test that starts a process named nova-compute
is seen by every other test's scan, and a test that wants to see absence sees
another's. The tests that start one, or assert absence, hold this lock for their
duration: an exclusive ``flock`` on one file, so that pytest-xdist's worker processes
take turns (an ``xdist_group`` mark alone did not keep them on one worker).
"""

from __future__ import annotations

import fcntl
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

LOCK = Path(tempfile.gettempdir()) / "compute-agent-tests-nova-compute.lock"


@contextmanager
def nova_compute_processes() -> Iterator[None]:
    """Held while a test may start a process named nova-compute or look for none."""
    with LOCK.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
