from __future__ import annotations

import pytest

from tests.helpers.sysfs_fixtures import make_conf


@pytest.fixture
def conf_for(tmp_path):
    def build(fixture: str, **groups):
        return make_conf(tmp_path, fixture, **groups)

    return build
