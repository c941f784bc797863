"""``[placement]`` options: keystoneauth1's, exactly as nova.conf has them, plus ours.

keystoneauth1's loading helpers register the session (cafile, insecure,
timeout, ...), auth (auth_type, auth_url, username, ...) and adapter
(valid_interfaces, region_name, endpoint_override, ...) options, so
operators configure the agent the way they configure nova-compute.
"""

from __future__ import annotations

import copy

from keystoneauth1 import loading as ks_loading
from oslo_config import cfg

GROUP = "placement"

REQUEST_TIMEOUT = 30.0
"""Default of keystoneauth's ``[placement] timeout`` (seconds): keystoneauth has none.

Without it a Placement (or a proxy in front of it) that accepts the
connection and never answers holds the cycle, and SIGTERM, forever.
"""

AGENT_OPTS: list[cfg.Opt] = [
    cfg.BoolOpt(
        "embedded",
        help="Run Placement inside the agent on a SQLite file under state_path "
        "(labs, single hosts, offline work). Unset: embedded when no auth_type is set.",
    ),
    cfg.IntOpt(
        "request_retries",
        default=4,
        min=0,
        help="Retries of a request that failed in transport or got 502/503/504, with "
        "exponential backoff and jitter. 4xx answers are never retried.",
    ),
    cfg.FloatOpt(
        "retry_max_wait",
        default=8.0,
        min=0.0,
        help="Longest wait in seconds between two retries of one request.",
    ),
    cfg.IntOpt(
        "max_concurrent_requests",
        default=64,
        min=1,
        max=256,
        help="Placement requests the agent has in flight at once, at most, when it writes "
        "or reads many independent things (providers of one depth in a cold sync, the "
        "allocations of many consumers, the nodes of a driver with many nodes: that many "
        "nodes are synced at once). 64 keeps a Placement of 16 API workers busy (a cold "
        "sync reached 993 requests a second at 64 on a 16-core host, 1,014 at 128); a "
        "smaller Placement queues the rest. 1 sends one request at a time. The embedded "
        "Placement always gets one at a time (SQLite, one writer).",
    ),
    cfg.ListOpt(
        "noauth_roles",
        default=[],
        help="Roles sent as X-Roles to a Placement running with auth_strategy = noauth2 "
        "(labs, tests). POST /reshaper needs 'service'. Keystone-backed Placement "
        "ignores the header (keystonemiddleware replaces it).",
    ),
]


def list_opts() -> list[tuple[str, list[cfg.Opt]]]:
    """Every ``[placement]`` option registered up front.

    The auth plugin's own options (``auth_url``, ``username``, ``token`` ...)
    are not listed: keystoneauth registers those of the chosen ``auth_type``
    when it loads the plugin, and some are required only for that plugin.
    """
    opts: list[cfg.Opt] = []
    for opt in ks_loading.get_session_conf_options():
        if opt.dest == "timeout":
            opt = copy.deepcopy(opt)
            opt.default = REQUEST_TIMEOUT
            opt.help = (
                "Seconds to wait for Placement (and Keystone) to connect and to answer one "
                "request; a request that times out is retried like a transport error."
            )
        opts.append(opt)
    opts += ks_loading.get_auth_common_conf_options()
    opts += ks_loading.get_adapter_conf_options(include_deprecated=False)
    # nova/conf/utils.py register_ksa_opts / get_ksa_adapter_opts: nova's
    # adapter defaults (valid_interfaces internal,public; its service type).
    cfg.set_defaults(opts, valid_interfaces=["internal", "public"], service_type="placement")
    opts += AGENT_OPTS
    seen: set[str] = set()
    unique = []
    for opt in opts:
        if opt.dest not in seen:
            seen.add(opt.dest)
            unique.append(opt)
    return [(GROUP, unique)]


def is_embedded(conf: cfg.ConfigOpts) -> bool:
    """True when the agent should run Placement in-process (see ``[placement] embedded``)."""
    embedded = conf.placement.embedded
    if embedded is None:
        return not conf.placement.auth_type
    return bool(embedded)
