"""``/metrics`` of a running agent: promtool's lint on a real scrape, and what operators graph.

The agent runs as a process (fake driver, big-host with instances) against
the ``served`` Placement; a network agent's provider is added to its tree
behind its back, to show ``compute_agent_providers`` counts only the
agent's own.
"""

from __future__ import annotations

import shutil
import subprocess
import uuid

import requests
from prometheus_client.parser import text_string_to_metric_families

from tests.helpers.net import free_port
from tests.helpers.placement_http import HEADERS, http_get
from tests.helpers.service import agent, last_cycle, stop, wait_for, write_conf


def scrape(url: str) -> dict[str, list]:
    text = requests.get(url, timeout=5).text
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def sample(families: dict, name: str, **labels: str) -> float | None:
    family = name.removesuffix("_total").removesuffix("_bucket").removesuffix("_count")
    for s in families.get(family, []):
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
            return s.value
    return None


def test_scrape_passes_promtool_and_has_what_operators_graph(tmp_path, served):
    state = tmp_path / "state"
    port = free_port()
    conf = write_conf(
        tmp_path / "c.conf",
        state,
        f"[placement]\nauth_type = admin_token\nendpoint = {served.url}\ntoken = admin\n"
        "noauth_roles = admin,service",
        f"[metrics]\nlisten = 127.0.0.1:{port}",
        update_interval=1,
    )
    log = tmp_path / "run.log"
    proc = agent("run", "--config", str(conf), log=log)
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        wait_for("a first good cycle", lambda: (last_cycle(state) or {}).get("ok"), proc=proc)
        root = http_get(served.url, "/resource_providers", name="big-host")["resource_providers"]
        foreign = {
            "name": "big-host:ovs-agent",
            "uuid": str(uuid.uuid4()),
            "parent_provider_uuid": root[0]["uuid"],
        }
        resp = requests.post(
            served.url + "/resource_providers", json=foreign, headers=HEADERS, timeout=10
        )
        assert resp.status_code == 200, resp.text
        in_tree = http_get(served.url, "/resource_providers", in_tree=root[0]["uuid"])
        everything = len(in_tree["resource_providers"])

        def ok_cycles() -> float:
            return sample(scrape(url), "compute_agent_cycles_total", outcome="ok") or 0

        # Two more cycles: at least one started after the foreign provider appeared.
        seen = ok_cycles()
        wait_for("two more cycles", lambda: ok_cycles() >= seen + 2, proc=proc)
        text = requests.get(url, timeout=5).text
    finally:
        assert stop(proc) == 0, log.read_text()

    promtool = shutil.which("promtool")
    assert promtool, "promtool is not installed: run `make test`, which installs prometheus"
    lint = subprocess.run(
        [promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60
    )
    assert lint.returncode == 0 and not lint.stdout.strip(), lint.stdout + lint.stderr

    families = {f.name: f.samples for f in text_string_to_metric_families(text)}
    # The tree holds a provider that is not the agent's: not counted.
    assert sample(families, "compute_agent_providers", nodename="big-host") == everything - 1
    assert sample(families, "compute_agent_build_info", version="0.1.0") == 1
    assert sample(families, "compute_agent_cycles_total", nodename="big-host", outcome="ok") >= 2
    latency = sample(
        families,
        "compute_agent_placement_request_duration_seconds_count",
        method="GET",
        path="/resource_providers",
        status="200",
    )
    assert latency and latency >= 2  # one tree read per cycle, by path template
    templated = {
        s.labels["path"]
        for s in families["compute_agent_placement_request_duration_seconds"]
        if "path" in s.labels
    }
    assert "/resource_providers/{uuid}/inventories" in templated
    assert not any(label.count("-") >= 4 for label in templated)  # no UUIDs in labels

    def inventory(metric: str, provider: str, rc: str) -> float | None:
        return sample(families, metric, nodename="big-host", provider=provider, resource_class=rc)

    usages = http_get(served.url, f"/resource_providers/{root[0]['uuid']}/usages")["usages"]
    inventories = http_get(served.url, f"/resource_providers/{root[0]['uuid']}/inventories")
    for rc, inv in inventories["inventories"].items():
        assert inventory("compute_agent_inventory_total_units", "big-host", rc) == inv["total"]
        reserved = inventory("compute_agent_inventory_reserved_units", "big-host", rc)
        assert reserved == inv["reserved"]
        assert inventory("compute_agent_inventory_used_units", "big-host", rc) == usages.get(rc, 0)
    assert sum(usages.values()) > 0  # big-host's instances hold resources there
    assert inventory("compute_agent_inventory_total_units", "big-host:ovs-agent", "VCPU") is None
    for name in ("placement_retries", "generation_conflicts", "reshapes"):
        assert f"# TYPE compute_agent_{name}_total counter" in text or (
            f"# TYPE compute_agent_{name} counter" in text
        ), name
