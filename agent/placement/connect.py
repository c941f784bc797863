"""Open the Placement the configuration names: embedded or remote."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from oslo_config import cfg

from agent.placement.client import PlacementClient
from agent.placement.embedded import EmbeddedPlacement
from agent.placement.options import is_embedded
from agent.placement.session import client_from_conf


@contextmanager
def placement_client(conf: cfg.ConfigOpts) -> Iterator[PlacementClient]:
    """A client for the configured Placement, for the duration of the ``with`` block.

    Embedded (``[placement] embedded``, or no ``auth_type``): the
    application runs in-process on ``state_path/placement.sqlite``.

    Raises:
        ConfigError: remote Placement with incomplete ``[placement]`` options.
    """
    if is_embedded(conf):
        with EmbeddedPlacement(conf.state_path) as placement:
            yield placement.client(conf.placement.request_retries, conf.placement.retry_max_wait)
    else:
        yield client_from_conf(conf)
