"""Loopback ports for the servers tests start (Placement, MariaDB, metrics), and
stopping the server processes tests start (MariaDB, libvirtd)."""

from __future__ import annotations

import socket
import subprocess


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now (the kernel's pick)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def terminate(proc: subprocess.Popen | None, timeout: float = 30.0) -> None:
    """SIGTERM a server the test started (as ``systemctl stop`` does); SIGKILL after ``timeout``."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
