"""Fixtures for every suite: configuration built without files."""

from __future__ import annotations

from pathlib import Path

import pytest
from oslo_config import cfg

from tests.helpers.conf import make_conf
from tests.helpers.processes import nova_compute_processes


@pytest.fixture
def conf_factory(tmp_path: Path):
    """``conf_factory(**groups)`` -> a loaded configuration (see :func:`make_conf`)."""

    def factory(**groups: dict[str, object]) -> cfg.ConfigOpts:
        return make_conf(tmp_path, **groups)

    return factory


@pytest.fixture
def nova_compute_lock():
    """Held by a test that starts a process named nova-compute, or looks for none
    (:func:`tests.helpers.processes.nova_compute_processes`)."""
    with nova_compute_processes():
        yield
