"""Keystone and catalog failures told by cause, with the ``[placement]`` option to fix.

keystoneauth1 raises, while it authenticates before a Placement request
(keystoneauth1.exceptions; observed with keystoneauth1 5.x):

* ``DiscoveryFailure`` when ``auth_url`` cannot be reached or answers no
  identity API ("Unable to establish connection" / "Could not find
  versioned identity endpoints");
* ``Unauthorized`` (HTTP 401 from keystone) when the credentials are refused;
* ``EndpointNotFound`` when the token's catalog has no endpoint for the
  service type, interfaces and region asked (nova's defaults:
  ``service_type = placement``, ``valid_interfaces = internal,public``);
* ``ConnectFailure`` / ``ConnectTimeout`` when Placement itself cannot be
  reached (handled by the client's retries, not here).

A 401 answered by Placement itself is not raised by keystoneauth (the agent
asks with ``raise_exc=False``) and is reported by :mod:`agent.placement.errors`.
"""

from __future__ import annotations

from typing import Any

from keystoneauth1 import exceptions as ks_exc

CREDENTIAL_OPTIONS = "username, password, project_name, user_domain_name, project_domain_name"


def _auth_url(adapter: Any) -> str:
    auth = getattr(getattr(adapter, "session", None), "auth", None) or getattr(
        adapter, "auth", None
    )
    return str(getattr(auth, "auth_url", None) or "(no auth_url)")


def describe(exc: Exception, adapter: Any) -> str:
    """One line naming the cause of a keystoneauth failure and the option to fix.

    Args:
        exc: the keystoneauth exception raised while authenticating or
            looking up the endpoint.
        adapter: the keystoneauth Adapter (for auth_url, service type,
            interfaces, region).
    """
    url = _auth_url(adapter)
    if isinstance(exc, ks_exc.Unauthorized):
        return (
            f"keystone at {url} refused the credentials (401); check [placement] "
            f"{CREDENTIAL_OPTIONS} (and that the user exists with the service role)"
        )
    if isinstance(exc, ks_exc.DiscoveryFailure):
        reason = (
            "unreachable"
            if "Unable to establish connection" in str(exc)
            else ("answers no identity API")
        )
        return (
            f"keystone at {url} is {reason} ({type(exc).__name__}); check [placement] "
            "auth_url (e.g. http://keystone.example/identity) and that keystone is up"
        )
    if isinstance(exc, ks_exc.EndpointNotFound):
        interfaces = getattr(adapter, "interface", None)
        if isinstance(interfaces, list | tuple):
            interfaces = ",".join(interfaces)
        return (
            f"no placement endpoint in keystone's catalog (service_type "
            f"{getattr(adapter, 'service_type', None)}, interfaces {interfaces}, region "
            f"{getattr(adapter, 'region_name', None)}); check [placement] service_type, "
            "valid_interfaces, region_name, or set endpoint_override"
        )
    return f"keystone authentication failed ({type(exc).__name__}); check [placement] auth_type"
