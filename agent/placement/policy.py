"""Which roles Placement's default policy wants for a request, to name them on a 403.

Read from the installed openstack-placement's own policy defaults
(``placement/policies/*.py``, ``placement.policies.list_rules``): each documented rule
names the method and path it guards and a check such as ``rule:admin_or_service_api``,
which the base rules resolve to ``role:admin or role:service``. A Placement whose
operator overrides the policy (``policy.yaml``) may want other roles: the message says
"default policy".
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

_PLACEHOLDER = re.compile(r"\{[^}]*\}")
_RULE = re.compile(r"rule:([\w:]+)")
_ROLE = re.compile(r"role:(\w+)")


@dataclass(frozen=True, slots=True)
class Wanted:
    """What the default policy wants for one request.

    Attributes:
        rule: the policy rule's name, e.g. ``placement:reshaper:reshape``.
        check: its check with the base rules resolved, e.g. ``role:service``.
        roles: the roles named in it, in order, e.g. ``("admin", "service")``.
    """

    rule: str
    check: str
    roles: tuple[str, ...]


@functools.cache
def _rules() -> tuple[dict[tuple[str, str], tuple[str, str]], dict[str, str]]:
    """``({(method, path with {} placeholders): (rule, check)}, {base rule: check})``."""
    from placement import policies  # placement's package, installed with the agent

    by_operation: dict[tuple[str, str], tuple[str, str]] = {}
    base: dict[str, str] = {}
    for rule in policies.list_rules():
        base[rule.name] = rule.check_str
        for operation in getattr(rule, "operations", None) or []:
            key = (operation["method"], _PLACEHOLDER.sub("{}", operation["path"]))
            by_operation[key] = (rule.name, rule.check_str)
    return by_operation, base


def _resolve(check: str, base: dict[str, str], depth: int = 0) -> str:
    """``check`` with every ``rule:NAME`` of the base rules replaced by its check."""
    if depth > 5:
        return check
    return _RULE.sub(
        lambda m: f"({_resolve(base[m[1]], base, depth + 1)})" if m[1] in base else m[0],
        check,
    )


def wanted(method: str, template: str) -> Wanted | None:
    """The default policy's rule and roles for ``method template``; None when not found.

    Args:
        method: HTTP method.
        template: the agent's path template (``/resource_providers/{uuid}/inventories``);
            placeholders match whatever Placement's policy calls them.
    """
    try:
        by_operation, base = _rules()
    except ImportError:  # pragma: no cover - placement is a dependency of the agent
        return None
    found = by_operation.get((method, _PLACEHOLDER.sub("{}", template)))
    if found is None:
        return None
    name, check = found
    resolved = _resolve(check, base)
    if _RULE.fullmatch(check):  # one base rule: its check, without the brackets
        resolved = resolved[1:-1]
    roles = tuple(dict.fromkeys(_ROLE.findall(resolved)))
    return Wanted(name, resolved, roles)
