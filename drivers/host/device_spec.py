"""``[pci] device_spec``: which PCI devices are offered, and how.

Nova's syntax (nova.conf ``[pci] device_spec``, formerly
``passthrough_whitelist``): each value is a JSON object, or a JSON list of
objects, with these keys:

* ``vendor_id``, ``product_id``: hex ids (up to 4 digits) or ``*``;
* ``address``: ``[[[[domain]:]bus]:][slot][.[function]]`` where any field may
  be ``*`` or empty (any), e.g. ``0000:3b:00.*`` or ``:3b:00.``; or an
  object ``{"domain", "bus", "slot", "function"}`` of regular expressions;
* ``devname``: a network interface name (not with ``address``);
* ``physical_network``: the neutron physnet of an SR-IOV NIC;
* ``resource_class``, ``traits`` (a comma-separated string or a list): what
  a whole device is reported as in Placement;
* ``trusted``, ``remote_managed``, ``managed``, ``live_migratable``,
  ``one_time_use``: ``"true"``/``"false"`` tags nova knows.

A device is offered when a spec matches it; the first matching spec gives
its physnet, resource class and traits. Unknown keys are refused (nova turns
them into tags silently, so a typo such as ``vendorid`` would offer every
device).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from drivers.errors import ConfigError
from drivers.host.pci import PciFunction

_ID_RE = re.compile(r"^(\*|[0-9a-fA-F]{1,4})$")
_BOOL_TAGS = ("trusted", "remote_managed", "managed", "live_migratable", "one_time_use")
_KNOWN = frozenset(
    {
        "vendor_id",
        "product_id",
        "address",
        "devname",
        "physical_network",
        "resource_class",
        "traits",
        *_BOOL_TAGS,
    }
)
_FIELD_MAX = {"domain": 0xFFFF, "bus": 0xFF, "slot": 0x1F, "function": 0x7}


@dataclass(frozen=True, slots=True)
class AddressPattern:
    """An address pattern: one regular expression per address field.

    Attributes:
        domain, bus, slot, function: patterns matched (full match) against
            the lower-case hex fields of a canonical address.
        single: the canonical address when every field is a plain hex number
            (nova's ``PciAddressSpec.is_single_address``), else None. When it
            names an SR-IOV PF, nova matches the PF's VFs too
            (``WhitelistPciAddress.match`` by the VF's parent address).
    """

    domain: re.Pattern[str]
    bus: re.Pattern[str]
    slot: re.Pattern[str]
    function: re.Pattern[str]
    single: str | None = None

    def matches(self, address: str) -> bool:
        """True when canonical ``address`` (``dddd:bb:ss.f``) fits every field."""
        domain, bus, rest = address.split(":")
        slot, function = rest.split(".")
        return bool(
            self.domain.fullmatch(domain)
            and self.bus.fullmatch(bus)
            and self.slot.fullmatch(slot)
            and self.function.fullmatch(function)
        )


@dataclass(frozen=True, slots=True)
class DeviceSpec:
    """One parsed device spec.

    Attributes:
        text: the JSON object as written (for messages).
        vendor_id, product_id: 4 hex digits, or None for any.
        address: :class:`AddressPattern`, or None for any.
        devname: interface name, or None.
        physical_network: physnet, or None.
        resource_class: Placement resource class, or None (the default).
        traits: Placement trait names.
        trusted: the ``trusted`` tag.
        remote_managed: the ``remote_managed`` tag (VFs of a SmartNIC/DPU whose
            ports neutron manages remotely): such a spec matches only a device
            with a VPD card serial number (:meth:`matches`).
        live_migratable: the ``live_migratable`` tag.
        one_time_use: the ``one_time_use`` tag (nova reserves such a device
            after its first user; needs ``[pci] report_in_placement``).
        tagged: the ``true``/``false`` tags the spec gives at all, whatever their
            value (nova refuses ``live_migratable`` on an old libvirt even when
            it is "false": ``LibvirtDriver._check_pci_whitelist``).
    """

    text: str
    vendor_id: str | None = None
    product_id: str | None = None
    address: AddressPattern | None = None
    devname: str | None = None
    physical_network: str | None = None
    resource_class: str | None = None
    traits: frozenset[str] = frozenset()
    trusted: bool = False
    remote_managed: bool = False
    live_migratable: bool = False
    one_time_use: bool = False
    tagged: frozenset[str] = frozenset()

    def matches(
        self, fn: PciFunction, netdevs: Iterable[str] = (), card_serial: str | None = None
    ) -> bool:
        """True when ``fn`` fits every field the spec gives, as nova's ``PciDeviceSpec.match``.

        Args:
            fn: the PCI function.
            netdevs: interface names ``devname`` is compared with (a VF is
                matched by its PF's interface, as nova does); default: the
                function's own.
            card_serial: the card serial number to use when ``fn`` has none in
                its own VPD: a VF's PF's (nova/virt/libvirt/host.py
                ``_get_vpd_details`` falls back to the parent PF's VPD).

        A ``remote_managed`` spec does not match a device without a card serial
        number (nova/pci/devspec.py ``_ensure_remote_managed_dev_vpd_serial``): the
        network backend finds the card by it. An address naming one PF matches its
        VFs too (:attr:`AddressPattern.single`).
        """
        if self.vendor_id is not None and fn.vendor_id != self.vendor_id:
            return False
        if self.product_id is not None and fn.product_id != self.product_id:
            return False
        if self.address is not None and not (
            self.address.matches(fn.address)
            or (fn.physfn is not None and fn.physfn == self.address.single)
        ):
            return False
        if self.remote_managed and not (fn.vpd_serial or card_serial):
            return False
        return self.devname is None or self.devname in (tuple(netdevs) or fn.netdevs)

    def wants_serial(
        self, fn: PciFunction, netdevs: Iterable[str] = (), card_serial: str | None = None
    ) -> bool:
        """True when the spec would match ``fn`` but for a missing card serial number."""
        if not self.remote_managed or fn.vpd_serial or card_serial:
            return False
        return replace(self, remote_managed=False).matches(fn, netdevs)


def _any() -> re.Pattern[str]:
    return re.compile(r"[0-9a-f]+")


def _hex_field(name: str, value: str) -> re.Pattern[str]:
    value = value.strip()
    if value in ("", "*"):
        return _any()
    try:
        number = int(value, 16)
    except ValueError:
        raise ValueError(f"address {name} {value!r} is not hex or '*'") from None
    if number > _FIELD_MAX[name]:
        raise ValueError(f"address {name} {value!r} is larger than {_FIELD_MAX[name]:x}")
    width = {"domain": 4, "bus": 2, "slot": 2, "function": 1}[name]
    return re.compile(re.escape(f"{number:0{width}x}"))


def parse_address(value: object) -> AddressPattern:
    """An ``address`` value: the string form with wildcards or the regex object form.

    Raises:
        ValueError: malformed, out of range, or a bad regular expression.
    """
    if isinstance(value, dict):
        unknown = set(value) - set(_FIELD_MAX)
        if unknown:
            raise ValueError(f"address has unknown keys {sorted(unknown)}")
        fields = {}
        for name in _FIELD_MAX:
            raw = value.get(name, "*")
            if not isinstance(raw, str):
                raise ValueError(f"address {name} must be a string")
            try:
                fields[name] = _any() if raw in ("", "*") else re.compile(raw.lower())
            except re.error as exc:
                reason = f"address {name} {raw!r} is not a regular expression: {exc}"
                raise ValueError(reason) from None
        raws = {name: value.get(name, "*") for name in _FIELD_MAX}
        return AddressPattern(**fields, single=_single(raws))  # type: ignore[arg-type]
    if not isinstance(value, str):
        raise ValueError("address must be a string or an object")
    left, dot, function = value.partition(".")
    parts = left.split(":")
    if len(parts) > 3:
        raise ValueError(f"address {value!r} has too many ':'")
    parts = ["*"] * (3 - len(parts)) + parts
    fields = (*parts, function if dot else "*")
    return AddressPattern(
        domain=_hex_field("domain", fields[0]),
        bus=_hex_field("bus", fields[1]),
        slot=_hex_field("slot", fields[2]),
        function=_hex_field("function", fields[3]),
        single=_single(dict(zip(_FIELD_MAX, fields, strict=True))),
    )


def _single(fields: dict[str, str]) -> str | None:
    """The canonical address when every field is plain hex (nova's ``is_single_address``)."""
    values = {k: v.strip() for k, v in fields.items()}
    if not all(v and all(c in "0123456789abcdefABCDEF" for c in v) for v in values.values()):
        return None
    numbers = {k: int(v, 16) for k, v in values.items()}
    if any(numbers[k] > _FIELD_MAX[k] for k in numbers):
        return None
    n = numbers
    return f"{n['domain']:04x}:{n['bus']:02x}:{n['slot']:02x}.{n['function']:x}"


def _string(obj: dict[str, object], key: str) -> str | None:
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{key} must be a non-empty string")
    return value.strip()


def _bool_tag(obj: dict[str, object], key: str) -> bool:
    value = obj.get(key, "false")
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false", "yes", "no", "1", "0"):
        return value.lower() in ("true", "yes", "1")
    raise ValueError(f"{key} must be true or false")


def _one(obj: object, text: str) -> DeviceSpec:
    if not isinstance(obj, dict):
        raise ValueError("each spec must be a JSON object")
    unknown = sorted(set(obj) - _KNOWN)
    if unknown:
        raise ValueError(f"unknown key(s) {unknown}; known keys: {sorted(_KNOWN)}")
    ids = {}
    for key in ("vendor_id", "product_id"):
        raw = _string(obj, key)
        if raw is not None and not _ID_RE.match(raw):
            raise ValueError(f"{key} {raw!r} is not up to 4 hex digits or '*'")
        ids[key] = None if raw in (None, "*") else f"{int(raw, 16):04x}"  # type: ignore[arg-type]
    if "address" in obj and "devname" in obj:
        raise ValueError("address and devname cannot both be given")
    traits_raw = obj.get("traits", [])
    if isinstance(traits_raw, str):
        traits_raw = [t for t in (s.strip() for s in traits_raw.split(",")) if t]
    if not isinstance(traits_raw, list) or not all(isinstance(t, str) for t in traits_raw):
        raise ValueError("traits must be a comma-separated string or a list of strings")
    rc = _string(obj, "resource_class")
    for key in _BOOL_TAGS:
        _bool_tag(obj, key)
    return DeviceSpec(
        text=text,
        vendor_id=ids["vendor_id"],
        product_id=ids["product_id"],
        address=parse_address(obj["address"]) if "address" in obj else None,
        devname=_string(obj, "devname"),
        physical_network=_string(obj, "physical_network"),
        # Names as the operator wrote them: agent/shape/pci.py makes them Placement's.
        resource_class=rc or None,
        traits=frozenset(traits_raw),
        trusted=_bool_tag(obj, "trusted"),
        remote_managed=_bool_tag(obj, "remote_managed"),
        live_migratable=_bool_tag(obj, "live_migratable"),
        one_time_use=_bool_tag(obj, "one_time_use"),
        tagged=frozenset(key for key in _BOOL_TAGS if key in obj),
    )


def parse_device_spec(text: str) -> tuple[DeviceSpec, ...]:
    """One ``device_spec`` value: a JSON object or a list of them.

    Raises:
        ConfigError: ``[pci] device_spec <text>: <reason>``.
    """
    try:
        try:
            document = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"not valid JSON: {exc.msg} at column {exc.colno}") from None
        items = document if isinstance(document, list) else [document]
        if not items:
            raise ValueError("an empty list offers nothing")
        return tuple(_one(item, json.dumps(item, sort_keys=True)) for item in items)
    except ValueError as exc:
        raise ConfigError(f"[pci] device_spec {text}: {exc}") from None


def parse_device_specs(values: Sequence[str]) -> tuple[DeviceSpec, ...]:
    """Every ``[pci] device_spec`` value, in order.

    Raises:
        ConfigError: the first value that does not parse, with its text and reason.
    """
    return tuple(spec for text in values for spec in parse_device_spec(text))


def first_match(
    specs: Sequence[DeviceSpec],
    fn: PciFunction,
    netdevs: Iterable[str] = (),
    card_serial: str | None = None,
) -> DeviceSpec | None:
    """The first spec matching ``fn`` (see :meth:`DeviceSpec.matches`), or None.

    As nova's ``Whitelist.get_devspec``: a remote-managed spec that a device without
    a card serial number does not match leaves the next specs to try.
    """
    netdevs = tuple(netdevs)
    for spec in specs:
        if spec.matches(fn, netdevs, card_serial):
            return spec
    return None
