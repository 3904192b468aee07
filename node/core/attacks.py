"""Adversary strategies beyond frame drops (sans-IO state machines; docs/attacks.md, "Strategies").

:mod:`node.core.adversary` drops received frames by kind (the ``drop`` strategy). The strategies here are
what issue 31 adds: each is fed the frames its node receives (:meth:`Strategy.swallow`), sees the frames it
is about to send (:meth:`Strategy.outgoing`, for the strategies that set ``watches_sends``) and the current
time, and makes frames of its own on its timer (:meth:`Strategy.tick` at :meth:`Strategy.next_deadline`).
The router (:mod:`node.core.router`) holds at most one, ``router.attack``; with none set its paths are the
honest ones and the transit fast path stays open. No randomness but a seeded ``random.Random``: a run is
reproducible from its seed.

* ``greyhole`` (``forward``, ``seed``): forwards only that fraction of the transit Traffic it should forward;
* ``sybil`` (``victim``): swallows Bootstraps and Traffic for the victim's key, and any Traffic it would
  hand to the victim (joined with a key ground next to the victim's: :mod:`node.core.grind`);
* ``root_takeover`` (``mode`` drop | withhold | rejoin, ``period_s``): a node whose key is above every honest
  key drops transit Traffic and Bootstraps, delays its announcements by ``period_s`` (0: never sends them),
  or every ``period_s`` starts its root over with a new sequence (every node re-converges, as on a rejoin);
* ``bootstrap_flood`` / ``announcement_flood`` (``multiple``): signed Bootstraps / announcements at
  ``multiple`` times the protocol's bootstrap rate (one each ``bootstrap_interval_s``);
* ``replay`` (``interval_s``, ``seed``): re-sends captured Bootstraps and its own older announcements, out of
  order;
* ``forge`` (``rate_per_s``, ``kinds``, ``seed``): Bootstraps with bad signatures (honest nodes reject them:
  ``bootstrap_rejected`` ``bad_signature``), announcements with a bad hop signature (``bad_signature``) or
  impossible coordinates (a hop on port 0: ``announcement_port_zero``); honest nodes drop the peer for those.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Final, Protocol

from . import wire
from .crypto import Identity
from .reasons import count_drop
from .state import PeerState, Send, Timers
from .types import INITIAL_WATERMARK, Frame, FrameType

__all__ = ["STRATEGIES", "AttackHost", "Strategy", "make_strategy", "parse_strategy_spec"]

_TRAFFIC: Final = int(FrameType.TRAFFIC)
_BOOTSTRAP: Final = int(FrameType.BOOTSTRAP)
_ANN: Final = int(FrameType.TREE_ANNOUNCEMENT)
_INF: Final = math.inf
FORGE_KINDS: Final = ("bootstrap", "announcement", "coords")


class AttackHost(Protocol):
    """What a strategy reads of its node (the router is one)."""

    key: bytes
    identity: Identity
    peers: dict[int, PeerState]
    t: Timers
    tree: Any
    snek: Any
    counters: Any

    def wall_ms(self, now: float) -> int: ...


class Strategy:
    """An honest node: swallows nothing, sends nothing of its own. The base of every strategy."""

    name: ClassVar[str] = "none"
    def __init__(self) -> None:
        #: whether the router hands it the frames its node is about to send (:meth:`outgoing`)
        self.watches_sends = False
        self.swallowed = 0  # frames received and swallowed, or about to be sent and withheld
        self.made = 0  # frames of its own sent (floods, replays, forgeries)
        self.now = 0.0  # the latest time it was told

    def params(self) -> dict[str, Any]:
        return {}

    def describe(self) -> dict[str, Any]:
        return {"strategy": self.name, **self.params(), "swallowed": self.swallowed, "made": self.made}

    def swallow(self, peer_key: bytes, frame: Frame, own: bytes, now: float) -> bool:
        """Whether the node swallows ``frame`` received from ``peer_key`` (the router counts it, reason adversary)."""
        return False

    def outgoing(self, sends: list[Send], host: AttackHost) -> None:
        """Remove (or hold) frames of ``sends`` the node is about to send, in place. Counts what it removes."""

    def next_deadline(self) -> float:
        return _INF

    def tick(self, now: float, host: AttackHost) -> list[Send]:
        """Frames of its own to send at ``now``."""
        return []

    def _drop_sends(self, sends: list[Send], host: AttackHost, doomed: Callable[[int, Any], bool]) -> None:
        keep = [(p, f) for p, f in sends if not doomed(p, f)]
        if len(keep) != len(sends):
            for p, f in sends:
                if doomed(p, f):
                    count_drop(host.counters, f.type, "adversary")
            self.swallowed += len(sends) - len(keep)
            sends[:] = keep


def _up_ports(host: AttackHost) -> list[int]:
    return sorted(p for p, q in host.peers.items() if q.up)


class Greyhole(Strategy):
    name = "greyhole"

    def __init__(self, forward: float = 0.5, seed: int = 0) -> None:
        super().__init__()
        if not 0 <= forward <= 1:
            raise ValueError(f"forward: a fraction from 0 to 1, got {forward}")
        self.forward, self.seed = forward, seed
        self.rng = random.Random(f"greyhole:{seed}")

    def params(self) -> dict[str, Any]:
        return {"forward": self.forward, "seed": self.seed}

    def swallow(self, peer_key: bytes, frame: Frame, own: bytes, now: float) -> bool:
        if frame.type != _TRAFFIC or frame.destination_key == own:
            return False
        if self.rng.random() < self.forward:
            return False
        self.swallowed += 1
        return True


class Sybil(Strategy):
    name = "sybil"

    def __init__(self, victim: bytes) -> None:
        super().__init__()
        if len(victim) != 32:
            raise ValueError("victim: a 32-byte public key (64 hex digits)")
        self.victim = victim
        self.watches_sends = True

    def params(self) -> dict[str, Any]:
        return {"victim": self.victim.hex()}

    def swallow(self, peer_key: bytes, frame: Frame, own: bytes, now: float) -> bool:
        t = frame.type
        if (t == _TRAFFIC or t == _BOOTSTRAP) and frame.destination_key == self.victim:
            self.swallowed += 1
            return True
        return False

    def outgoing(self, sends: list[Send], host: AttackHost) -> None:
        peers, victim = host.peers, self.victim
        ports = {p for p, q in peers.items() if q.key == victim}
        if ports:
            self._drop_sends(sends, host, lambda p, f: p in ports and f.type in (_TRAFFIC, _BOOTSTRAP))


class RootTakeover(Strategy):
    name = "root_takeover"
    MODES: ClassVar[tuple[str, ...]] = ("drop", "withhold", "rejoin")

    def __init__(self, mode: str = "drop", period_s: float | None = None) -> None:
        super().__init__()
        if mode not in self.MODES:
            raise ValueError(f"mode: one of {', '.join(self.MODES)}, got {mode!r}")
        if period_s is None:
            period_s = {"drop": 0.0, "withhold": 5.0, "rejoin": 30.0}[mode]
        if not 0 <= period_s <= 86_400 or (mode == "rejoin" and period_s <= 0):
            raise ValueError(f"period_s: seconds from 0 (rejoin: above 0) to 86400, got {period_s}")
        self.mode, self.period_s = mode, float(period_s)
        self.watches_sends = mode == "withhold"
        self.held: list[tuple[float, int, Any]] = []  # withhold: (release at, port, announcement)
        self.released: list[Any] = []  # held announcements sent out since the last outgoing()
        self.next_rejoin = _INF if mode != "rejoin" else -1.0
        self.rejoins = 0

    def params(self) -> dict[str, Any]:
        return {"mode": self.mode, "period_s": self.period_s, "rejoins": self.rejoins}

    def swallow(self, peer_key: bytes, frame: Frame, own: bytes, now: float) -> bool:
        self.now = now
        if self.mode != "drop" or frame.type not in (_TRAFFIC, _BOOTSTRAP) or frame.destination_key == own:
            return False
        self.swallowed += 1
        return True

    def outgoing(self, sends: list[Send], host: AttackHost) -> None:
        released = self.released
        self.released = []
        anns = [(p, f) for p, f in sends if f.type == _ANN and not any(f is r for r in released)]
        if not anns:
            return
        held = {id(f) for _, f in anns}
        sends[:] = [(p, f) for p, f in sends if id(f) not in held]
        self.swallowed += len(anns)
        if self.period_s > 0:
            self.held.extend((self.now + self.period_s, p, f) for p, f in anns)

    def next_deadline(self) -> float:
        if self.held:
            return self.held[0][0]
        return self.next_rejoin

    def tick(self, now: float, host: AttackHost) -> list[Send]:
        self.now = now
        out: list[Send] = []
        if self.held and self.held[0][0] <= now:
            due = [h for h in self.held if h[0] <= now]
            self.held = [h for h in self.held if h[0] > now]
            out = [(p, f) for _, p, f in due if p in host.peers and host.peers[p].up]
            self.released.extend(f for _, f in out)
            self.made += len(out)
        if now >= self.next_rejoin:
            first = self.next_rejoin < 0
            self.next_rejoin = now + self.period_s
            if not first and host.tree.parent is None:  # the root starts over: a new sequence, every node follows
                self.rejoins += 1
                host.tree.maintenance(now)
        return out


class _Periodic(Strategy):
    """A strategy that acts every ``interval`` seconds."""

    def __init__(self, interval: float) -> None:
        super().__init__()
        self.interval = interval
        self.next_at = -1.0  # at the first tick

    def next_deadline(self) -> float:
        return self.next_at

    def tick(self, now: float, host: AttackHost) -> list[Send]:
        self.now = now
        if now < self.next_at:
            return []
        self.next_at = now + self.interval if self.next_at < 0 else max(self.next_at + self.interval, now)
        out = self.act(now, host)
        self.made += len(out)
        return out

    def act(self, now: float, host: AttackHost) -> list[Send]:
        return []


def _multiple(multiple: float) -> float:
    if not 1 <= multiple <= 10_000:
        raise ValueError(f"multiple: times the protocol's rate, from 1 to 10000, got {multiple}")
    return float(multiple)


def _bootstrap(host: AttackHost, now: float, seq: int, origin: bytes | None = None,
               sign_as: Identity | None = None) -> Send | None:  # fmt: skip
    """A Bootstrap toward ``origin`` (default our key) signed by ``sign_as`` (default us), for its next hop."""
    root = host.tree.root
    payload = wire.make_signed_root_payload(sign_as or host.identity, seq, root.key, root.seq)
    dest = origin or host.key
    nh = host.snek.next_hop(dest, True, INITIAL_WATERMARK, now)
    if nh.port <= 0:
        return None
    frame = Frame(FrameType.BOOTSTRAP, destination_key=dest, watermark=nh.watermark,
                  payload=wire.encode_signed_root_payload(payload))  # fmt: skip
    return (nh.port, frame)


class BootstrapFlood(_Periodic):
    name = "bootstrap_flood"

    def __init__(self, multiple: float = 10.0, interval_s: float = 5.0) -> None:
        self.multiple = _multiple(multiple)
        super().__init__(interval_s / self.multiple)
        self.seq = 0

    def params(self) -> dict[str, Any]:
        return {"multiple": self.multiple}

    def act(self, now: float, host: AttackHost) -> list[Send]:
        if host.tree.parent is None:
            return []
        self.seq = max(self.seq + 1, host.wall_ms(now) + 1)  # always fresh: honest nodes accept and forward each
        b = _bootstrap(host, now, self.seq)
        return [b] if b is not None else []


class AnnouncementFlood(_Periodic):
    name = "announcement_flood"

    def __init__(self, multiple: float = 10.0, interval_s: float = 5.0) -> None:
        self.multiple = _multiple(multiple)
        super().__init__(interval_s / self.multiple)

    def params(self) -> dict[str, Any]:
        return {"multiple": self.multiple}

    def act(self, now: float, host: AttackHost) -> list[Send]:
        tree = host.tree
        if tree.parent is None:
            tree.maintenance(now)  # a root: a new sequence, re-announced network-wide
            self.made += len(tree.up)
        else:
            self.made += tree.announce_to_all()  # the current announcement again, to every peer
        return []


class Replay(_Periodic):
    name = "replay"
    CAPTURED: ClassVar[int] = 64

    def __init__(self, interval_s: float = 1.0, seed: int = 0) -> None:
        if not 0.01 <= interval_s <= 86_400:
            raise ValueError(f"interval_s: seconds from 0.01 to 86400, got {interval_s}")
        super().__init__(interval_s)
        self.seed = seed
        self.watches_sends = True
        self.rng = random.Random(f"replay:{seed}")
        self.captured: list[tuple[int | None, Frame]] = []  # (port it went to, or None for a received bootstrap)

    def params(self) -> dict[str, Any]:
        return {"interval_s": self.interval, "seed": self.seed, "captured": len(self.captured)}

    def _capture(self, port: int | None, frame: Frame) -> None:
        if any(f is frame for _, f in self.captured):
            return  # a replayed frame going out again
        if len(self.captured) >= self.CAPTURED:
            del self.captured[self.rng.randrange(len(self.captured))]
        self.captured.append((port, frame))

    def swallow(self, peer_key: bytes, frame: Frame, own: bytes, now: float) -> bool:
        if frame.type == _BOOTSTRAP:
            self._capture(None, frame)
        return False

    def outgoing(self, sends: list[Send], host: AttackHost) -> None:
        for p, f in sends:
            if f.type == _ANN and type(f) is Frame:
                self._capture(p, f)

    def act(self, now: float, host: AttackHost) -> list[Send]:
        ports = _up_ports(host)
        if not self.captured or not ports:
            return []
        port, frame = self.captured[self.rng.randrange(len(self.captured))]  # out of order
        if port is None or port not in ports:
            port = self.rng.choice(ports)
        return [(port, frame)]


class Forge(_Periodic):
    name = "forge"

    def __init__(self, rate_per_s: float = 1.0, kinds: tuple[str, ...] = FORGE_KINDS, seed: int = 0) -> None:
        if not 0 < rate_per_s <= 1000:
            raise ValueError(f"rate_per_s: frames a second to each peer, above 0 up to 1000, got {rate_per_s}")
        bad = [k for k in kinds if k not in FORGE_KINDS]
        if bad or not kinds:
            raise ValueError(f"kinds: some of {', '.join(FORGE_KINDS)}, got {', '.join(kinds) or 'none'}")
        super().__init__(1.0 / rate_per_s)
        self.rate, self.kinds, self.seed = rate_per_s, tuple(kinds), seed
        self.rng = random.Random(f"forge:{seed}")
        self.count = 0

    def params(self) -> dict[str, Any]:
        return {"rate_per_s": self.rate, "kinds": list(self.kinds), "seed": self.seed}

    def act(self, now: float, host: AttackHost) -> list[Send]:
        kind = self.kinds[self.count % len(self.kinds)]
        self.count += 1
        out: list[Send] = []
        for port in _up_ports(host):
            frame = self._forge(kind, port, now, host)
            if frame is not None:
                out.append((port, frame))
        return out

    def _forge(self, kind: str, port: int, now: float, host: AttackHost) -> Frame | None:
        if kind == "bootstrap":  # signed by us for a key that is not ours: the signature cannot verify
            origin = self.rng.randbytes(32)
            root = host.tree.root
            payload = wire.make_signed_root_payload(host.identity, host.wall_ms(now), root.key, root.seq)
            return Frame(FrameType.BOOTSTRAP, destination_key=origin, watermark=INITIAL_WATERMARK,
                         payload=wire.encode_signed_root_payload(payload))  # fmt: skip
        base = wire.encode_announcement(host.tree.current_announcement())
        if kind == "announcement":  # our hop with a signature that is noise
            return Frame(FrameType.TREE_ANNOUNCEMENT,
                         payload=base + wire.encode_varu64(port) + host.key + self.rng.randbytes(64))  # fmt: skip
        # impossible coordinates: our hop on port 0 (the local router), validly signed
        return Frame(FrameType.TREE_ANNOUNCEMENT,
                     payload=base + wire.encode_varu64(0) + host.key + host.identity.sign(base))  # fmt: skip


#: strategy name -> (factory, parameter -> type); ``drop`` is node.core.adversary's (Router.set_adversary)
STRATEGIES: Final[dict[str, tuple[Callable[..., Strategy], dict[str, type]]]] = {
    "none": (Strategy, {}),
    "greyhole": (Greyhole, {"forward": float, "seed": int}),
    "sybil": (Sybil, {"victim": bytes}),
    "root_takeover": (RootTakeover, {"mode": str, "period_s": float}),
    "bootstrap_flood": (BootstrapFlood, {"multiple": float}),
    "announcement_flood": (AnnouncementFlood, {"multiple": float}),
    "replay": (Replay, {"interval_s": float, "seed": int}),
    "forge": (Forge, {"rate_per_s": float, "kinds": tuple, "seed": int}),
}
#: every strategy name a node accepts: ``drop`` and those of :data:`STRATEGIES`
STRATEGY_NAMES: Final[tuple[str, ...]] = ("drop", *STRATEGIES)


def _convert(name: str, kind: type, value: Any) -> Any:
    if kind is bytes:
        if isinstance(value, bytes) and len(value) == 32:
            return value
        if isinstance(value, str) and len(value) == 64:
            try:
                return bytes.fromhex(value)
            except ValueError:
                pass
        raise ValueError(f"{name}: a public key, 64 hex digits, got {value!r}")
    if kind is tuple:
        items = value.replace("+", ",").split(",") if isinstance(value, str) else value
        if not isinstance(items, (list, tuple)) or not all(isinstance(i, str) for i in items):
            raise ValueError(f"{name}: a list of names, got {value!r}")
        return tuple(i.strip() for i in items if i.strip())
    if kind is str:
        if not isinstance(value, str):
            raise ValueError(f"{name}: a name, got {value!r}")
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"{name}: a number, got {value!r}")
    try:
        number = float(value)
    except ValueError:
        raise ValueError(f"{name}: a number, got {value!r}") from None
    if not math.isfinite(number):
        raise ValueError(f"{name}: a finite number, got {value!r}")
    if kind is int:
        if number != int(number):
            raise ValueError(f"{name}: a whole number, got {value!r}")
        return int(number)
    return number


def make_strategy(strategy: str, params: Mapping[str, Any] | None = None, *,
                  timers: Timers | None = None) -> Strategy:  # fmt: skip
    """The strategy ``strategy`` (not ``drop``) with ``params``. Raises ValueError naming the bad field."""
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy: one of {', '.join(STRATEGY_NAMES)}, got {strategy!r}")
    factory, known = STRATEGIES[strategy]
    kw: dict[str, Any] = {}
    for k, v in (params or {}).items():
        if k not in known:
            raise ValueError(f"{k}: not a parameter of {strategy} (its parameters: {', '.join(known) or 'none'})")
        kw[k] = _convert(k, known[k], v)
    if strategy in ("bootstrap_flood", "announcement_flood") and timers is not None:
        kw["interval_s"] = timers.bootstrap_interval_s
    if strategy == "sybil" and "victim" not in kw:
        raise ValueError("victim: sybil needs the victim's key")
    return factory(**kw)


def parse_strategy_spec(spec: str) -> tuple[str, dict[str, str]]:
    """``"greyhole:forward=0.3,seed=2"`` -> ("greyhole", {"forward": "0.3", "seed": "2"}). Raises ValueError."""
    name, _, body = spec.partition(":")
    name = name.strip()
    if name not in STRATEGY_NAMES:
        raise ValueError(f"strategy: one of {', '.join(STRATEGY_NAMES)}, got {name!r}")
    params: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in body.split(","))):
        k, eq, v = part.partition("=")
        if not eq or not k.strip():
            raise ValueError(f"{part!r}: expected NAME=VALUE")
        params[k.strip()] = v.strip()
    return name, params
