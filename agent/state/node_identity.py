"""nova-compute's node identity file, ``compute_id``: read and written as nova 34 does.

nova 34 (``nova/virt/node.py``) keeps a libvirt compute node's UUID (its compute node
record's and its resource provider's) in a file named ``compute_id``:
``read_local_node_uuid`` looks in the directory of every configuration file and in
``[DEFAULT] state_path``, and refuses to start when one holds no UUID or two disagree;
``get_local_node_uuid`` generates a UUID when none is found and
``write_local_node_uuid`` creates ``$state_path/compute_id`` exclusively (``open(...,
'x')``: a file that appeared meanwhile makes nova-compute refuse to start, and its next
start reads it).

The agent, run with nova.conf, shares those directories. So that nova-compute and the
agent always name the compute node with one UUID whoever starts first
(docs/deployment.md, "Beside nova-compute"), the agent reads the file by nova's rules
and, when there is none, writes the UUID it gives the compute node the same way before
it creates the provider; when nova wrote one in between, nova's is used.
"""

from __future__ import annotations

import logging
import os
import uuid as uuidlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from agent.model.exceptions import ConfigError

LOG = logging.getLogger(__name__)


class IdentityNotWritten(ConfigError):
    """nova's ``compute_id`` could not be created (permissions, a read-only or full disk)."""


COMPUTE_ID_FILE = "compute_id"
"""nova's file name (``nova/virt/node.py`` ``COMPUTE_ID_FILE``)."""


def locations(config_files: Iterable[str], state_path: Path) -> list[Path]:
    """Where nova looks for ``compute_id``, in its order: each configuration file's
    directory, then ``state_path`` (``read_local_node_uuid``)."""
    out = [Path(os.path.dirname(os.path.abspath(f))) for f in config_files]
    return [*out, state_path]


def read(directories: Iterable[Path]) -> str | None:
    """The UUID nova would read from ``compute_id`` in ``directories``, or None when no
    directory has the file.

    Raises:
        ConfigError: a file holds no UUID, cannot be read, or two files hold different
            UUIDs (nova 34 refuses to start in each case: ``InvalidNodeConfiguration``).
    """
    found: list[tuple[str, Path]] = []
    for directory in directories:
        path = directory / COMPUTE_ID_FILE
        if any(path == p for _, p in found):
            continue
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                content = f.read(40)  # a UUID and some whitespace, as nova reads it
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise ConfigError(f"nova's node identity {path}: {exc.strerror}") from None
        try:
            found.append((str(uuidlib.UUID(content.strip())), path))
        except ValueError:
            raise ConfigError(
                f"nova's node identity {path} holds no UUID ({content.strip()[:40]!r}); "
                "restore nova's compute node UUID there or remove the file"
            ) from None
    if not found:
        return None
    first, where = found[0]
    for other, path in found[1:]:
        if other != first:
            raise ConfigError(
                f"nova's node identity files disagree: {path} holds {other}, {where} holds "
                f"{first}; keep the one of the compute node nova's database and Placement "
                "know and remove the other"
            )
    return first


def write(state_path: Path, node_uuid: str, directories: Iterable[Path]) -> str:
    """Create ``state_path/compute_id`` holding ``node_uuid``, as nova does (exclusively);
    the UUID the file holds afterwards.

    When the file appeared since it was last read (nova-compute wrote it at the same
    moment), nothing is overwritten: the UUID nova wrote is read back and returned.

    Raises:
        IdentityNotWritten: the file cannot be created (permissions, a read-only or full
            file system): a nova-compute started later would create another compute node
            with its own UUID and the same name.
    """
    path = state_path / COMPUTE_ID_FILE
    try:
        state_path.mkdir(parents=True, exist_ok=True)
        with open(path, "x", encoding="utf-8") as f:
            f.write(node_uuid)
    except FileExistsError:
        held = read(directories)
        LOG.info("nova's node identity %s appeared meanwhile: %s", path, held)
        return held or node_uuid
    except OSError as exc:
        raise IdentityNotWritten(
            f"nova's node identity {path} cannot be written ({exc.strerror}), so nova-compute "
            "would name this compute node with another UUID: let the agent write to "
            f"{state_path} ([DEFAULT] state_path, nova's), or start nova-compute once first "
            "(it writes the file)"
        ) from None
    LOG.info("wrote nova's node identity %s to %s", node_uuid, path)
    return node_uuid


def nova_identity(conf: Any) -> dict[str, Any]:
    """:class:`~agent.state.store.StateStore`'s arguments that say where nova's ``compute_id`` is:
    ``config_files`` (oslo.config's ``config_file``: nova looks next to each) and
    ``nova_state_path`` (``[compute_agent] nova_state_path``)."""
    # oslo.config's NoSuchOptError is an AttributeError: a ConfigOpts never called.
    files = tuple(getattr(conf, "config_file", None) or ())
    group = getattr(conf, "compute_agent", None)
    return {"config_files": files, "nova_state_path": getattr(group, "nova_state_path", None)}
