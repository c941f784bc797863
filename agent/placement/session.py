"""Build a :class:`PlacementClient` from the ``[placement]`` options, as nova 34 reads them."""

from __future__ import annotations

import logging

from keystoneauth1 import loading as ks_loading
from oslo_config import cfg

from agent.model.exceptions import ConfigError
from agent.placement.client import PlacementClient
from agent.placement.http import environment_once
from agent.placement.options import GROUP
from agent.placement.tries import TryLimits

LOG = logging.getLogger(__name__)

IGNORED_VERSION_OPTIONS = ("version", "min_version", "max_version")
"""keystoneauth's adapter options nova 34 ignores (``nova/conf/utils.py``
``_ADAPTER_VERSION_OPTS``: removed from ``[placement]`` and registered again as dummies
that read as None; "required/supported versions are something the code knows about, not
the operator"). Handed to keystoneauth, they make it look up a versioned endpoint in
Placement's discovery document, which fails ("no placement endpoint in the catalog")."""


def client_from_conf(conf: cfg.ConfigOpts) -> PlacementClient:
    """A client for the Placement service the ``[placement]`` options describe.

    ``version``, ``min_version`` and ``max_version`` are ignored as nova ignores them (a
    warning when set); nova's retry options are honoured by the client's transport
    (:class:`.tries.TryLimits`).

    Raises:
        ConfigError: no ``auth_type`` is set, or the auth plugin's options are incomplete.
    """
    group = conf.placement
    if not group.auth_type:
        raise ConfigError(
            "[placement] auth_type is not set: configure Keystone credentials "
            "(auth_type = password, auth_url, username, ...) or, for a Placement in "
            "noauth2 mode, auth_type = admin_token with endpoint and token; or set "
            "[placement] embedded = true"
        )
    ignored = [name for name in IGNORED_VERSION_OPTIONS if getattr(group, name, None)]
    if ignored:
        LOG.warning(
            "[placement] %s ignored, as nova 34 ignores them: the agent negotiates "
            "Placement's microversion itself (up to 1.39)",
            ", ".join(ignored),
        )
    try:
        auth = ks_loading.load_auth_from_conf_options(conf, GROUP)
        session = ks_loading.load_session_from_conf_options(conf, GROUP, auth=auth)
        environment_once(session.session)
        adapter = ks_loading.load_adapter_from_conf_options(
            conf,
            GROUP,
            session=session,
            auth=auth,
            service_type="placement",
            version=None,
            min_version=None,
            max_version=None,
            # the retries are the client's own (TryLimits), on every path: none here
            connect_retries=0,
            status_code_retries=0,
        )
    except Exception as exc:  # keystoneauth raises several unrelated types here
        raise ConfigError(f"[placement] options are incomplete or invalid: {exc}") from None
    roles = group.noauth_roles
    headers = {"X-Roles": ",".join(roles)} if roles else {}
    limits = TryLimits(
        group.request_retries,
        group.retry_max_wait,
        connect_retries=group.connect_retries,
        connect_retry_delay=group.connect_retry_delay,
        status_code_retries=group.status_code_retries,
        status_code_retry_delay=group.status_code_retry_delay,
        retriable_status_codes=group.retriable_status_codes,
    )
    return PlacementClient(adapter, extra_headers=headers, limits=limits)
