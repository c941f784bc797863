"""nova.conf read as nova reads it: nova's options the agent maps, and those it only accepts.

Rules (nova 34, ``nova/conf/*.py``):

* ``[DEFAULT] compute_driver = libvirt.LibvirtDriver`` selects the libvirt
  driver when ``[compute] driver`` is unset (:data:`COMPUTE_DRIVERS`); a nova
  driver the agent has no counterpart for is refused by name;
* ``[DEFAULT] update_resources_interval`` (nova ``compute.py``: 0 = the
  default periodic interval, negative = never) sets ``update_interval`` when
  it is positive and ``update_interval`` is left at its default; negative is
  warned about (the agent always runs its cycle);
* ``[mdev_$(TYPE)] device_addresses`` / ``mdev_class`` (nova ``devices.py``
  ``register_dynamic_opts``) exist for each ``[devices] enabled_mdev_types``
  type: :func:`register_mdev_groups`;
* an option in a configuration file that is neither the agent's nor nova's
  (``agent/conf/data/nova_options.json``, generated from nova's own option
  modules by agent/conf/data/gen_nova_options.py, provenance inside) is warned about
  once: a typo does not pass silently; nova's own options are accepted
  silently, so nova.conf can be given as it is.
"""

from __future__ import annotations

import functools
import json
import logging
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

from oslo_config import cfg, iniparser

from agent.model.exceptions import ConfigError

LOG = logging.getLogger(__name__)

COMPUTE_DRIVERS = {"libvirt.LibvirtDriver": "libvirt"}
"""nova's ``compute_driver`` -> the agent's ``[compute] driver``."""

NOVA_OPTIONS = Path(__file__).with_name("data") / "nova_options.json"
_MDEV_GROUP = re.compile(r"^mdev_.+$")
_DEFAULT_UPDATE_INTERVAL = 60


@functools.cache
def nova_options() -> tuple[dict[str, frozenset[str]], frozenset[str]]:
    """``({group: option names}, groups where any option is nova's)`` from the data file."""
    data = json.loads(NOVA_OPTIONS.read_text())
    groups = {g: frozenset(names) for g, names in data["groups"].items()}
    return groups, frozenset(data["any_option_groups"])


def is_nova_option(group: str, name: str) -> bool:
    """True when nova (or a library nova loads) defines ``[group] name``."""
    groups, any_option = nova_options()
    if group in any_option or _MDEV_GROUP.match(group):
        return True
    return name in groups.get(group, frozenset())


def mdev_opts() -> list[cfg.Opt]:
    """The options of one ``[mdev_$(TYPE)]`` group (nova/conf/devices.py)."""
    return [
        cfg.ListOpt(
            "device_addresses",
            default=[],
            help="PCI addresses of the physical GPUs that offer this mdev type; a GPU "
            "listed here offers no other type (nova's [mdev_$(TYPE)] device_addresses).",
        ),
        cfg.IntOpt(
            "max_instances",
            min=1,
            help="Most mdevs of this type over all GPUs (nova's [mdev_$(TYPE)] "
            "max_instances); unset: as many as the GPUs can create.",
        ),
        cfg.StrOpt(
            "mdev_class",
            default="VGPU",
            help="Resource class of this type's inventory: VGPU, or a CUSTOM_ class "
            "(nova's [mdev_$(TYPE)] mdev_class).",
        ),
    ]


def register_mdev_groups(conf: cfg.ConfigOpts) -> None:
    """Register ``[mdev_$(TYPE)]`` for each enabled mdev type (idempotent)."""
    for type_id in conf.devices.enabled_mdev_types:
        group = f"mdev_{type_id}"
        if group not in conf:
            conf.register_opts(mdev_opts(), group=group)


def apply_nova_options(conf: cfg.ConfigOpts) -> None:
    """Map ``compute_driver`` and ``update_resources_interval`` onto the agent's options.

    Raises:
        ConfigError: ``compute_driver`` names a nova driver the agent cannot stand in for.
    """
    nova_driver = conf.compute_driver
    if not conf.compute.driver and nova_driver:
        driver = COMPUTE_DRIVERS.get(nova_driver)
        if driver is None:
            raise ConfigError(
                f"[DEFAULT] compute_driver = {nova_driver}: the agent has no driver for it "
                f"(it stands in for {', '.join(COMPUTE_DRIVERS)}); set [compute] driver"
            )
        conf.set_override("driver", driver, group="compute")
    interval = conf.update_resources_interval
    if interval > 0 and conf.update_interval == _DEFAULT_UPDATE_INTERVAL:
        conf.set_override("update_interval", interval)
    elif interval < 0:
        LOG.warning(
            "[DEFAULT] update_resources_interval = %s (nova: never update) is ignored: the "
            "agent runs a cycle every update_interval = %s s",
            interval,
            conf.update_interval,
        )


class _Keys(iniparser.BaseParser):
    """Collects ``(section, key)`` of an INI file as oslo.config parses it."""

    def __init__(self) -> None:
        super().__init__()
        self.section = "DEFAULT"
        self.keys: list[tuple[str, str]] = []
        self.values: dict[tuple[str, str], str] = {}

    def new_section(self, section: str) -> None:
        self.section = section

    def assignment(self, key: str, value: list[str]) -> None:
        self.keys.append((self.section, key))
        self.values[(self.section, key)] = ",".join(value).strip()

    def parse_exc(self, msg: str, lineno: int, line: str | None = None) -> Exception:
        return iniparser.ParseError(msg, lineno, line)


def _known(opts: Iterable[tuple[str, Iterable[cfg.Opt]]]) -> set[tuple[str, str]]:
    """``(group, name)`` of every option of ``opts`` and of its deprecated names."""
    known: set[tuple[str, str]] = set()
    for group, group_opts in opts:
        for opt in group_opts:
            known.add((group, opt.name))
            known.add((group, opt.dest))
            for old in opt.deprecated_opts:
                known.add((old.group or group, old.name or opt.name))
    return known


NOT_READ = {
    ("DEFAULT", "vcpu_pin_set"): "nova's deprecated VCPU set; use [compute] cpu_shared_set",
    ("libvirt", "file_backed_memory"): (
        "nova reports MEMORY_MB as the backing file's size; the agent reports RAM"
    ),
    ("libvirt", "cpu_mode"): (
        "with custom, nova reports the guest CPU model's features as CPU traits; the agent "
        "the host CPU's"
    ),
    ("libvirt", "cpu_models"): "see [libvirt] cpu_mode",
    ("libvirt", "cpu_model_extra_flags"): "see [libvirt] cpu_mode",
}
"""Nova options that change what nova-compute reports to Placement and that the agent does
not read: set in a file, each is warned about once, with what differs."""

_SAME_AS_HOST = {("libvirt", "cpu_mode"): {"", "none", "host-model", "host-passthrough"}}
"""Values of a :data:`NOT_READ` option with which nova reports what the agent reports."""

READ_ONLY_FOR = {("libvirt", "cpu_mode"): "Intel TDX (host-passthrough)"}
""":data:`NOT_READ` options the agent reads for one purpose only (the driver's option)."""

_warned: set[tuple[str, str]] = set()


def _warn_not_read(group: str, name: str, value: str) -> None:
    """Warn once about a :data:`NOT_READ` option set to a value that changes Placement."""
    key = (group, name)
    if key not in NOT_READ or key in _warned or not value:
        return
    if value.lower() in _SAME_AS_HOST.get(key, set()):
        return
    _warned.add(key)
    said = f"read for {READ_ONLY_FOR[key]} only" if key in READ_ONLY_FOR else "not read"
    LOG.warning("[%s] %s is set: %s by the agent (%s)", group, name, said, NOT_READ[key])


def unknown_options(
    opts: Iterable[tuple[str, Iterable[cfg.Opt]]], files: Sequence[str]
) -> list[tuple[str, str]]:
    """``(group, option)`` set in ``files`` that neither ``opts`` (the agent's) nor nova has.

    Each is logged as a warning once per process.
    """
    known = _known(opts)
    out: list[tuple[str, str]] = []
    for path in files:
        parser = _Keys()
        with open(path, encoding="utf-8") as f:
            parser.parse(f)
        for group, name in parser.keys:
            _warn_not_read(group, name, parser.values[(group, name)])
            if (group, name) in known or is_nova_option(group, name):
                continue
            if (group, name) not in out:
                out.append((group, name))
    for group, name in out:
        if (group, name) not in _warned:
            _warned.add((group, name))
            LOG.warning(
                "[%s] %s is neither an option of this agent nor of nova: ignored (a typo?)",
                group,
                name,
            )
    return out
