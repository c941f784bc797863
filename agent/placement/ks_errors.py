"""Keystone, catalog and TLS failures told by service, cause and the ``[placement]`` option to fix.

keystoneauth1 raises, while it authenticates before a Placement request
(keystoneauth1.exceptions; observed with keystoneauth1 5.18 against Keystone 30.0.0):

* ``DiscoveryFailure`` when an unversioned ``auth_url`` cannot be reached or answers no
  identity API ("Unable to establish connection" / "Could not find versioned identity
  endpoints"); with a versioned ``auth_url`` (``.../v3``) discovery is skipped and an
  unreachable Keystone raises ``ConnectFailure`` / ``ConnectTimeout`` itself;
* ``SSLError`` (or a ``DiscoveryFailure`` carrying it) when Keystone's certificate is not
  trusted ("certificate verify failed": ``[placement] cafile``);
* ``Unauthorized`` (HTTP 401 from Keystone) when the credentials are refused: a wrong
  password, an unknown user, a project the user has no role on or that does not exist;
* ``EndpointNotFound`` when the token's catalog has no endpoint for the service type,
  service name, interfaces and region asked (nova's defaults: ``service_type =
  placement``, ``valid_interfaces = internal,public``, any name and region).

Those raised while the agent gets its token and endpoint are Keystone's
(:class:`~agent.placement.errors.KeystoneFailure`, never retried, counted apart); a
transport failure or a TLS failure talking to Placement itself is Placement's (the
client's retries, :func:`placement_tls`). A 401 or 403 answered by Placement is an
answer (:mod:`agent.placement.errors`).
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

from keystoneauth1 import exceptions as ks_exc

from agent.placement.errors import KeystoneFailure

_VERIFY = re.compile(r"certificate verify failed: ([^(]+)")
_OPENSSL = re.compile(r"\[SSL: [A-Z_]+\] ([^(]+)")

CREDENTIAL_OPTIONS = "username, password, project_name, user_domain_name, project_domain_name"
CAFILE_HINT = (
    "set [placement] cafile to the CA bundle that signed it (insecure = true skips the "
    "check: labs only)"
)


def with_port(url: str) -> str:
    """``url`` with its port written out (``https://k.example/v3`` -> ``https://k.example:443/v3``)."""
    try:
        parts = urlsplit(url)
        port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    except ValueError:
        return url
    if not parts.hostname or port is None or parts.port is not None:
        return url
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return parts._replace(netloc=f"{host}:{port}").geturl()


def auth_url(adapter: Any) -> str:
    """The auth plugin's ``auth_url`` with its port, or ``(no auth_url)``."""
    auth = getattr(getattr(adapter, "session", None), "auth", None) or getattr(
        adapter, "auth", None
    )
    url = getattr(auth, "auth_url", None)
    return with_port(str(url)) if url else "(no auth_url)"


def _untrusted(exc: BaseException) -> bool:
    text = str(exc)
    return "CERTIFICATE_VERIFY_FAILED" in text or "certificate verify failed" in text


def _tls_reason(exc: BaseException) -> str:
    """The TLS library's reason, e.g. ``unable to get local issuer certificate`` or
    ``wrong version number``, from keystoneauth's "SSL exception connecting to URL: ..."."""
    text = " ".join(str(exc).split())
    found = _VERIFY.search(text) or _OPENSSL.search(text)
    return found[1].strip() if found else text[-160:]


def keystone_failure(exc: Exception, adapter: Any) -> KeystoneFailure:
    """The :class:`KeystoneFailure` for a keystoneauth failure while authenticating.

    Args:
        exc: what keystoneauth raised while getting the token or the endpoint.
        adapter: the keystoneauth Adapter (auth_url, service type and name,
            interfaces, region).

    Returns:
        One line naming Keystone and its URL, the cause and the option to fix.
    """
    url = auth_url(adapter)
    if isinstance(exc, ks_exc.Unauthorized):
        return KeystoneFailure(
            f"Keystone at {url} refused the credentials (401: wrong password, unknown user, "
            f"or a project the user has no role on); check [placement] {CREDENTIAL_OPTIONS}",
            "credentials",
        )
    if _untrusted(exc) or isinstance(exc, ks_exc.SSLError):
        if _untrusted(exc):
            return KeystoneFailure(
                f"Keystone at {url}: certificate verify failed ({_tls_reason(exc)}): its "
                f"certificate is not trusted; {CAFILE_HINT}",
                "tls",
            )
        return KeystoneFailure(
            f"Keystone at {url}: TLS failed ({_tls_reason(exc)}); check the scheme of "
            "[placement] auth_url (http or https) and [placement] cafile, certfile, keyfile",
            "tls",
        )
    text = str(exc)
    if isinstance(exc, ks_exc.ConnectionError) or (
        isinstance(exc, ks_exc.DiscoveryFailure)
        and ("Unable to establish connection" in text or "timed out" in text)
    ):
        return KeystoneFailure(
            f"Keystone at {url} is unreachable ({type(exc).__name__}); check [placement] "
            "auth_url (e.g. https://keystone.example:5000/v3) and that Keystone is running",
            "unreachable",
        )
    if isinstance(exc, ks_exc.DiscoveryFailure):
        return KeystoneFailure(
            f"Keystone at {url} answers no identity API; check [placement] auth_url "
            "(Keystone's public URL, e.g. https://keystone.example:5000/v3)",
            "unreachable",
        )
    if isinstance(exc, ks_exc.EndpointNotFound):
        return KeystoneFailure(_no_endpoint(adapter), "catalog")
    if isinstance(exc, ks_exc.HttpError):
        return KeystoneFailure(
            f"Keystone at {url} answered {exc.http_status} ({_first_line(exc)}); check "
            "Keystone's own log",
            "error",
        )
    return KeystoneFailure(
        f"Keystone at {url}: authentication failed ({type(exc).__name__}: {_first_line(exc)}); "
        "check [placement] auth_type and its options",
        "error",
    )


def _first_line(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else ""
    return text[:300]


def _no_endpoint(adapter: Any) -> str:
    """What was asked of the catalog, what it offers, and the option that differs."""
    service_type = getattr(adapter, "service_type", None)
    name = getattr(adapter, "service_name", None)
    region = getattr(adapter, "region_name", None)
    interfaces = getattr(adapter, "interface", None)
    if isinstance(interfaces, list | tuple):
        interfaces = ",".join(interfaces)
    asked = f"service_type {service_type}, interfaces {interfaces}, region {region}"
    if name:
        asked += f", service_name {name}"
    line = (
        f"no placement endpoint in Keystone's catalog at {auth_url(adapter)} ({asked}); "
        "check [placement] service_type, valid_interfaces, region_name, service_name, "
        "or set endpoint_override"
    )
    offered = _offered(adapter, service_type)
    if offered is None:
        return line
    if not offered:
        return f"{line}; the catalog has no service of type {service_type}"
    names = sorted({e["name"] for e in offered if e["name"]})
    hint = "; the catalog offers " + "; ".join(
        f"{e['interface']} in {e['region']} ({e['name']}) {e['url']}" for e in offered
    )
    if name and name not in names:
        hint += (
            f"; [placement] service_name = {name} matches none of its names "
            f"({', '.join(names) or 'none'}): set service_name to one of them or unset it"
        )
    return line + hint


def _offered(adapter: Any, service_type: str | None) -> list[dict[str, str]] | None:
    """The catalog's endpoints of ``service_type`` (from the token already fetched), or None."""
    auth = getattr(adapter, "auth", None) or getattr(
        getattr(adapter, "session", None), "auth", None
    )
    access = getattr(auth, "auth_ref", None)  # the token in hand: no request
    catalog = getattr(getattr(access, "service_catalog", None), "catalog", None)
    if not isinstance(catalog, list):
        return None
    found = []
    for service in catalog:
        if service.get("type") != service_type:
            continue
        for endpoint in service.get("endpoints") or []:
            found.append(
                {
                    "name": str(service.get("name") or ""),
                    "interface": str(endpoint.get("interface")),
                    "region": str(endpoint.get("region_id") or endpoint.get("region")),
                    "url": str(endpoint.get("url")),
                }
            )
    return found


def placement_tls(exc: BaseException, endpoint: str) -> str:
    """One line for a TLS failure talking to Placement at ``endpoint``."""
    if _untrusted(exc):
        return (
            f"Placement at {endpoint}: certificate verify failed ({_tls_reason(exc)}): its "
            f"certificate is not trusted; {CAFILE_HINT}"
        )
    return (
        f"Placement at {endpoint}: TLS failed ({_tls_reason(exc)}); check the endpoint's "
        "scheme (catalog or [placement] endpoint_override) and [placement] cafile, "
        "certfile, keyfile"
    )
