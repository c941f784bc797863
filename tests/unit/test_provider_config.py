"""Provider config files read as nova 34 reads them: nova's own test data is the judge.

nova's wheel ships the documents its unit tests validate
(``nova/tests/unit/compute/provider_config_data``); each is written to a file
and given to nova's ``get_provider_configs`` and to the agent's
:func:`agent.conf.provider_config.load_provider_configs`: both accept it, or
both refuse it (the agent with one line naming the file).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from nova import exception as nova_exception
from nova.compute import provider_config as nova_provider_config

from agent.conf.provider_config import COMPUTE_NODE, load_provider_configs
from agent.model.exceptions import ConfigError
from agent.model.resources import MAX_INT

DATA = Path(nova_provider_config.__file__).parent.parent / "tests/unit/compute/provider_config_data"


def _cases() -> list[Any]:
    cases: list[Any] = []
    for name, key in (
        ("v1/validation_error_test_data.yaml", "config"),
        ("v1/validation_success_test_data.yaml", "config"),
        ("validate_provider_good_config.yaml", "sample"),
        ("validate_provider_bad_config.yaml", "sample"),
    ):
        for case, body in yaml.safe_load((DATA / name).read_text()).items():
            document = body[key]
            if key == "sample":
                # _validate_provider_config's samples lack the meta the file needs.
                document = {"meta": {"schema_version": "1.0"}, **document}
            cases.append(pytest.param(document, id=f"{name}:{case}"))
    return cases


def _nova_accepts(directory: Path) -> bool:
    try:
        nova_provider_config.get_provider_configs(str(directory))
    except (nova_exception.ProviderConfigException, ValueError):
        return False
    return True


@pytest.mark.parametrize("document", _cases())
def test_same_verdict_as_nova(tmp_path: Path, document: Any) -> None:
    path = tmp_path / "provider.yaml"
    path.write_text(yaml.safe_dump(document))
    expected = _nova_accepts(tmp_path)
    if expected:
        load_provider_configs(str(tmp_path))
    else:
        with pytest.raises(ConfigError) as exc:
            load_provider_configs(str(tmp_path))
        assert str(path) in str(exc.value) and "\n" not in str(exc.value)


def test_nova_example_file(tmp_path: Path) -> None:
    (tmp_path / "example_provider.yaml").write_text((DATA / "v1/example_provider.yaml").read_text())
    (entry,) = load_provider_configs(str(tmp_path))
    assert entry.key == COMPUTE_NODE
    assert entry.traits == {"CUSTOM_TRAIT_ONE", "CUSTOM_TRAIT2"}
    ((rc, inv),) = entry.inventories
    assert rc == "CUSTOM_EXAMPLE_RESOURCE_CLASS"
    assert (inv.total, inv.max_unit, inv.allocation_ratio) == (100, 10, 1.0)


def test_defaults_are_placements(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(
        "meta: {schema_version: '1.0'}\n"
        "providers:\n"
        "  - identification: {name: cn1}\n"
        "    inventories: {additional: [{CUSTOM_LICENSE_WINDOWS: {total: 4}}]}\n"
    )
    (entry,) = load_provider_configs(str(tmp_path))
    ((_, inv),) = entry.inventories
    assert (inv.reserved, inv.min_unit, inv.max_unit, inv.step_size) == (0, 1, MAX_INT, 1)


def test_provider_defined_in_two_files(tmp_path: Path) -> None:
    for name in ("a.yaml", "b.yaml"):
        (tmp_path / name).write_text(
            "meta: {schema_version: '1.0'}\n"
            "providers:\n"
            "  - identification: {uuid: $COMPUTE_NODE}\n"
            "    traits: {additional: [CUSTOM_X]}\n"
        )
    assert not _nova_accepts(tmp_path)
    with pytest.raises(ConfigError, match=r"b\.yaml: provider \$COMPUTE_NODE is already defined"):
        load_provider_configs(str(tmp_path))


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("meta: [", "not valid YAML at line"),
        ("providers: []\n", "schema_version is missing"),
        ("meta: {schema_version: '2.0'}\n", "unsupported schema major version 2"),
        ("meta: {schema_version: '1.0'}\nproviders: [{identification: {}}]\n", "providers.0"),
    ],
)
def test_malformed_file_one_line(tmp_path: Path, text: str, match: str) -> None:
    (tmp_path / "bad.yaml").write_text(text)
    with pytest.raises(ConfigError, match=match) as exc:
        load_provider_configs(str(tmp_path))
    assert str(exc.value).startswith(f"provider config {tmp_path / 'bad.yaml'}: ")


def test_missing_directory_is_none(tmp_path: Path) -> None:
    assert load_provider_configs(str(tmp_path / "absent")) == ()
