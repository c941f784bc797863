"""Write agent/conf/data/nova_options.json: every option name nova registers, by group.

Reads nova's own option modules (``nova/conf/*.py``) from a git checkout with
``ast`` (nothing is imported or executed) and records, per group, the option
names and their deprecated names, plus the groups nova fills with
keystoneauth options (``confutils.register_ksa_opts``: any auth plugin
option is nova's there). Libraries' groups nova also reads (oslo.messaging,
oslo.log, oslo.db, keystonemiddleware ...) are listed by name in
``LIBRARY_GROUPS`` below: any option in them is accepted.

Usage (from agent/conf/data/):
    python gen_nova_options.py NOVA_GIT_DIR [COMMIT] > nova_options.json
    python gen_nova_options.py --installed > nova_options.json

``--installed`` reads the nova package installed beside the agent (the
``test`` extra pins the release the agent is judged against, nova 34.0.0),
found without importing it.
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import json
import pathlib
import subprocess
import sys

LIBRARY_GROUPS = [
    "oslo_messaging_rabbit",
    "oslo_messaging_notifications",
    "oslo_messaging_kafka",
    "oslo_concurrency",
    "oslo_policy",
    "oslo_middleware",
    "oslo_reports",
    "oslo_limit",
    "oslo_versionedobjects",
    "keystone_authtoken",
    "profiler",
    "cors",
    "healthcheck",
    "os_brick",
    "privsep",
    "barbican",
    "barbican_service_user",
    "castellan",
    "vault",
    "key_manager",
    "database",
    "api_database",
    "cache",
]
"""Groups of the libraries nova loads (their own option lists); any option there is nova's."""

LIBRARY_DEFAULT_OPTIONS = [
    # oslo.messaging ([DEFAULT] of every service using RPC)
    "transport_url",
    "control_exchange",
    "rpc_response_timeout",
    "executor_thread_pool_size",
    "rpc_conn_pool_size",
    "conn_pool_min_size",
    "conn_pool_ttl",
    "rpc_ping_enabled",
    # oslo.service
    "backdoor_port",
    "backdoor_socket",
    "log_options",
    "graceful_shutdown_timeout",
    "run_external_periodic_tasks",
    "api_paste_config",
    "wsgi_log_format",
    "tcp_keepidle",
    "wsgi_default_pool_size",
    "max_header_line",
    "wsgi_keep_alive",
    "client_socket_timeout",
]
"""[DEFAULT] options of oslo.messaging and oslo.service, which nova loads (by name)."""


def git(repo: str, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", repo, *args], check=True, capture_output=True, text=True
    ).stdout


def _str(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _opt_names(call: ast.Call) -> list[str]:
    """The option's name and its deprecated names (deprecated_name=, DeprecatedOpt(...))."""
    names = [n for n in [_str(call.args[0]) if call.args else None] if n]
    for kw in call.keywords:
        if kw.arg == "deprecated_name" and _str(kw.value):
            names.append(_str(kw.value))
    return names


def _opts_in(node: ast.AST, lists: dict[str, list[str]]) -> list[str]:
    """Option names in an expression: ``cfg.XOpt(...)`` calls and names of earlier lists."""
    out = []
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call) and getattr(sub.func, "attr", "").endswith("Opt"):
            out += _opt_names(sub)  # DeprecatedOpt names too: nova.conf may still use them
        elif isinstance(sub, ast.Name) and sub.id in lists:
            out += lists[sub.id]
    return out


def _group_name(call: ast.Call, consts: dict[str, str]) -> str | None:
    """``cfg.OptGroup(name)``'s name: a literal, ``name=``, or a module constant."""
    node = next((kw.value for kw in call.keywords if kw.arg == "name"), None)
    if node is None and call.args:
        node = call.args[0]
    return _str(node) or consts.get(getattr(node, "id", ""))


def _module_names(
    tree: ast.Module,
) -> tuple[dict[str, str | None], dict[str, list[str]]]:
    """``(OptGroup variables -> group name, option-list variables -> option names)``."""
    group_vars: dict[str, str | None] = {}
    lists: dict[str, list[str]] = {}
    consts: dict[str, str] = {}
    for node in tree.body:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1):
            continue
        target = getattr(node.targets[0], "id", None)
        value = node.value
        if isinstance(value, ast.Call) and getattr(value.func, "attr", "") == "OptGroup":
            group_vars[target] = _group_name(value, consts)
        elif target and _str(value):
            consts[target] = _str(value)
        elif target:
            lists[target] = _opts_in(value, lists)
    return group_vars, lists


def _group_of(node: ast.AST | None, group_vars: dict[str, str | None]) -> str | None:
    if isinstance(node, ast.Attribute):  # cinder_group.name
        node = node.value
    return _str(node) or group_vars.get(getattr(node, "id", ""))


def scan(source: str, groups: dict[str, set[str]], ksa: set[str]) -> None:
    """Add the options ``source`` (one nova/conf module) registers to ``groups`` / ``ksa``."""
    tree = ast.parse(source)
    group_vars, lists = _module_names(tree)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        attr = getattr(node.func, "attr", "")
        if attr in ("register_opts", "register_opt") and node.args:
            kw = next((k.value for k in node.keywords if k.arg == "group"), None)
            where = kw if kw is not None else (node.args[1] if len(node.args) > 1 else None)
            group = _group_of(where, group_vars) or "DEFAULT"
            groups.setdefault(group, set()).update(_opts_in(node.args[0], lists))
        elif attr in KSA_REGISTRATIONS and len(node.args) > 1:
            name = _group_of(node.args[1], group_vars)
            if name:
                ksa.add(name)


KSA_REGISTRATIONS = (
    "register_ksa_opts",
    "register_auth_conf_options",
    "register_session_conf_options",
)


def installed_sources() -> tuple[str, list[str]]:
    """The installed nova's version and the text of its ``nova/conf/*.py`` (not imported)."""
    spec = importlib.util.find_spec("nova")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("nova is not installed here (pip install '.[test]')")
    conf = pathlib.Path(next(iter(spec.submodule_search_locations))) / "conf"
    texts = [p.read_text(encoding="utf-8") for p in sorted(conf.glob("*.py"))]
    return importlib.metadata.version("nova"), texts


def git_sources(repo: str, commit: str) -> list[str]:
    """The text of ``nova/conf/*.py`` at ``commit`` of the git checkout ``repo``."""
    paths = git(repo, "ls-tree", "--name-only", commit, "nova/conf/").split()
    return [git(repo, "show", f"{commit}:{p}") for p in paths if p.endswith(".py")]


def main() -> None:
    if sys.argv[1] == "--installed":
        version, sources = installed_sources()
        origin = f"nova {version} (the installed package)"
    else:
        repo = sys.argv[1]
        commit = sys.argv[2] if len(sys.argv) > 2 else git(repo, "rev-parse", "HEAD").strip()
        sources = git_sources(repo, commit)
        origin = f"openstack/nova@{commit}"
    groups: dict[str, set[str]] = {}
    ksa: set[str] = set()
    from oslo_log import _options as log_options  # the installed oslo.log's own list

    groups["DEFAULT"] = {o.dest for _, opts in log_options.list_opts() for o in opts}
    groups["DEFAULT"] |= set(LIBRARY_DEFAULT_OPTIONS)
    for source in sources:
        scan(source, groups, ksa)
    json.dump(
        {
            "source": f"{origin} nova/conf/*.py (agent/conf/data/gen_nova_options.py)",
            "groups": {g: sorted(n) for g, n in sorted(groups.items())},
            "any_option_groups": sorted(ksa | set(LIBRARY_GROUPS)),
        },
        sys.stdout,
        indent=1,
    )
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
