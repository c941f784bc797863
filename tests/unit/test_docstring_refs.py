"""Every Sphinx cross-reference in a docstring names an object that exists.

A reference (``:meth:`begin```, ``:class:`~drivers.events.DevicesChanged```)
is a promise that the reader can follow it; a renamed or removed object
leaves it pointing nowhere, and nothing else notices. The roles checked are
``meth``, ``class``, ``func``, ``mod``, ``data``, ``attr`` and ``exc`` in
docstrings (the string that opens a module, class or function, and the one
after an assignment) of the modules of ``agent``, ``drivers`` and ``bench``.

A target is resolved the way Sphinx's Python domain reads it (its
``PythonDomain.find_obj``), widened by the module's own imports since these
docstrings are read in the source, not in rendered pages: ``~`` (show the
last part only), a leading ``.``, an explicit title ``text <target>`` and a
trailing ``()`` are dropped; then the name is looked up on the enclosing
classes (innermost first), on the module (its globals: what it defines and
imports), through the imports it makes only under ``TYPE_CHECKING``, as a
submodule of the module, and last as an absolute dotted name (the longest
importable module, then attributes). An attribute is also found where the
class only annotates it or assigns it as ``self.name``. The object must be
what the role says: ``:mod:`` a module, ``:class:`` a class, ``:exc:`` an
exception class, ``:func:`` and ``:meth:`` a callable (or a property), and
``:attr:`` and ``:data:`` no function.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest

from tests.helpers.paths import REPO

ROLE = re.compile(r":(meth|class|func|mod|data|attr|exc):`([^`]+)`")
BENCH = REPO / "bench"


@dataclass(frozen=True)
class Ref:
    """One cross-reference: where it is written and what it reads."""

    path: Path
    line: int
    role: str
    text: str
    module: str
    classes: tuple[str, ...]
    """The classes whose body holds the docstring, outermost first."""

    def __str__(self) -> str:
        where = self.path.relative_to(REPO) if self.path.is_relative_to(REPO) else self.path
        return f"{where}:{self.line}: :{self.role}:`{self.text}`"


class Attribute:
    """An attribute that only an annotation or a ``self.name =`` declares."""

    def __init__(self, owner: object, name: str) -> None:
        self.owner, self.name = owner, name


def modules_of(root: Path, prefix: str) -> Iterator[tuple[str, Path]]:
    """``(dotted module name, file)`` of every ``*.py`` under ``root``, names under ``prefix``."""
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        yield ".".join([prefix, *parts] if prefix else parts), path


def refs_in(module: str, path: Path) -> list[Ref]:
    """Every reference in the docstrings of the file ``path`` of ``module``, in source order."""
    source = path.read_text()
    lines = source.splitlines()
    found: list[Ref] = []

    def visit(node: ast.AST, classes: tuple[str, ...]) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                visit(child, (*classes, child.name))
            elif isinstance(child, ast.Expr) and isinstance(child.value, ast.Constant):
                if isinstance(child.value.value, str):
                    # The source text, not the value: line numbers stay exact.
                    text = "\n".join(lines[child.lineno - 1 : child.end_lineno])
                    for m in ROLE.finditer(text):
                        line = child.lineno + text.count("\n", 0, m.start())
                        # A target cut by a line break reads as Sphinx reads it: one space.
                        target = re.sub(r"\s*\n\s*", " ", m[2])
                        found.append(Ref(path, line, m[1], target, module, classes))
            else:
                visit(child, classes)

    visit(ast.parse(source), ())
    return found


def type_checking_imports(module: str, path: Path) -> dict[str, str]:
    """``{local name: absolute dotted name}`` of the imports under ``if TYPE_CHECKING:``."""
    names: dict[str, str] = {}
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.parse(path.read_text()).body:
        if not (isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)):
            continue
        for stmt in node.body:
            if isinstance(stmt, ast.ImportFrom):
                base = stmt.module or ""
                if stmt.level:
                    anchor = package.split(".")[: len(package.split(".")) - stmt.level + 1]
                    base = ".".join([*anchor, *([base] if base else [])])
                for alias in stmt.names:
                    names[alias.asname or alias.name] = f"{base}.{alias.name}"
            elif isinstance(stmt, ast.Import):
                for alias in stmt.names:
                    names[alias.asname or alias.name.partition(".")[0]] = (
                        alias.name if alias.asname else alias.name.partition(".")[0]
                    )
    return names


def member(owner: object, name: str) -> object:
    """``owner.name``, a submodule, or a declared-only attribute; ``LookupError`` if none."""
    if isinstance(owner, Attribute):
        raise LookupError(f"{owner.name} is an attribute; it has no {name}")
    if hasattr(owner, name):
        return getattr(owner, name)
    if isinstance(owner, ModuleType):
        try:
            return importlib.import_module(f"{owner.__name__}.{name}")
        except ModuleNotFoundError as error:
            if error.name != f"{owner.__name__}.{name}":
                raise
        if name in getattr(owner, "__annotations__", {}):
            return Attribute(owner, name)
    if isinstance(owner, type):
        for klass in owner.__mro__:
            if name in getattr(klass, "__annotations__", {}):
                return Attribute(owner, name)
            try:
                body = inspect.getsource(klass)
            except (OSError, TypeError):
                continue
            if re.search(rf"\bself\.{re.escape(name)}\b\s*(:[^=\n]*)?=[^=]", body):
                return Attribute(owner, name)
    raise LookupError(f"{getattr(owner, '__name__', owner)!s} has no {name}")


def walk(owner: object, parts: list[str]) -> object:
    """``owner.parts[0].parts[1]...`` by :func:`member`; ``LookupError`` at the first missing."""
    for part in parts:
        owner = member(owner, part)
    return owner


def absolute(dotted: str) -> object:
    """The object a full dotted name names: the longest importable module, then attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        name = ".".join(parts[:cut])
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as error:
            if error.name is not None and not name.startswith(error.name):
                raise
            continue
        return walk(module, parts[cut:])
    raise LookupError(f"no module of {dotted} imports")


def written_target(text: str) -> str:
    """A reference's target as written: its explicit title and ``~`` dropped."""
    titled = re.fullmatch(r".*<([^>]+)>", text, re.S)
    return (titled[1] if titled else text).strip().lstrip("~")


def target_of(text: str) -> str:
    """The dotted name a reference's text points at (title, ``~``, ``.`` and ``()`` dropped)."""
    return written_target(text).lstrip(".").removesuffix("()")


def resolve(ref: Ref, path: Path) -> object:
    """The object ``ref`` names, looked up in the order the module docstring lists."""
    target = target_of(ref.text)
    parts = target.split(".")
    module = importlib.import_module(ref.module)
    scopes: list[object] = []
    owner: object = module
    for name in ref.classes:
        owner = getattr(owner, name, None)
        if owner is None:
            break
        scopes.insert(0, owner)
    scopes.append(module)
    hidden = type_checking_imports(ref.module, path)
    tries = [lambda s=s: walk(s, parts) for s in scopes]
    dots = len(written_target(ref.text)) - len(written_target(ref.text).lstrip("."))
    if dots:
        # ``.errors.X`` is read as a relative import reads it: ``errors`` of this package.
        package = ref.module if path.name == "__init__.py" else ref.module.rpartition(".")[0]
        anchor = ".".join(package.split(".")[: len(package.split(".")) - dots + 1])
        tries.insert(0, lambda: absolute(f"{anchor}.{target}"))
    if parts[0] in hidden:
        tries.append(lambda: absolute(".".join([hidden[parts[0]], *parts[1:]])))
    tries.append(lambda: absolute(f"{ref.module}.{target}"))
    tries.append(lambda: absolute(target))
    reasons = []
    for attempt in tries:
        try:
            return attempt()
        except LookupError as error:
            reasons.append(str(error))
    raise LookupError("; ".join(dict.fromkeys(reasons)))


def kind_error(role: str, found: object) -> str | None:
    """Why ``found`` cannot be what ``role`` promises, or ``None``."""
    if role == "mod" and not isinstance(found, ModuleType):
        return f"is a {type(found).__name__}, not a module"
    if role == "exc" and not (isinstance(found, type) and issubclass(found, BaseException)):
        return "is not an exception class"
    if role == "class" and not isinstance(found, type):
        return f"is a {type(found).__name__}, not a class"
    if role in ("func", "meth") and not (callable(found) or isinstance(found, property)):
        return f"is a {type(found).__name__}, not a function"
    if role in ("attr", "data") and (inspect.isfunction(found) or inspect.ismethod(found)):
        return "is a function: :func: or :meth:"
    return None


def broken(modules: list[tuple[str, Path]]) -> tuple[int, list[str]]:
    """``(references checked, one line per reference that does not resolve)``."""
    checked, failures = 0, []
    for module, path in modules:
        for ref in refs_in(module, path):
            checked += 1
            try:
                found = resolve(ref, path)
            except LookupError as error:
                failures.append(f"{ref}: {error}")
                continue
            why = kind_error(ref.role, found)
            if why:
                failures.append(f"{ref}: {why}")
    return checked, failures


def test_every_reference_in_agent_and_drivers_resolves():
    modules = [*modules_of(REPO / "agent", "agent"), *modules_of(REPO / "drivers", "drivers")]
    checked, failures = broken(modules)
    assert checked > 300, f"only {checked} references read: the reader missed some"
    assert not failures, f"{len(failures)} broken references:\n" + "\n".join(failures)


def test_every_reference_in_bench_resolves(monkeypatch: pytest.MonkeyPatch):
    # bench's scripts import ``support`` as a top-level package (run from bench/).
    monkeypatch.syspath_prepend(str(BENCH))
    for name in [n for n in sys.modules if n == "support" or n.startswith("support.")]:
        monkeypatch.delitem(sys.modules, name)
    checked, failures = broken(list(modules_of(BENCH, "")))
    assert checked, "no reference read in bench/: the reader missed them"
    assert not failures, f"{len(failures)} broken references:\n" + "\n".join(failures)


def test_a_short_name_resolves_on_the_class_then_the_module_and_a_wrong_one_does_not():
    path = REPO / "agent" / "audit" / "audit.py"
    in_class = Ref(path, 1, "meth", "begin", "agent.audit.audit", ("AllocationAudit",))
    assert resolve(in_class, path).__qualname__ == "AllocationAudit.begin"
    dotted = Ref(path, 1, "meth", "AllocationAudit.begin", "agent.audit.audit", ())
    assert resolve(dotted, path) is resolve(in_class, path)
    with pytest.raises(LookupError):
        resolve(Ref(path, 1, "meth", "begin", "agent.audit.audit", ()), path)
    with pytest.raises(LookupError):
        resolve(Ref(path, 1, "meth", "AllocationAudit.no_such", "agent.audit.audit", ()), path)


def test_absolute_relative_titled_and_outside_targets_resolve():
    from agent.placement import errors
    from agent.placement.client import PlacementClient

    path = REPO / "agent" / "placement" / "client.py"

    def found(role: str, text: str) -> object:
        return resolve(Ref(path, 1, role, text, "agent.placement.client", ()), path)

    conflict = errors.GenerationConflict
    assert found("class", ".errors.GenerationConflict") is conflict
    assert found("exc", "~agent.placement.errors.GenerationConflict") is conflict
    assert found("class", "a conflict <agent.placement.errors.GenerationConflict>") is conflict
    assert found("class", "a conflict <.errors.GenerationConflict>") is conflict
    assert found("meth", "PlacementClient.limit_in_flight()") is (PlacementClient.limit_in_flight)
    assert found("class", "keystoneauth1.session.Session").__name__ == "Session"
    assert found("mod", "oslo_config.cfg").__name__ == "oslo_config.cfg"
    assert isinstance(found("attr", "PlacementClient.observers"), Attribute)
    with pytest.raises(LookupError):
        found("class", "keystoneauth1.session.NoSuchSession")
    assert kind_error("mod", found("mod", ".errors")) is None
    assert kind_error("mod", conflict) is not None
    assert kind_error("exc", PlacementClient) is not None
    assert kind_error("class", found("mod", ".errors")) is not None
    assert kind_error("attr", found("meth", "PlacementClient.limit_in_flight")) is not None
    assert kind_error("meth", found("attr", "PlacementClient.observers")) is not None


def test_broken_references_are_reported_with_file_line_and_text(tmp_path: Path):
    path = tmp_path / "audit.py"
    path.write_text(
        '''"""Made by :meth:`AllocationAudit.begin`; raises\n:class:`NoSuchError`."""\n'''
        "class AllocationAudit:\n"
        '''    """See :meth:`begin` and :func:`agent.tracker.\n    audit.gone`."""\n'''
    )
    checked, failures = broken([("agent.audit.audit", path)])
    assert checked == 4
    assert [f.split(": ", 2)[:2] for f in failures] == [
        [f"{path}:2", ":class:`NoSuchError`"],
        [f"{path}:4", ":func:`agent.tracker. audit.gone`"],
    ]


def test_a_name_imported_only_for_type_checking_resolves_through_that_import():
    from agent.placement.report import ReportClient

    path = REPO / "agent" / "tracker" / "reshape.py"
    assert type_checking_imports("agent.tracker.reshape", path)["ReportClient"] == (
        "agent.placement.report.ReportClient"
    )
    ref = Ref(path, 1, "class", "ReportClient", "agent.tracker.reshape", ())
    assert resolve(ref, path) is ReportClient
