"""Fixtures for every suite: configuration built without files."""

from __future__ import annotations

from pathlib import Path

import pytest
from oslo_config import cfg

from tests.helpers.conf import make_conf


@pytest.fixture
def conf_factory(tmp_path: Path):
    """``conf_factory(**groups)`` -> a loaded configuration (see :func:`make_conf`)."""

    def factory(**groups: dict[str, object]) -> cfg.ConfigOpts:
        return make_conf(tmp_path, **groups)

    return factory
