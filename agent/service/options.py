"""Options of the resource tracker and the service (``compute-agent run``)."""

from __future__ import annotations

from oslo_config import cfg

DEFAULT_OPTS: list[cfg.Opt] = [
    cfg.FloatOpt(
        "update_jitter",
        default=5.0,
        min=0.0,
        help="Up to this many seconds are added at random to each cycle's start, so a "
        "fleet of agents restarted together does not reach Placement in step.",
    ),
    cfg.IntOpt(
        "cycle_timeout",
        default=900,
        min=10,
        help="Seconds one cycle may take: no Placement request starts after that, and the "
        "cycle ends failed; the next one carries on where it stopped. Each request is "
        "also bounded by [placement] timeout.",
    ),
    cfg.IntOpt(
        "stop_timeout",
        default=10,
        min=1,
        help="Seconds the running cycle gets to finish after SIGTERM or SIGINT (no new "
        "Placement request starts meanwhile); the service then exits 0 either way. Keep "
        "it below systemd's TimeoutStopSec.",
    ),
    cfg.BoolOpt(
        "watch_host_events",
        default=True,
        help="React to what the driver sees happen on the host (libvirt domain and node "
        "device events, udev hot-plug, edits of the fake driver's host file) with "
        "targeted updates of Placement within a second, instead of waiting for the next "
        "cycle. The periodic cycle stays, as the audit that heals whatever events missed.",
    ),
    cfg.FloatOpt(
        "event_delay",
        default=0.05,
        min=0.0,
        max=5.0,
        help="Seconds the service waits after an event before its targeted update, so the "
        "rest of a burst (an instance's several lifecycle events, VFs created together) "
        "joins the same update. Adds this much to every event's latency.",
    ),
    cfg.IntOpt(
        "instance_build_timeout",
        default=0,
        min=0,
        help="Seconds an instance claimed through the agent (the fake driver's spawn, "
        "ResourceTracker.instance_claim) may go unlisted by the driver before its claim "
        "is given back. Until then the claim is 'claimed, building' and the audit keeps "
        "it. nova's option of this name (its build timeout); 0, as in nova, never gives "
        "a claim back on time alone: only when the instance is listed and then gone, or "
        "its spawn is aborted.",
    ),
    cfg.IntOpt(
        "status_max_age",
        min=1,
        help="'compute-agent status' reports the last cycle as stale when it finished "
        "more than this many seconds ago. Default: three times update_interval.",
    ),
]

COMPUTE_OPTS: list[cfg.Opt] = [
    cfg.IntOpt(
        "remove_unknown_allocations_after",
        default=0,
        min=0,
        help="Seconds after which the allocations of a consumer this agent never saw as "
        "an instance (an instance still being built, a migration, another service's "
        "consumer) are removed from this host's providers. 0, the default, never "
        "removes them: only the allocations of instances that were on this host and "
        "are gone are removed. Even when set, a consumer whose project and user are those "
        "of an instance listed on this host, or any while an instance listed here is "
        "moving, is kept: nova's migration records carry no consumer type and hold the "
        "source host's share during a resize or live migration (docs/service.md).",
    ),
    cfg.IntOpt(
        "absent_instance_timeout",
        default=3600,
        min=0,
        help="Seconds an instance must have been absent from this host (its domain gone), "
        "as found by at least two periodic audits, before the agent removes this host's "
        "part of an allocation another writer made (nova's scheduler, conductor or "
        "heal_allocations). nova's own operations on one host leave the domain absent while "
        "the allocation stays live (a resize revert, an unshelve's image download and "
        "spawn, a rebuild, an evacuation's clean-up), and a removal inside one fails it; "
        "nova removes its own allocations on delete, so the agent's removal only repairs a "
        "leak, which costs little when late. An event never counts, and any write of the "
        "consumer by another writer starts the wait again. An allocation the agent wrote "
        "itself, still as it wrote it, is removed at the first audit that finds the "
        "instance gone. The default is twice nova's [DEFAULT] long_rpc_timeout (1800 s), "
        "the longest nova waits on one step of those operations (docs/service.md).",
    ),
    cfg.BoolOpt(
        "rewrite_differing_allocations",
        default=False,
        help="Rewrite an instance's allocation on this host when it differs from what the "
        "agent plans from the driver (drift). Off by default, as nova-manage placement "
        "heal_allocations leaves existing allocations: nova's scheduler wrote them, and "
        "drift is logged once with both sides, counted "
        "(compute_agent_allocation_drift) and reported by 'compute-agent show --check'. "
        "Missing allocations are always written, and gone instances' removed.",
    ),
    cfg.IntOpt(
        "resource_provider_association_refresh",
        default=300,
        min=0,
        help="Seconds the agent keeps a provider's inventories, traits and aggregates "
        "without reading them again when its generation moved and the allocations read "
        "in the same cycle explain the move (nova's claims move the compute node's "
        "generation at every boot). Any move they do not explain, any write of those "
        "details and a restart read them at once. nova's option of this name (the "
        "refresh interval of nova-compute's cache of the same). 0: never on time alone.",
    ),
]

METRICS_OPTS: list[cfg.Opt] = [
    cfg.StrOpt(
        "listen",
        default="127.0.0.1:9180",
        help="ADDRESS:PORT where 'compute-agent run' serves Prometheus metrics at "
        "/metrics (cycle duration and outcome, Placement requests by method and status, "
        "providers, allocations written and deleted, last success time). Empty: no "
        "metrics endpoint.",
    ),
]


def list_opts() -> list[tuple[str, list[cfg.Opt]]]:
    """The tracker's and the service's options by group."""
    return [("DEFAULT", DEFAULT_OPTS), ("compute", COMPUTE_OPTS), ("metrics", METRICS_OPTS)]
