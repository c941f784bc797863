"""A real Keystone, and a real Placement behind it, on loopback for the functional tests.

Keystone 30.0.0 (the ``keystone`` test extra) on SQLite with fernet tokens, bootstrapped
as a deployment would be (``keystone-manage db_sync`` and ``bootstrap``; the fernet keys
set up and rotated by Keystone's own ``FernetUtils``, what ``fernet_setup`` runs), served
on loopback (``tests/helpers/wsgi_serve.py``); then the service project, the users the
tests log in as and the catalog (the Placement service with an ``internal`` endpoint in
``RegionOne`` over http and one in ``RegionTLS`` over https). Placement 16 runs with
``[api] auth_strategy = keystone`` (keystonemiddleware validates every token against
this Keystone, no token cache, so a rotated fernet key shows at once). A TLS front
(:class:`TLSFront`, a throwaway CA made with ``cryptography``) serves each over https on
another loopback port: Keystone for ``auth_url = https://...``, Placement for the
``RegionTLS`` endpoint.

One of each for the whole test run (``conftest.py``'s ``keystone`` fixture).
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import select
import socket
import ssl
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.helpers.net import free_port, terminate
from tests.helpers.paths import REPO

ADMIN_PASSWORD = "admin-pw-7f3a"
PLACEMENT_PASSWORD = "placement-pw-91c2"
AGENT_PASSWORD = "agent-pw-4d8e"
MEMBER_PASSWORD = "member-pw-2b6c"
BIN = Path(sys.executable).parent
TOKEN_LIFE = 124
"""Seconds a token lives; keystoneauth fetches a new one once fewer than 120 are left."""


@dataclass(frozen=True)
class Users:
    """The users the fixture creates (all in domain Default, project ``service``)."""

    agent: str = "compute-agent"  # role service: what the agent needs
    member: str = "member-only"  # role member only: Placement's policy refuses it
    placement: str = "placement"  # keystonemiddleware's own user (role service)


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def make_ca(where: Path) -> tuple[Path, Path, Path]:
    """A throwaway CA and a server certificate for 127.0.0.1 signed by it.

    Returns:
        ``(ca.pem, server.pem, server.key)`` under ``where``.
    """
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "compute-agent test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False),
            critical=True,
        )
        .add_extension(
            x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .add_extension(x509.ExtendedKeyUsage([x509.OID_SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    where.mkdir(parents=True, exist_ok=True)
    paths = where / "ca.pem", where / "server.pem", where / "server.key"
    paths[0].write_bytes(_pem(ca))
    paths[1].write_bytes(_pem(cert))
    paths[2].write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return paths


class TLSFront:
    """https on a loopback port in front of a plain http one (a TLS-terminating proxy).

    Each accepted connection is wrapped in TLS with ``cert``/``key`` and its bytes are
    carried both ways to ``127.0.0.1:backend``; threads in the test process.
    """

    def __init__(self, backend: int, cert: Path, key: Path) -> None:
        self.backend = backend
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(cert, key)
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.url = f"https://127.0.0.1:{self.port}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._carry, args=(conn,), daemon=True).start()

    def _carry(self, conn: socket.socket) -> None:
        try:
            tls = self.context.wrap_socket(conn, server_side=True)
        except (ssl.SSLError, OSError):  # the client refused our certificate
            conn.close()
            return
        with tls, socket.create_connection(("127.0.0.1", self.backend)) as plain:
            pair = {tls: plain, plain: tls}
            while True:
                ready = [tls] if tls.pending() else select.select(list(pair), [], [], 30)[0]
                if not ready:
                    return
                for side in ready:
                    try:
                        data = side.recv(65536)
                    except (ssl.SSLError, OSError):
                        return
                    if not data:
                        return
                    pair[side].sendall(data)

    def close(self) -> None:
        """Stop accepting connections."""
        self.sock.close()


def _serve(app: str, port: int, env: dict[str, str], log: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.helpers.wsgi_serve", app, str(port)],
        cwd=REPO,
        env={**os.environ, **env},
        stdout=subprocess.DEVNULL,
        stderr=open(log, "ab"),  # the server's log, open while it runs
    )


def _wait(url: str, proc: subprocess.Popen, log: Path, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{url} exited: {log.read_text()[-3000:]}")
        try:
            requests.get(url, timeout=2)
            return
        except (requests.ConnectionError, requests.Timeout):
            time.sleep(0.2)
    raise RuntimeError(f"{url} did not answer within {timeout} s: {log.read_text()[-3000:]}")


class Keystone:
    """Keystone and a Keystone-backed Placement, started once (module docstring).

    Attributes:
        url: Keystone's ``http://127.0.0.1:PORT`` (``url + "/v3"`` is the versioned
            ``auth_url``).
        tls_url: Keystone over https (``TLSFront``).
        placement_url: Placement over http (``RegionOne``'s endpoint).
        placement_tls_url: Placement over https (``RegionTLS``'s endpoint).
        cafile: the CA that signed the https fronts' certificate.
        users: the users created.
    """

    def __init__(self, where: Path) -> None:
        self.where = where
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.placement_port = free_port()
        self.placement_url = f"http://127.0.0.1:{self.placement_port}"
        self.users = Users()
        self.cafile, self._cert, self._key = make_ca(where / "tls")
        self.fronts: list[TLSFront] = []
        self.procs: list[subprocess.Popen] = []
        self.conf = where / "keystone.conf"

    # -- start and stop -----------------------------------------------------------

    def start(self) -> None:
        """Bootstrap Keystone, start it and Placement, create users and the catalog."""
        ks_front = TLSFront(self.port, self._cert, self._key)
        pl_front = TLSFront(self.placement_port, self._cert, self._key)
        self.fronts = [ks_front, pl_front]
        self.tls_url, self.placement_tls_url = ks_front.url, pl_front.url
        self._write_keystone_conf()
        for kind in ("fernet_tokens", "fernet_receipts"):  # what fernet_setup sets up
            keys = self._fernet(kind)
            keys.create_key_directory(os.getuid(), os.getgid())
            keys.initialize_key_repository(os.getuid(), os.getgid())
        self.manage("db_sync")
        self._write_placement_conf()
        # both servers load (seconds of imports) while keystone-manage bootstraps
        env = {"OS_KEYSTONE_CONFIG_DIR": str(self.where)}
        keystone_log = self.where / "keystone.log"
        self.procs.append(_serve("keystone.wsgi.api:application", self.port, env, keystone_log))
        env = {"OS_PLACEMENT_CONFIG_DIR": str(self.where / "placement")}
        placement_log = self.where / "placement.log"
        self.procs.append(
            _serve("placement.wsgi.api:application", self.placement_port, env, placement_log)
        )
        try:
            self.manage(
                "bootstrap", "--bootstrap-password", ADMIN_PASSWORD,
                "--bootstrap-public-url", self.url + "/v3",
                "--bootstrap-internal-url", self.url + "/v3",
                "--bootstrap-region-id", "RegionOne",
            )  # fmt: skip
            _wait(self.url + "/v3", self.procs[0], keystone_log)
            self._populate()
            _wait(self.placement_url + "/", self.procs[1], placement_log)
        except Exception:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop both servers and the TLS fronts."""
        for proc in self.procs:
            terminate(proc, 20)
        for front in self.fronts:
            front.close()
        self.procs = []

    def manage(self, *args: str) -> None:
        """``keystone-manage --config-file keystone.conf ARGS`` (e.g. ``fernet_rotate``)."""
        done = subprocess.run(
            [str(BIN / "keystone-manage"), "--config-file", str(self.conf), *args],
            capture_output=True,
            text=True,
        )
        if done.returncode:
            log = (self.where / "keystone-app.log").read_text()[-3000:]
            raise RuntimeError(f"keystone-manage {args[0]} failed: {done.stderr[-3000:]}{log}")

    def rotate_keys(self) -> None:
        """Rotate the fernet keys until the key of every token issued so far is gone.

        Three active keys (``max_active_keys``): the first rotation makes the staged key
        primary and keeps the old primary; the second drops it.
        """
        for _ in range(2):
            self._fernet("fernet_tokens").rotate_keys(os.getuid(), os.getgid())

    def _fernet(self, kind: str) -> Any:
        """Keystone's own key repository code (what ``keystone-manage fernet_setup`` and
        ``fernet_rotate`` run), in this process: a ``keystone-manage`` costs seconds."""
        from keystone.common.fernet_utils import FernetUtils

        where = {"fernet_tokens": "fernet-keys", "fernet_receipts": "fernet-receipts"}[kind]
        return FernetUtils(str(self.where / where), 3, kind)

    # -- configuration --------------------------------------------------------------

    def _write_keystone_conf(self) -> None:
        w = self.where
        self.conf.write_text(
            f"[DEFAULT]\nlog_file = {w / 'keystone-app.log'}\n"
            f"[database]\nconnection = sqlite:///{w / 'keystone.sqlite'}\n"
            # keystoneauth renews a token 120 s before it expires: tokens of 124 s are
            # renewed after 4 s, so a test sees one expire under a running client
            f"[token]\nprovider = fernet\nexpiration = {TOKEN_LIFE}\n"
            f"[fernet_tokens]\nkey_repository = {w / 'fernet-keys'}\nmax_active_keys = 3\n"
            f"[fernet_receipts]\nkey_repository = {w / 'fernet-receipts'}\n"
            f"[credential]\nkey_repository = {w / 'credential-keys'}\n"
            "[cache]\nenabled = false\n"
            # bcrypt's cheapest cost: each authentication hashes the password
            "[identity]\npassword_hash_rounds = 4\n"
        )

    def _write_placement_conf(self) -> None:
        d = self.where / "placement"
        d.mkdir(exist_ok=True)
        (d / "placement.conf").write_text(
            f"[DEFAULT]\nlog_file = {d / 'placement-app.log'}\n"
            "[api]\nauth_strategy = keystone\n"
            f"[placement_database]\nconnection = sqlite:///{d / 'placement.sqlite'}\n"
            "sync_on_startup = true\n"
            f"[keystone_authtoken]\nwww_authenticate_uri = {self.url}/v3\n"
            f"auth_url = {self.url}/v3\nauth_type = password\n"
            f"username = {self.users.placement}\npassword = {PLACEMENT_PASSWORD}\n"
            "project_name = service\nuser_domain_name = Default\n"
            "project_domain_name = Default\n"
            # every token checked with Keystone: a rotated key shows at once
            "token_cache_time = -1\n"
        )

    def _populate(self) -> None:
        """The service project, the users and their roles, Placement in the catalog."""
        s = requests.Session()
        body = {
            "auth": {
                "identity": {
                    "methods": ["password"],
                    "password": {
                        "user": {
                            "name": "admin",
                            "domain": {"id": "default"},
                            "password": ADMIN_PASSWORD,
                        }
                    },
                },
                "scope": {"project": {"name": "admin", "domain": {"id": "default"}}},
            }
        }
        r = s.post(self.url + "/v3/auth/tokens", json=body, timeout=60)
        r.raise_for_status()
        s.headers["X-Auth-Token"] = r.headers["X-Subject-Token"]

        def post(path: str, key: str, value: dict) -> str:
            resp = s.post(f"{self.url}/v3/{path}", json={key: value}, timeout=60)
            resp.raise_for_status()
            return resp.json()[key]["id"]

        roles = {r["name"]: r["id"] for r in s.get(self.url + "/v3/roles").json()["roles"]}
        for name in ("service", "member"):
            if name not in roles:
                roles[name] = post("roles", "role", {"name": name})
        project = post("projects", "project", {"name": "service", "domain_id": "default"})
        for user, password, role in (
            (self.users.agent, AGENT_PASSWORD, "service"),
            (self.users.member, MEMBER_PASSWORD, "member"),
            (self.users.placement, PLACEMENT_PASSWORD, "service"),
        ):
            new = {"name": user, "password": password, "domain_id": "default"}
            uid = post("users", "user", new)
            s.put(
                f"{self.url}/v3/projects/{project}/users/{uid}/roles/{roles[role]}", timeout=60
            ).raise_for_status()
        service = post("services", "service", {"type": "placement", "name": "placement"})
        post("regions", "region", {"id": "RegionTLS"})
        regions = (("RegionOne", self.placement_url), ("RegionTLS", self.placement_tls_url))
        for region, url in regions:
            post(
                "endpoints",
                "endpoint",
                {"service_id": service, "interface": "internal", "region_id": region, "url": url},
            )
