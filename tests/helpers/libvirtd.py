"""A real libvirtd serving libvirt's test driver on a private socket, to stop and start again.

The libvirt driver's reconnection is tested against what it meets in
production: a daemon that goes away (the close callback fires with
``VIR_CONNECT_CLOSE_REASON_EOF``) and comes back. The daemon loads no
hypervisor driver module (``LIBVIRT_DRIVER_DIR`` points at an empty
directory), so it needs neither QEMU nor its users: it serves
``test+unix:///default?socket=...`` (the in-daemon test driver, whose
default host has one running domain) and nothing else, on a socket in a
temporary directory, with no TCP or TLS listener. ``make test`` installs
Debian's ``libvirt-daemon`` for it.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.helpers.net import terminate


class Libvirtd:
    """``libvirtd`` on a socket under ``root``; :meth:`start` and :meth:`stop` as often as wanted.

    Attributes:
        uri: the connection URI of its test driver.
    """

    def __init__(self, root: Path) -> None:
        binary = shutil.which("libvirtd") or "/usr/sbin/libvirtd"
        if not Path(binary).exists():
            # make test installs it: a missing daemon is a broken set-up, not a reason to skip.
            pytest.fail("libvirtd is not installed: run make test, which installs libvirt-daemon")
        self.binary = binary
        self.root = root
        (root / "drivers").mkdir(parents=True, exist_ok=True)
        self.conf = root / "libvirtd.conf"
        self.conf.write_text(
            f'unix_sock_dir = "{root}"\nunix_sock_rw_perms = "0700"\n'
            'auth_unix_rw = "none"\nauth_unix_ro = "none"\n'
        )
        self.socket = root / "libvirt-sock"
        self.uri = f"test+unix:///default?socket={self.socket}"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        """Start the daemon and wait for its socket (30 s at most).

        Raises:
            RuntimeError: it exited or did not listen in time.
        """
        self.socket.unlink(missing_ok=True)
        self.proc = subprocess.Popen(
            [self.binary, "-f", str(self.conf), "-p", str(self.root / "pid")],
            env={"LIBVIRT_DRIVER_DIR": str(self.root / "drivers"), "PATH": "/usr/sbin:/usr/bin"},
            stdout=subprocess.DEVNULL,
            stderr=open(self.root / "libvirtd.log", "ab"),
        )
        deadline = time.monotonic() + 30
        while not self.socket.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"libvirtd did not start: {(self.root / 'libvirtd.log').read_text()[-2000:]}"
                )
            time.sleep(0.05)

    def stop(self) -> None:
        """SIGTERM, as ``systemctl stop libvirtd`` sends; wait for it to exit."""
        terminate(self.proc)
        self.proc = None
