"""Build a :class:`PlacementClient` from the ``[placement]`` options."""

from __future__ import annotations

from keystoneauth1 import loading as ks_loading
from oslo_config import cfg

from agent.model.exceptions import ConfigError
from agent.placement.client import PlacementClient
from agent.placement.http import environment_once
from agent.placement.options import GROUP


def client_from_conf(conf: cfg.ConfigOpts) -> PlacementClient:
    """A client for the Placement service the ``[placement]`` options describe.

    Raises:
        ConfigError: no ``auth_type`` is set, or the auth plugin's options are incomplete.
    """
    if not conf.placement.auth_type:
        raise ConfigError(
            "[placement] auth_type is not set: configure Keystone credentials "
            "(auth_type = password, auth_url, username, ...) or, for a Placement in "
            "noauth2 mode, auth_type = admin_token with endpoint and token; or set "
            "[placement] embedded = true"
        )
    try:
        auth = ks_loading.load_auth_from_conf_options(conf, GROUP)
        session = ks_loading.load_session_from_conf_options(conf, GROUP, auth=auth)
        environment_once(session.session)
        adapter = ks_loading.load_adapter_from_conf_options(
            conf, GROUP, session=session, auth=auth, service_type="placement"
        )
    except Exception as exc:  # keystoneauth raises several unrelated types here
        raise ConfigError(f"[placement] options are incomplete or invalid: {exc}") from None
    roles = conf.placement.noauth_roles
    headers = {"X-Roles": ",".join(roles)} if roles else {}
    return PlacementClient(
        adapter,
        retries=conf.placement.request_retries,
        retry_max_wait=conf.placement.retry_max_wait,
        extra_headers=headers,
    )
