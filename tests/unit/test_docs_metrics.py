"""docs/service.md's metrics table and sample alerts match the code and pass promtool."""

from __future__ import annotations

import re
import shutil
import subprocess

from prometheus_client import Counter, Histogram

from agent.service.metrics import AgentMetrics
from tests.helpers.paths import REPO

SERVICE_MD = (REPO / "docs" / "service.md").read_text()


def exposed_names() -> set[str]:
    """Every series name the agent's registry can expose."""
    metrics = AgentMetrics()
    names: set[str] = set()
    families = (metrics.cycle, metrics.placement, metrics.inventory, metrics.events)
    for value in [v for family in families for v in vars(family).values()]:
        if isinstance(value, Counter):
            names.add(value._name + "_total")
        elif isinstance(value, Histogram):
            names |= {value._name + s for s in ("", "_bucket", "_count", "_sum")}
        elif hasattr(value, "_name"):
            names.add(value._name)
    names |= {f.name for f in metrics.registry.collect()}
    names |= {s.name for f in metrics.registry.collect() for s in f.samples}
    return names


def alert_rules() -> str:
    section = SERVICE_MD.split("### Alerts", 1)[1]
    return re.search(r"```yaml\n(.*?)```", section, re.S).group(1)


def test_every_metric_is_documented_and_every_documented_metric_exists():
    names = exposed_names()
    documented = set(re.findall(r"\bcompute_agent_[a-z_]+\b", SERVICE_MD))
    assert documented - names == set(), "documented but not exposed"
    table = set(re.findall(r"^\| `(compute_agent_[a-z_]+)`", SERVICE_MD, re.M))
    families = {n for n in names if not n.endswith(("_bucket", "_count", "_sum"))}
    families -= {n.removesuffix("_total") for n in names if n.endswith("_total")}
    families -= {"compute_agent_build"}  # the info metric's family; exposed as _info
    assert families - table == set(), "exposed but not in the table"


def test_sample_alerts_pass_promtool_and_cover_the_four_cases(tmp_path):
    rules = alert_rules()
    for alert in ("CycleFailing", "Stale", "ConflictStorm", "AllocationDrift"):
        assert f"alert: ComputeAgent{alert}" in rules
    path = tmp_path / "compute-agent.rules.yml"
    path.write_text(rules)
    promtool = shutil.which("promtool")
    assert promtool, "promtool is not installed: run `make test`, which installs prometheus"
    proc = subprocess.run(
        [promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS: 4 rules found" in proc.stdout
