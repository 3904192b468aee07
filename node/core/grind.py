"""Key grinding for adversaries (sans-IO): seeded, bounded, and saying how many keys it tried.

SNEK orders nodes by public key, and the tree's root is the highest key. An adversary that may mint keys
tries seeds until the key falls where it wants it: :func:`near` (just above or just below a victim's key,
with no honest key in between, so it is the victim's neighbour in the snake) or :func:`above_all` (above
every honest key, so it becomes the root). Seeds come from :func:`~node.core.crypto.derive_seed` of the
run's seed, the adversary's name and the try number: the same run grinds the same key. ``max_tries`` bounds
the work (each try is one ed25519 key derivation, some tens of microseconds); :class:`GrindError` says when
it ran out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Final

from .crypto import Identity, derive_seed

__all__ = ["DEFAULT_MAX_TRIES", "GrindError", "Ground", "above_all", "grind", "near"]

#: tries allowed unless told otherwise: next to one of n honest keys takes about n tries on average
DEFAULT_MAX_TRIES: Final = 200_000
MAX_TRIES: Final = 5_000_000


class GrindError(ValueError):
    """No key was found within ``max_tries``."""

    def __init__(self, message: str, tries: int) -> None:
        super().__init__(message)
        self.tries = tries


@dataclass(frozen=True)
class Ground:
    """A ground key: the seed that makes it, the key, and how many keys were tried (this one included)."""

    seed: bytes
    key: bytes
    tries: int


def near(victim: bytes, honest: Iterable[bytes], side: str) -> Callable[[bytes], bool]:
    """Keys just ``above`` or ``below`` ``victim``: between it and the next honest key on that side."""
    if side not in ("above", "below"):
        raise ValueError(f"side: above or below, got {side!r}")
    keys = set(honest) - {victim}
    if side == "above":
        bound = min((k for k in keys if k > victim), default=b"\xff" * 33)
        return lambda k: victim < k < bound
    low = max((k for k in keys if k < victim), default=b"")
    return lambda k: low < k < victim


def above_all(honest: Iterable[bytes]) -> Callable[[bytes], bool]:
    """Keys above every honest key (the root is the highest key)."""
    top = max(honest, default=b"")
    return lambda k: k > top


def grind(run_seed: int | str | bytes, name: str, accept: Callable[[bytes], bool],
          max_tries: int = DEFAULT_MAX_TRIES) -> Ground:  # fmt: skip
    """The first key ``accept`` takes among the seeds derived from (run_seed, name, try). Raises GrindError."""
    if not 1 <= max_tries <= MAX_TRIES:
        raise ValueError(f"max_tries: from 1 to {MAX_TRIES}, got {max_tries}")
    for i in range(1, max_tries + 1):
        seed = derive_seed(run_seed, name, "grind", i)
        key = Identity(seed).public_key
        if accept(key):
            return Ground(seed, key, i)
    raise GrindError(f"max_tries: no key found in {max_tries} tries", max_tries)
