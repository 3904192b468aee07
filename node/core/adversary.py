"""An adversarial node: drop received frames by type at given rates, for every peer or one (sans-IO).

This is the reference simulator's ``GeneralAdversary`` behaviour
(cmd/pineconesim/simulator/adversary): rates are whole or fractional percentages
per frame kind plus an ``all`` rate, set as defaults and optionally per peer (a
peer's own rates replace the defaults for that peer). Drops are deterministic,
not random, so a seeded run is reproducible: for a rate r % = a/b in lowest
terms, the first ``a`` of every ``b`` frames of that kind from that peer are
dropped. A frame is dropped when its kind's rate or the ``all`` rate says so.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Mapping

from .types import FrameType

__all__ = ["DROP_KINDS", "Adversary", "parse_drop_spec"]

#: kind name -> frame type number (None: every frame)
DROP_KINDS: dict[str, int | None] = {
    "all": None,
    "keepalive": int(FrameType.KEEPALIVE),
    "tree_announcement": int(FrameType.TREE_ANNOUNCEMENT),
    "bootstrap": int(FrameType.BOOTSTRAP),
    "wakeup_broadcast": int(FrameType.WAKEUP_BROADCAST),
    "traffic": int(FrameType.TRAFFIC),
}


def _ratio(pct: float) -> tuple[int, int]:
    if not 0 <= pct <= 100:
        raise ValueError(f"a drop rate is a percentage from 0 to 100, got {pct}")
    f = Fraction(pct).limit_denominator(10_000) / 100
    return f.numerator, f.denominator


class _Rates:
    __slots__ = ("by_type", "overall")

    def __init__(self, rates: Mapping[str, float]) -> None:
        self.overall = (0, 1)
        self.by_type: dict[int, tuple[int, int]] = {}
        for kind, pct in rates.items():
            if kind not in DROP_KINDS:
                raise ValueError(f"unknown frame kind {kind!r} (known: {', '.join(DROP_KINDS)})")
            t = DROP_KINDS[kind]
            if t is None:
                self.overall = _ratio(pct)
            else:
                self.by_type[t] = _ratio(pct)


class Adversary:
    """Decides, per received frame, whether an adversarial node drops it. Counts what it saw and dropped."""

    def __init__(self, defaults: Mapping[str, float] | None = None) -> None:
        self.defaults = _Rates(defaults or {})
        self.per_peer: dict[bytes, _Rates] = {}
        self._seen: dict[tuple[bytes, int], int] = {}  # (peer, type or -1 for all) -> frames counted
        self.dropped = 0

    def configure(self, rates: Mapping[str, float], peer: bytes | None = None) -> None:
        """Set the default rates (``peer`` None) or one peer's. Raises ValueError for a bad kind or rate."""
        parsed = _Rates(rates)
        if peer is None:
            self.defaults = parsed
        else:
            self.per_peer[peer] = parsed

    @property
    def active(self) -> bool:
        rates = [self.defaults, *self.per_peer.values()]
        return any(r.overall[0] or any(a for a, _ in r.by_type.values()) for r in rates)

    def drops(self, peer: bytes, frame_type: int) -> bool:
        r = self.per_peer.get(peer, self.defaults)
        drop = False
        a, b = r.overall
        if a:
            k = (peer, -1)
            n = self._seen.get(k, 0)
            self._seen[k] = n + 1
            drop = n % b < a
        ab = r.by_type.get(frame_type)
        if ab is not None and ab[0]:
            k = (peer, frame_type)
            n = self._seen.get(k, 0)
            self._seen[k] = n + 1
            drop = drop or n % ab[1] < ab[0]
        if drop:
            self.dropped += 1
        return drop


def parse_drop_spec(spec: str) -> tuple[dict[str, float], str | None]:
    """``"bootstrap=100,traffic=50[@PEERKEYHEX]"`` -> (rates, peer key hex or None). Raises ValueError."""
    body, _, peer = spec.partition("@")
    rates: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in body.split(","))):
        kind, eq, value = part.partition("=")
        if not eq:
            raise ValueError(f"{part!r}: expected KIND=PERCENT (kinds: {', '.join(DROP_KINDS)})")
        if kind not in DROP_KINDS:
            raise ValueError(f"unknown frame kind {kind!r} (known: {', '.join(DROP_KINDS)})")
        try:
            rates[kind] = float(value)
        except ValueError:
            raise ValueError(f"{part!r}: {value!r} is not a percentage") from None
        _ratio(rates[kind])
    if not rates:
        raise ValueError("an adversary spec names at least one KIND=PERCENT")
    if peer:
        if len(peer) != 64 or any(c not in "0123456789abcdefABCDEF" for c in peer):
            raise ValueError(f"the peer after '@' is a 64-hex-digit public key, got {peer!r}")
        return rates, peer.lower()
    return rates, None
