"""Configuration of one ``snekbed node`` process: addresses, peer URIs, identity, timers.

Everything the command line (or a test) gives the node is checked here, once,
before anything starts. Bad input raises :class:`ConfigError` (a ``ValueError``)
whose message names the option and the value::

    ConfigError: --peer 'tcp://10.0.0.2:7000?class=wifi': unknown link class 'wifi' (known: bluetooth, ...)

Peer URIs (``--peer``, ``POST /peers``)::

    tcp://HOST:PORT[?class=CLASS][&shape=1][&delay_ms=..][&jitter_ms=..][&loss_pct=..][&rate_mbit=..][&queue_limit_pkts=..]
    bluetooth://AA:BB:CC:DD:EE:FF/PSM[?...the same parameters; class defaults to bluetooth]

A Bluetooth URI names the remote adapter's address and the L2CAP PSM (decimal
or 0x hex; odd, with the lowest bit of its upper byte clear, as the Bluetooth
core specification requires). ``--listen-bluetooth bluetooth://ADDR/PSM``
takes the same form, with ``00:00:00:00:00:00`` for any local adapter.

``class`` is a link class of ``contract/classes.yaml`` (remote, multicast, lan,
bonjour, bluetooth, pipe, custom; default remote). It sets the peer's link type
(PROTOCOL.md §3.4), which next-hop refinement uses. Shaping in userspace is off
unless asked for: any of the shape parameters shapes the link with exactly
those values (what the ``kernel-partial`` backend leaves to the node);
``shape=1`` (or ``--userspace-shaping``) applies the class's whole shape, with
explicit parameters overriding single fields.
"""

from __future__ import annotations

import ipaddress
import os
import secrets
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

from contract.checks import Invalid
from contract.links import LINK_TYPE_NAMES, LinkClassError, LinkShape, resolve_class
from node.core.adversary import parse_drop_spec
from node.core.attacks import STRATEGY_NAMES, make_strategy, parse_strategy_spec
from node.core.crypto import Identity
from node.core.recorder import DEFAULT_MAX_ENTRIES, DEFAULT_WINDOW_S
from node.core.types import MAX_FRAME_LEN, LinkType
from node.core.variants import VariantError, VariantSpec

__all__ = [
    "SHAPE_PARAMS",
    "ConfigError",
    "BluetoothListen",
    "HostPort",
    "InboundRule",
    "LinkSpec",
    "NodeConfig",
    "PeerSpec",
    "Timeouts",
    "link_spec",
    "load_identity",
    "parse_bluetooth_uri",
    "parse_hostport",
    "parse_inbound",
    "parse_listen",
    "parse_listen_bluetooth",
    "parse_peer_uri",
]

#: Query parameters of a peer URI that shape the link (LinkShape fields).
SHAPE_PARAMS: tuple[str, ...] = ("delay_ms", "jitter_ms", "loss_pct", "rate_mbit", "queue_limit_pkts")
_URI_PARAMS = frozenset({"class", "shape", *SHAPE_PARAMS})


def parse_attack(spec: str) -> tuple[str, dict[str, str]] | None:
    """``--adversary STRATEGY[:NAME=VALUE,...]`` for a strategy of node.core.attacks (greyhole, sybil,
    root_takeover, bootstrap_flood, announcement_flood, replay, forge, none; docs/attacks.md): (strategy, params),
    checked. None for a drop spec (``drop:...`` or the older ``KIND=PERCENT...``). Raises ConfigError."""
    head = spec.partition(":")[0].strip()
    if head == "drop" or (head not in STRATEGY_NAMES and "=" in head):
        return None
    try:
        name, params = parse_strategy_spec(spec)
        make_strategy(name, params)
    except ValueError as exc:
        raise ConfigError("--adversary", spec, str(exc)) from None
    return name, params


def parse_adversary(spec: str) -> tuple[dict[str, float], bytes | None]:
    """``--adversary [drop:]KIND=PERCENT[,KIND=PERCENT...][@PEERKEYHEX]`` (kinds: all, keepalive, tree_announcement,
    bootstrap, wakeup_broadcast, traffic). Raises ConfigError naming the problem."""
    if spec.partition(":")[0].strip() == "drop":
        spec = spec.partition(":")[2]
    try:
        rates, peer = parse_drop_spec(spec)
    except ValueError as exc:
        raise ConfigError("--adversary", spec, str(exc)) from None
    return rates, bytes.fromhex(peer) if peer is not None else None


def parse_variant(
    name: str, knobs: Iterable[str] = (), *, hop_limiting: bool | None = None, broadcasts: bool | None = None
) -> VariantSpec:
    """``--variant NAME`` with ``--knob key=value`` (repeatable); the older ``--hop-limiting`` and
    ``--no-broadcasts`` flags set the same knobs. Raises ConfigError naming the option."""
    try:
        spec = VariantSpec.parse(name)
    except VariantError as exc:
        raise ConfigError("--variant", name, str(exc)) from None
    if spec.implementation != "snekbed":
        raise ConfigError("--variant", name, f"{spec.name} is the Pinecone reference implementation, which "
                          "`snekbed node` does not run: run the reference node (node/pinecone, docs/interop.md), "
                          f"or give a topology node `variant: {spec.name}` on the Docker or swarm backend")
    extra: dict[str, object] = {}
    if hop_limiting:
        extra["hop_limiting"] = True
    if broadcasts is False:
        extra["wakeup_broadcasts"] = False
    try:
        return spec.with_knobs(list(knobs)).with_knobs(extra)
    except VariantError as exc:
        raise ConfigError("--knob", ",".join(knobs), str(exc)) from None


class ConfigError(ValueError):
    """A configuration value is wrong. ``what`` names the option, ``value`` is what was given."""

    def __init__(self, what: str, value: object, reason: str) -> None:
        self.what, self.value, self.reason = what, value, reason
        super().__init__(f"{what} {value!r}: {reason}")


@dataclass(frozen=True, slots=True)
class HostPort:
    """A TCP address. ``port`` 0 means "any free port" for listening sockets."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def parse_hostport(text: str, what: str = "address", *, allow_zero: bool = True) -> HostPort:
    """``HOST:PORT`` or ``[V6]:PORT``. Raises ConfigError naming ``what`` and the real problem."""
    if not isinstance(text, str) or not text:
        raise ConfigError(what, text, "expected HOST:PORT")
    if "://" in text:
        scheme = text.split("://", 1)[0]
        raise ConfigError(what, text, f"expected HOST:PORT without a scheme (remove {scheme + '://'!r})")
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep:
            raise ConfigError(what, text, "no closing ']': expected [IPV6]:PORT")
        if not rest.startswith(":"):
            raise ConfigError(what, text, "no :PORT after ']': expected [IPV6]:PORT")
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ConfigError(what, text, f"{host!r} in brackets is not an IPv6 address") from None
        port_s = rest[1:]
    else:
        host, sep, port_s = text.rpartition(":")
        if not sep:
            raise ConfigError(what, text, "no port: expected HOST:PORT")
        if not host:
            raise ConfigError(what, text, "no host before ':': expected HOST:PORT (0.0.0.0 for every address)")
        if ":" in host:
            raise ConfigError(what, text, "write IPv6 addresses as [ADDR]:PORT")
    if not port_s:
        raise ConfigError(what, text, "no port after ':': expected HOST:PORT")
    if not port_s.isdigit():
        raise ConfigError(what, text, f"port {port_s!r} is not a number")
    port = int(port_s)
    if not (0 if allow_zero else 1) <= port <= 65535:
        raise ConfigError(what, text, f"port {port} outside {0 if allow_zero else 1}..65535")
    return HostPort(host, port)


def parse_listen(text: str, what: str = "--listen") -> HostPort:
    """``tcp://HOST:PORT`` (as ``--peer`` writes it) or ``HOST:PORT`` / ``[V6]:PORT``; port 0 = any.

    Raises ConfigError naming ``what``, the value given and the real problem.
    """
    if not isinstance(text, str) or "://" not in text:
        return parse_hostport(text, what)
    scheme, _, rest = text.partition("://")
    if scheme.lower() == "bluetooth":
        raise ConfigError(what, text, "Bluetooth has its own listener: use --listen-bluetooth bluetooth://ADDR/PSM")
    if scheme.lower() != "tcp":
        raise ConfigError(what, text, f"scheme {scheme!r} is not supported (use tcp://HOST:PORT or HOST:PORT)")
    for mark, part, hint in (
        ("?", "query", " (the class of accepted links is --listen-class / --inbound)"),
        ("#", "fragment", ""),
        ("/", "path", ""),
    ):
        if mark in rest:
            raise ConfigError(what, text, f"a listen address takes no {part} ({mark!r}){hint}: expected tcp://HOST:PORT")
    try:
        return parse_hostport(rest, what)
    except ConfigError as exc:
        raise ConfigError(what, text, exc.reason.replace("expected ", "expected tcp://")) from None


@dataclass(frozen=True, slots=True)
class LinkSpec:
    """How one peering is treated locally: class name, link type, optional userspace shape."""

    link_class: str = "remote"
    link_type: int = int(LinkType.REMOTE)
    shape: LinkShape | None = None  # None: no userspace shaping (the hot path stays plain)

    @property
    def type_name(self) -> str:
        return LINK_TYPE_NAMES[self.link_type]


@dataclass(frozen=True, slots=True)
class PeerSpec:
    """A configured peer: where to dial and how to treat the link."""

    uri: str
    host: str  # a Bluetooth address for transport "bluetooth"
    port: int  # the L2CAP PSM for transport "bluetooth"
    link: LinkSpec
    transport: str = "tcp"  # "tcp" or "bluetooth"


@dataclass(frozen=True, slots=True)
class BluetoothListen:
    """``--listen-bluetooth bluetooth://ADDR/PSM``: accept L2CAP peerings on a local adapter (ADDR 00:..:00: any)."""

    uri: str
    address: str
    psm: int
    link: LinkSpec


@dataclass(frozen=True, slots=True)
class InboundRule:
    """``--inbound tcp://IP?class=..`` or ``tcp://NET/PREFIX?class=..``: accepted connections from ``address``
    (one address, or any address of a network: where the dialer's address is not known in advance, as on a
    Docker Swarm overlay whose addresses the swarm allocates) get ``link``."""

    address: str  # an address, or a network written NET/PREFIX
    link: LinkSpec

    def matches(self, address: str) -> bool:
        """Whether a connection from ``address`` falls under this rule."""
        if "/" not in self.address:
            return self.address == address
        try:
            return ipaddress.ip_address(address) in ipaddress.ip_network(self.address)
        except ValueError:
            return False


def _class_name(name: str, what: str, value: str) -> str:
    try:
        return resolve_class(name).name
    except LinkClassError as exc:
        raise ConfigError(what, value, str(exc)) from None


def link_spec(params: dict[str, str], *, what: str, value: str, shape_all: bool = False) -> LinkSpec:
    """A LinkSpec from URI query parameters (see the module doc). Raises ConfigError."""
    unknown = sorted(set(params) - _URI_PARAMS)
    if unknown:
        raise ConfigError(what, value, f"unknown parameter {unknown[0]!r} (known: {', '.join(sorted(_URI_PARAMS))})")
    name = params.get("class", "remote").strip().lower()
    try:
        cls = resolve_class(name)
    except LinkClassError as exc:
        raise ConfigError(what, value, str(exc)) from None
    flag = params.get("shape", "")
    if flag not in ("", "0", "1", "true", "false", "yes", "no"):
        raise ConfigError(what, value, f"shape={flag!r}: expected 1 or 0")
    whole = shape_all or flag in ("1", "true", "yes")
    if flag in ("0", "false", "no"):
        whole = False
    given: dict[str, float | int] = {}
    for key in SHAPE_PARAMS:
        if key in params:
            raw = params[key]
            try:
                given[key] = int(raw) if key == "queue_limit_pkts" else float(raw)
            except ValueError:
                raise ConfigError(what, value, f"{key}={raw!r} is not a number") from None
    shape: LinkShape | None = None
    if whole or given:
        base = cls.shape.model_dump() if whole else {}
        try:
            shape = LinkShape.parse({**base, **given})
        except Invalid as exc:
            err = exc.errors()[0]
            loc = ".".join(str(p) for p in err["loc"]) or "shape"
            raise ConfigError(what, value, f"{loc}: {err['msg']}") from None
        if shape.is_noop:
            shape = None
    return LinkSpec(cls.name, cls.link_type_number, shape)


def _query(uri: str, what: str) -> tuple[object, dict[str, str]]:
    try:
        parts = urlsplit(uri)
        pairs = parse_qsl(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query))
    except ValueError as exc:
        raise ConfigError(what, uri, f"not a URI ({exc})") from None
    params: dict[str, str] = {}
    for k, v in pairs:
        if k in params:
            raise ConfigError(what, uri, f"parameter {k!r} given twice")
        params[k] = v
    return parts, params


_HEX = frozenset("0123456789abcdefABCDEF")


def _bdaddr(text: str, what: str, uri: str, *, allow_any: bool) -> str:
    """``AA:BB:CC:DD:EE:FF`` (either case) -> upper case. Raises ConfigError."""
    octets = text.split(":")
    if len(octets) != 6 or any(len(o) != 2 or not set(o) <= _HEX for o in octets):
        raise ConfigError(what, uri, f"{text!r} is not a Bluetooth address: expected six hex pairs, AA:BB:CC:DD:EE:FF")
    address = text.upper()
    if address == "00:00:00:00:00:00" and not allow_any:
        raise ConfigError(what, uri, "00:00:00:00:00:00 means any local adapter: name the remote adapter's address")
    return address


def _psm(text: str, what: str, uri: str) -> int:
    """An L2CAP PSM, decimal or 0x hex: odd, the lowest bit of its upper byte clear. Raises ConfigError."""
    try:
        psm = int(text, 16) if text.lower().startswith("0x") else int(text, 10)
    except ValueError:
        raise ConfigError(what, uri, f"PSM {text!r} is not a number (decimal or 0x hex)") from None
    if not 1 <= psm <= 0xFFFF:
        raise ConfigError(what, uri, f"PSM {psm} outside 1..65535")
    if psm % 2 == 0 or psm & 0x100:
        raise ConfigError(what, uri, f"PSM {psm} (0x{psm:04x}) is not valid: a PSM is odd and the lowest bit of its "
                                     "upper byte is 0 (e.g. 0x1001 = 4097, 0x0081 = 129)")  # fmt: skip
    return psm


def parse_bluetooth_uri(
    uri: str, *, what: str = "--peer", shape_all: bool = False, allow_any: bool = False
) -> tuple[str, int, LinkSpec]:
    """``bluetooth://AA:BB:CC:DD:EE:FF/PSM[?class=..&..]`` -> (address, PSM, LinkSpec; class bluetooth by default).

    ``allow_any``: 00:00:00:00:00:00 (any local adapter) is accepted, for listening. Raises ConfigError.
    """
    parts, params = _query(uri, what)
    if parts.scheme != "bluetooth":  # type: ignore[attr-defined]
        raise ConfigError(what, uri, "expected bluetooth://AA:BB:CC:DD:EE:FF/PSM")
    if parts.fragment:  # type: ignore[attr-defined]
        raise ConfigError(what, uri, "a Bluetooth URI takes no fragment ('#')")
    netloc, path = parts.netloc, parts.path  # type: ignore[attr-defined]
    if not netloc:
        raise ConfigError(what, uri, "no adapter address: expected bluetooth://AA:BB:CC:DD:EE:FF/PSM")
    address = _bdaddr(netloc, what, uri, allow_any=allow_any)
    psm_s = path[1:] if path.startswith("/") else ""
    if not psm_s:
        raise ConfigError(what, uri, "no PSM: expected bluetooth://AA:BB:CC:DD:EE:FF/PSM (e.g. /4097)")
    if "/" in psm_s:
        raise ConfigError(what, uri, "expected bluetooth://AA:BB:CC:DD:EE:FF/PSM with nothing after the PSM but ?query")
    psm = _psm(psm_s, what, uri)
    return address, psm, link_spec({"class": "bluetooth", **params}, what=what, value=uri, shape_all=shape_all)


def parse_listen_bluetooth(uri: str, *, what: str = "--listen-bluetooth", shape_all: bool = False) -> BluetoothListen:
    """``bluetooth://ADDR/PSM[?class=..&..]`` to listen on (ADDR 00:00:00:00:00:00: any adapter). Raises ConfigError."""
    if not isinstance(uri, str) or not uri.startswith("bluetooth://"):
        raise ConfigError(what, uri, "expected bluetooth://ADDR/PSM (00:00:00:00:00:00 for any local adapter)")
    address, psm, link = parse_bluetooth_uri(uri, what=what, shape_all=shape_all, allow_any=True)
    return BluetoothListen(uri, address, psm, link)


def parse_peer_uri(uri: str, *, what: str = "--peer", shape_all: bool = False) -> PeerSpec:
    """``tcp://HOST:PORT?class=..&..`` or ``bluetooth://ADDR/PSM?..`` -> PeerSpec. Raises ConfigError naming
    ``what`` and the URI."""
    if not isinstance(uri, str) or not uri:
        raise ConfigError(what, uri, "expected tcp://HOST:PORT or bluetooth://AA:BB:CC:DD:EE:FF/PSM")
    parts, params = _query(uri, what)
    if parts.scheme == "bluetooth":  # type: ignore[attr-defined]
        address, psm, link = parse_bluetooth_uri(uri, what=what, shape_all=shape_all)
        return PeerSpec(uri, address, psm, link, "bluetooth")
    if parts.scheme != "tcp":  # type: ignore[attr-defined]
        raise ConfigError(what, uri, f"scheme {parts.scheme!r} is not supported "  # type: ignore[attr-defined]
                                     "(use tcp://HOST:PORT or bluetooth://AA:BB:CC:DD:EE:FF/PSM)")  # fmt: skip
    if parts.path not in ("", "/") or parts.fragment:  # type: ignore[attr-defined]
        raise ConfigError(what, uri, "expected tcp://HOST:PORT with nothing after the port but ?query")
    try:
        hp = parse_hostport(parts.netloc, what, allow_zero=False)  # type: ignore[attr-defined]
    except ConfigError as exc:
        raise ConfigError(what, uri, exc.reason) from None
    return PeerSpec(uri, hp.host, hp.port, link_spec(params, what=what, value=uri, shape_all=shape_all))


def parse_inbound(uri: str, *, shape_all: bool = False) -> InboundRule:
    """``tcp://IP[?class=..&..]`` or ``tcp://NET/PREFIX[?..]``: how to treat connections accepted from IP (or
    from any address in NET/PREFIX). Raises ConfigError."""
    what = "--inbound"
    parts, params = _query(uri, what)
    if parts.scheme != "tcp":  # type: ignore[attr-defined]
        raise ConfigError(what, uri, "expected tcp://IP?class=CLASS or tcp://NET/PREFIX?class=CLASS")
    host = parts.hostname or ""  # type: ignore[attr-defined]
    path = parts.path  # type: ignore[attr-defined]
    if path not in ("", "/"):
        try:
            address = str(ipaddress.ip_network(f"{host}{path}", strict=True))
        except ValueError as exc:
            raise ConfigError(what, uri, f"{host}{path!s} is not a network NET/PREFIX ({exc})") from None
        return InboundRule(address, link_spec(params, what=what, value=uri, shape_all=shape_all))
    try:
        address = str(ipaddress.ip_address(host))
    except ValueError:
        raise ConfigError(what, uri, f"{host!r} is not an IP address") from None
    return InboundRule(address, link_spec(params, what=what, value=uri, shape_all=shape_all))


@dataclass(frozen=True, slots=True)
class Timeouts:
    """Shell timers (PROTOCOL.md §3.2, §3.5, Appendix A). Defaults are the protocol's."""

    handshake_s: float = 10.0
    keepalive_s: float = 3.0
    read_s: float = 5.0
    write_s: float = 3.0
    dial_s: float = 5.0
    backoff_min_s: float = 0.5
    backoff_max_s: float = 30.0

    def __post_init__(self) -> None:
        for name in ("handshake_s", "keepalive_s", "read_s", "write_s", "dial_s", "backoff_min_s", "backoff_max_s"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and 0 < v <= 3600):
                raise ConfigError(f"timeout {name}", v, "must be a number of seconds in (0, 3600]")
        if self.keepalive_s >= self.read_s:
            raise ConfigError("timeout keepalive_s", self.keepalive_s, f"must be below read_s ({self.read_s}) or idle peers time out")
        if self.backoff_min_s > self.backoff_max_s:
            raise ConfigError("timeout backoff_min_s", self.backoff_min_s, "is above backoff_max_s")


@dataclass(slots=True)
class NodeConfig:
    """Everything one node process needs. Build it with the parse helpers; checked in ``__post_init__``."""

    identity: Identity
    listen: HostPort | None = field(default_factory=lambda: HostPort("0.0.0.0", 7000))
    listen_bluetooth: BluetoothListen | None = None
    peers: list[PeerSpec] = field(default_factory=list)
    inbound: list[InboundRule] = field(default_factory=list)
    listen_link: LinkSpec = field(default_factory=LinkSpec)
    multicast: list[str] = field(default_factory=list)
    admin: HostPort | None = field(default_factory=lambda: HostPort("127.0.0.1", 8080))
    metrics: HostPort | None = field(default_factory=lambda: HostPort("127.0.0.1", 9100))
    events: str | None = None  # a path, "-" for stdout, None for no event log
    run_id: str = "adhoc"
    name: str | None = None
    ready_file: Path | None = None
    max_frame_bytes: int = MAX_FRAME_LEN
    flow_queue_frames: int = 64  # the reference: 16 (docs/node.md says why more here)
    protocol_queue_frames: int = 4096
    stats_interval_s: float = 10.0
    timeouts: Timeouts = field(default_factory=Timeouts)
    #: the protocol variant and its knobs (node.core.variants); hop limiting and wakeup broadcasts are knobs
    variant: VariantSpec = field(default_factory=VariantSpec)
    detail_events: bool = True
    shaping_seed: int | None = None
    #: adversarial drops of received frames (node.core.adversary): (kind -> percent, peer key or None for all)
    adversary: list[tuple[dict[str, float], bytes | None]] = field(default_factory=list)
    #: an adversary strategy of node.core.attacks (``--adversary greyhole:forward=0.3``): (name, params), or None
    attack: tuple[str, dict[str, str]] | None = None
    #: the flight recorder (node.core.recorder): seconds it keeps (0: off) and the most entries it holds
    recorder_s: float = DEFAULT_WINDOW_S
    recorder_max_entries: int = DEFAULT_MAX_ENTRIES

    def __post_init__(self) -> None:
        if not 256 <= self.max_frame_bytes <= MAX_FRAME_LEN:
            raise ConfigError("--max-frame-bytes", self.max_frame_bytes,
                              f"must be in 256..{MAX_FRAME_LEN} (announcements need room)")  # fmt: skip
        if not 1 <= self.flow_queue_frames <= 4096:
            raise ConfigError("--flow-queue-frames", self.flow_queue_frames, "must be in 1..4096")
        if not 16 <= self.protocol_queue_frames <= 1_000_000:
            raise ConfigError("protocol_queue_frames", self.protocol_queue_frames, "must be in 16..1000000")
        if not 0.1 <= self.stats_interval_s <= 3600:
            raise ConfigError("--stats-interval-s", self.stats_interval_s, "must be in 0.1..3600")
        if not 0 <= self.recorder_s <= 3600:
            raise ConfigError("--recorder-s", self.recorder_s, "must be in 0..3600 (0: no flight recorder)")
        if not 1 <= self.recorder_max_entries <= 10_000_000:
            raise ConfigError("--recorder-max-entries", self.recorder_max_entries, "must be in 1..10000000")
        if not self.run_id or len(self.run_id) > 128 or any(c.isspace() for c in self.run_id):
            raise ConfigError("--run-id", self.run_id, "must be 1-128 characters without spaces")
        if self.name is not None and not 1 <= len(self.name) <= 128:
            raise ConfigError("--name", self.name, "must be 1-128 characters")
        for iface in self.multicast:
            if not iface or len(iface) > 15 or "/" in iface or iface.strip() != iface:
                raise ConfigError("--multicast", iface, "is not an interface name")

    def inbound_link(self, address: str) -> LinkSpec:
        """The LinkSpec for a connection accepted from ``address`` (first matching --inbound rule)."""
        for rule in self.inbound:
            if rule.matches(address):
                return rule.link
        return self.listen_link


def load_identity(key_file: str | os.PathLike[str] | None = None, key_seed: str | None = None) -> tuple[Identity, str]:
    """The node's ed25519 identity and where it came from ("seed", "file", "created", "ephemeral").

    ``key_seed``: 64 hex digits. ``key_file``: 32 raw bytes or 64 hex digits; created
    (mode 0600, hex) when missing. Raises ConfigError for bad seeds, unreadable or
    malformed files, or both options at once.
    """
    if key_seed is not None and key_file is not None:
        raise ConfigError("--key-seed", key_seed, "give either --key-seed or --key-file, not both")
    if key_seed is not None:
        return Identity(_seed_from_hex(key_seed.strip(), "--key-seed")), "seed"
    if key_file is None:
        return Identity(secrets.token_bytes(32)), "ephemeral"
    path = Path(key_file)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        pass
    except OSError as exc:
        raise ConfigError("--key-file", str(path), f"cannot create: {exc.strerror}") from None
    else:
        seed = secrets.token_bytes(32)
        with os.fdopen(fd, "w") as f:
            f.write(seed.hex() + "\n")
        return Identity(seed), "created"
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError("--key-file", str(path), f"cannot read: {exc.strerror}") from None
    if len(data) == 32:
        return Identity(data), "file"
    try:
        text = data.decode("ascii").strip()
    except UnicodeDecodeError:
        raise ConfigError("--key-file", str(path), f"expected 32 raw bytes or 64 hex digits, got {len(data)} bytes") from None
    return Identity(_seed_from_hex(text, "--key-file", shown=str(path))), "file"


def _seed_from_hex(text: str, what: str, shown: str | None = None) -> bytes:
    value = shown if shown is not None else f"<{len(text)} characters, not shown>"  # never echo a secret
    if len(text) != 64:
        raise ConfigError(what, value, f"an ed25519 seed is 64 hex digits, got {len(text)} characters")
    try:
        return bytes.fromhex(text)
    except ValueError:
        raise ConfigError(what, value, "is not hexadecimal") from None
