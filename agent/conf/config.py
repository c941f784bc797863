"""Configuration: oslo.config options in the INI style of every OpenStack service.

The options are defined by the modules of
:data:`agent.conf.catalog.OPTION_MODULES` (the agent's own in
:mod:`agent.conf.options`). Every option is registered on a
fresh :class:`oslo_config.cfg.ConfigOpts` by :func:`new_conf`; :func:`load`
parses files and checks every value at once, so a bad value stops the agent
at start with the option's name instead of failing later, mid-cycle.
:func:`list_sample_opts` feeds ``oslo-config-generator``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import os_traits
from oslo_config import cfg

from agent.conf import logs, nova_conf
from agent.conf.catalog import list_opts
from agent.conf.provider_config import load_provider_configs
from agent.model.exceptions import ConfigError
from agent.model.names import is_standard_resource_class


def list_sample_opts() -> list[tuple[str, list[cfg.Opt]]]:
    """Every option (:func:`agent.conf.catalog.list_opts`) and the password plugin's, for samples.

    keystoneauth registers a plugin's options (``auth_url``, ``username``,
    ``password`` ...) only when the plugin is loaded, and ``auth_url`` is
    required there; registering them up front would make every configuration
    without Keystone (the embedded placement) invalid. The generated sample
    still has to show operators the common ``auth_type = password`` block.
    """
    from keystoneauth1 import loading as ks_loading

    out = []
    for group, opts in list_opts():
        if group == "placement":
            seen = {o.dest for o in opts}
            extra = [
                o for o in ks_loading.get_auth_plugin_conf_options("password") if o.dest not in seen
            ]
            opts = [*opts, *extra]
        out.append((group, opts))
    return out


def new_conf() -> cfg.ConfigOpts:
    """A fresh ConfigOpts with every option registered (nothing parsed yet)."""
    conf = cfg.ConfigOpts()
    logs.register_options(conf)
    for group, opts in list_opts():
        conf.register_opts(opts, group=None if group == "DEFAULT" else group)
    return conf


def validate(conf: cfg.ConfigOpts) -> None:
    """Read every option once so a bad value is refused now, by name.

    Raises:
        ConfigError: naming ``[group] option``, the reason, and the fix.
    """
    for group, opts in list_opts():
        section = conf if group == "DEFAULT" else conf[group]
        for opt in opts:
            try:
                getattr(section, opt.dest)
            except (cfg.ConfigFileValueError, ValueError) as exc:
                reason = str(exc).split(" is not valid: ")[-1]
                raise ConfigError(
                    f"[{group}] {opt.name}: invalid value: {reason}; correct it in the "
                    "configuration file"
                ) from None
    for name in ("cpu", "ram", "disk"):
        # A ratio of 0.0 means unset (nova/compute/resource_tracker.py
        # ResourceTracker._copy_resources: "not in (0.0, None)"); an initial
        # ratio has no such meaning.
        opt_name = f"initial_{name}_allocation_ratio"
        value = getattr(conf, opt_name)
        if value <= 0:
            raise ConfigError(
                f"[DEFAULT] {opt_name}: invalid value {value}: an allocation ratio "
                "must be greater than 0"
            )
    resource_class_renames(conf)
    owner_trait(conf)
    auth_plugin(conf)
    load_provider_configs(conf.compute.provider_config_location)
    mdev_addresses(conf)
    mdev_classes(conf)


def owner_trait(conf: cfg.ConfigOpts) -> str:
    """``[compute] owner_trait``, checked: a standard ``OWNER_*`` trait or a ``CUSTOM_`` one.

    Raises:
        ConfigError: naming the option and the accepted values.
    """
    value = conf.compute.owner_trait
    owners = os_traits.get_traits(prefix="OWNER_")
    if value in owners or re.match(r"^CUSTOM_[A-Z0-9_]+$", value or ""):
        return value
    raise ConfigError(
        f"[compute] owner_trait = {value!r} is neither a standard owner trait of os-traits "
        f"({', '.join(sorted(owners))}) nor a CUSTOM_[A-Z0-9_]+ trait"
    )


def auth_plugin(conf: cfg.ConfigOpts) -> str | None:
    """``[placement] auth_type``, checked against the plugins keystoneauth1 can load here.

    keystoneauth1's loader looks a name up through stevedore, which logs ``Could not load
    NAME`` at WARNING for a name no package registers, once per lookup (the agent looks the
    plugin up twice: its options for the secret filter, then the plugin itself). Refused
    here, before either lookup, a bad name is one line.

    Returns:
        The plugin's name, or None when unset (the embedded Placement, or a
        ``[placement] auth_type is not set`` refusal when ``embedded = false``).

    Raises:
        ConfigError: naming the option, the value and the plugins available
            (``keystoneauth1.loading.get_available_plugin_names``: the ``keystoneauth1.plugin``
            entry points whose plugin says it is usable, so one whose library is missing,
            e.g. ``v3kerberos`` without requests-kerberos, is refused too).
    """
    value = conf.placement.auth_type
    if not value:
        return None
    from keystoneauth1 import loading as ks_loading

    names = ks_loading.get_available_plugin_names()
    if value in names:
        return value
    raise ConfigError(
        f"[placement] auth_type = {value!r} is not an auth plugin keystoneauth1 can load here; "
        f"use one of {', '.join(sorted(names))} (a plugin from another package, or one "
        "needing an optional library, needs that package installed)"
    )


def load(
    config_files: Sequence[str] = (),
    overrides: dict[str, dict[str, object]] | None = None,
    config_dirs: Sequence[str] = (),
) -> cfg.ConfigOpts:
    """Parse configuration files, apply overrides, and validate every value.

    Args:
        config_files: INI files, later ones overriding earlier ones.
        config_dirs: directories whose ``*.conf`` files are read after
            ``config_files``, in name order (oslo.config's ``--config-dir``).
        overrides: ``{group: {option: value}}`` set after parsing (command-line
            flags such as ``--driver``); group ``DEFAULT`` for the top level.

    Returns:
        The parsed, validated configuration.

    Raises:
        ConfigError: a file is missing or unreadable, or a value is invalid.
    """
    conf = new_conf()
    try:
        conf(
            args=[],
            project="compute-agent",
            default_config_files=list(config_files),
            default_config_dirs=list(config_dirs),
        )
    except cfg.ConfigFilesNotFoundError as exc:
        raise ConfigError(
            f"configuration file not found or not readable: {', '.join(exc.config_files)}"
        ) from None
    except cfg.ConfigFileParseError as exc:
        raise ConfigError(f"configuration file {exc.config_file}: {exc.msg}") from None
    except cfg.Error as exc:
        raise ConfigError(f"configuration: {exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"configuration file {_undecodable(config_files, config_dirs)}: byte "
            f"{exc.object[exc.start]:#04x} at offset {exc.start} is not UTF-8; save the file "
            "as UTF-8"
        ) from None
    for group, values in (overrides or {}).items():
        for name, value in values.items():
            try:
                conf.set_override(name, value, group=None if group == "DEFAULT" else group)
            except (cfg.NoSuchOptError, ValueError) as exc:
                raise ConfigError(f"[{group}] {name}: {exc}") from None
    nova_conf.register_mdev_groups(conf)
    nova_conf.apply_nova_options(conf)
    validate(conf)
    _check_state_path(conf)

    opts = list_sample_opts()
    opts += [(f"mdev_{t}", nova_conf.mdev_opts()) for t in conf.devices.enabled_mdev_types]
    nova_conf.unknown_options(opts, list(config_files))
    return conf


def _undecodable(config_files: Sequence[str], config_dirs: Sequence[str]) -> str:
    """The first configuration file that is not UTF-8 (oslo.config's error does not say)."""
    paths = [Path(f) for f in config_files]
    for d in config_dirs:
        paths += sorted(Path(d).glob("*.conf")) if Path(d).is_dir() else []
    for path in paths:
        try:
            path.read_bytes().decode("utf-8")
        except UnicodeDecodeError:
            return str(path)
        except OSError:
            continue
    return "(one of " + ", ".join(map(str, paths)) + ")"


def _check_state_path(conf: cfg.ConfigOpts) -> None:
    """``state_path`` must be a directory or not exist yet (it is created on first write).

    Raises:
        ConfigError: it names something else (a file).
    """
    path = Path(conf.state_path)
    if path.exists() and not path.is_dir():
        raise ConfigError(
            f"[DEFAULT] state_path = {path} is not a directory; point it at a directory "
            "(created when missing) or remove the file"
        )


def resource_class_renames(conf: cfg.ConfigOpts) -> dict[str, str]:
    """``[compute] resource_class_renames`` as ``{OLD: NEW}``.

    Rule (reshape-provider-tree.txt, third use case): a driver's custom class
    that joined the standard set moves to the standard name. OLD must be a
    legal ``CUSTOM_`` name; NEW a standard class of os-resource-classes or a
    legal ``CUSTOM_`` name; no OLD twice, no NEW that is also an OLD (no chains).

    Raises:
        ConfigError: naming ``[compute] resource_class_renames`` and the bad entry.
    """
    custom = re.compile(r"^CUSTOM_[A-Z0-9_]+$")
    out: dict[str, str] = {}

    def bad(entry: str, reason: str) -> ConfigError:
        return ConfigError(
            f"[compute] resource_class_renames: invalid entry {entry!r}: {reason}; write "
            "OLD:NEW pairs separated by commas, e.g. CUSTOM_NVME:PCI_DEVICE"
        )

    for entry in conf.compute.resource_class_renames:
        old, sep, new = (part.strip() for part in entry.partition(":"))
        if not sep or not old or not new:
            raise bad(entry, "expected OLD:NEW")
        if not custom.match(old):
            raise bad(entry, f"{old} is not a CUSTOM_ resource class (CUSTOM_[A-Z0-9_]+)")
        if not (is_standard_resource_class(new) or custom.match(new)):
            raise bad(entry, f"{new} is neither a standard resource class nor a CUSTOM_ name")
        if old == new:
            raise bad(entry, "OLD and NEW are the same")
        if old in out:
            raise bad(entry, f"{old} is renamed twice")
        out[old] = new
    chained = sorted(set(out) & set(out.values()))
    if chained:
        raise ConfigError(
            f"[compute] resource_class_renames: {chained[0]} is both renamed and a new name; "
            "give each OLD its final NEW directly"
        )
    return out


def mdev_addresses(conf: cfg.ConfigOpts) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """``[mdev_$(TYPE)] device_addresses`` per enabled type (groups from agent.conf.nova_conf).

    Raises:
        ConfigError: an address is not a PCI address, or is listed for two types
            (nova: InvalidLibvirtMdevConfig "duplicate types for PCI ID").
    """
    from drivers.records import normalize_pci_address

    out, seen = [], {}
    for type_id in conf.devices.enabled_mdev_types:
        addresses = tuple(conf[f"mdev_{type_id}"].device_addresses)
        for address in addresses:
            try:
                key = normalize_pci_address(address)
            except ValueError as exc:
                raise ConfigError(f"[mdev_{type_id}] device_addresses: {exc}") from None
            if key in seen:
                raise ConfigError(
                    f"[mdev_{type_id}] device_addresses: {address} is already listed for "
                    f"type {seen[key]}; a GPU offers one type"
                )
            seen[key] = type_id
        out.append((type_id, addresses))
    return tuple(out)


def mdev_classes(conf: cfg.ConfigOpts) -> tuple[tuple[str, str], ...]:
    """``[mdev_$(TYPE)] mdev_class`` per enabled type, checked like a resource class.

    Raises:
        ConfigError: neither VGPU nor a CUSTOM_ class (nova's rule for mdev_class).
    """
    out = []
    for type_id in conf.devices.enabled_mdev_types:
        rc = conf[f"mdev_{type_id}"].mdev_class
        if rc != "VGPU" and not re.match(r"^CUSTOM_[A-Z0-9_]+$", rc):
            raise ConfigError(
                f"[mdev_{type_id}] mdev_class = {rc!r}: use VGPU or a CUSTOM_[A-Z0-9_]+ class"
            )
        out.append((type_id, rc))
    return tuple(out)


def allocation_ratio(conf: cfg.ConfigOpts, kind: str) -> float | None:
    """The configured ratio for ``kind`` (``cpu``, ``ram`` or ``disk``), or None when unset.

    0.0 counts as unset, as in nova (resource_tracker ``ResourceTracker._copy_resources``).
    """
    value = getattr(conf, f"{kind}_allocation_ratio")
    return None if value in (None, 0.0) else value


def initial_allocation_ratio(conf: cfg.ConfigOpts, kind: str) -> float:
    """The ratio a new inventory of ``kind`` gets when the ratio option is unset."""
    return float(getattr(conf, f"initial_{kind}_allocation_ratio"))
