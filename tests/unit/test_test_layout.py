"""The tests' own layout (issue #12): test modules share code only through tests/helpers.

A test module that imports another test module, or a conftest, ties two
suites together (and pytest may collect the imported tests twice); a helper
kept beside one suite and imported from another is a shared helper in
hiding. So, for every ``tests/**/test_*.py``, each module it imports from
the tests tree must be a helper of ``tests/helpers/`` or a non-test module of
its own folder (e.g. the corpus builder beside tests/corpus/test_corpus.py).
And a conftest.py holds fixtures (and pytest hooks) only: its helpers belong
in tests/helpers too.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.helpers.paths import REPO

TESTS = REPO / "tests"


def module_files(root: Path) -> dict[str, Path]:
    """``{dotted name: file}`` of every Python module under ``root``, named from its parent
    (``tests.helpers.hosts``); the test data under fixtures/ is not code of the suite."""
    out = {}
    for path in root.rglob("*.py"):
        relative = path.relative_to(root.parent).with_suffix("")
        if "fixtures" in relative.parts:
            continue
        parts = relative.parts[:-1] if relative.name == "__init__" else relative.parts
        out[".".join(parts)] = path
    return out


def imported_files(path: Path, modules: dict[str, Path]) -> list[tuple[int, Path]]:
    """``(line, file)`` of each module of the tests tree that ``path`` imports, at any depth
    of the module (imports inside functions count); a bare name is a module of ``path``'s own
    folder when one is there (pytest puts a folder without ``__init__.py`` on sys.path)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            # ``from tests.corpus import build`` imports the module tests.corpus.build
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        for name in names:
            sibling = path.parent / f"{name}.py"
            if name in modules:
                found.append((node.lineno, modules[name]))
            elif "." not in name and sibling.exists():
                found.append((node.lineno, sibling))
    return found


def layout_violations(root: Path) -> list[str]:
    """Each import of a test module of ``root`` (a tests tree) that breaks the rule above."""
    modules = module_files(root)
    helpers = root / "helpers"
    out = []
    for path in sorted(root.rglob("test_*.py")):
        if "fixtures" in path.relative_to(root).parts:
            continue
        for line, target in imported_files(path, modules):
            if target.name == "__init__.py":
                continue  # a package itself (``from tests import helpers``): its modules count
            where = f"{path.relative_to(root.parent)}:{line}"
            what = target.relative_to(root.parent)
            if target.name.startswith("test_") or target.name == "conftest.py":
                out.append(f"{where} imports {what}: a test module or conftest")
            elif not (target.is_relative_to(helpers) or target.parent == path.parent):
                out.append(f"{where} imports {what}: a shared helper outside tests/helpers")
    return out


def conftest_violations(root: Path) -> list[str]:
    """Each top-level class or function of a ``root/**/conftest.py`` that is not a fixture
    (``@pytest.fixture``) or a pytest hook (``pytest_*``)."""
    out = []
    for path in sorted(root.rglob("conftest.py")):
        for node in ast.parse(path.read_text(), str(path)).body:
            if isinstance(node, ast.ClassDef):
                out.append(f"{path.relative_to(root.parent)}:{node.lineno} class {node.name}")
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                fixture = any("fixture" in ast.unparse(d) for d in node.decorator_list)
                if not fixture and not node.name.startswith("pytest_"):
                    where = f"{path.relative_to(root.parent)}:{node.lineno}"
                    out.append(f"{where} def {node.name}")
    return out


def test_test_modules_share_code_only_through_tests_helpers():
    assert layout_violations(TESTS) == []


def test_conftest_files_hold_fixtures_only():
    assert conftest_violations(TESTS) == []


def test_the_rule_catches_each_kind_of_import(tmp_path):
    """The checks above on a small tree that breaks the rule in every way they know."""
    root = tmp_path / "tests"
    files = {
        "__init__.py": "",
        "conftest.py": "import pytest\n\nHEADERS = {}\n\ndef free_port():\n    return 0\n",
        "helpers/__init__.py": "",
        "helpers/hosts.py": "",
        "functional/__init__.py": "",
        "functional/conftest.py": "",
        "functional/test_sync.py": "def unique():\n    pass\n",
        "functional/test_ok.py": "from tests.helpers.hosts import x\nfrom tests import helpers\n",
        "functional/test_bad.py": (
            "from tests.functional.test_sync import unique\n"
            "from tests.functional import conftest\n"
            "def test_x():\n    from tests.unit.libvirt.libvirt_helpers import driver\n"
        ),
        "unit/libvirt/libvirt_helpers.py": "",
        "unit/libvirt/test_own_folder.py": "from libvirt_helpers import driver\n",
        "unit/test_sibling.py": "import test_other\n",
        "unit/test_other.py": "",
        "fixtures/nova/test_data.py": "from tests.functional.test_sync import unique\n",
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    assert layout_violations(root) == [
        "tests/functional/test_bad.py:1 imports tests/functional/test_sync.py: "
        "a test module or conftest",
        "tests/functional/test_bad.py:2 imports tests/functional/conftest.py: "
        "a test module or conftest",
        "tests/functional/test_bad.py:4 imports tests/unit/libvirt/libvirt_helpers.py: "
        "a shared helper outside tests/helpers",
        "tests/unit/test_sibling.py:1 imports tests/unit/test_other.py: a test module or conftest",
    ]
    assert conftest_violations(root) == ["tests/conftest.py:5 def free_port"]
