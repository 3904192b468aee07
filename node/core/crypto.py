"""Ed25519 identities and signature checks (RFC 8032 pure Ed25519, via libsodium).

Verification results are memoised in a bounded cache keyed by the exact
(key, message, signature) triple. A triple that verified once always verifies,
so the cache changes cost, never outcomes. In the in-process network many
nodes check the very same announcement prefixes and bootstrap payloads, which
is where the cache pays off; a real node gains on re-sent parent
announcements whose prefix it has already checked.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from typing import Final

from nacl.exceptions import BadSignatureError
from nacl.signing import SigningKey, VerifyKey

__all__ = ["Identity", "verify", "verify_uncached", "VerifyCache", "derive_seed", "signatures_enabled", "set_signatures_enabled"]

_SIGNATURES = True


def signatures_enabled() -> bool:
    return _SIGNATURES


def set_signatures_enabled(on: bool) -> None:
    """The reference's PINECONE_DISABLE_SIGNATURES switch (§4.5), for simulation only."""
    global _SIGNATURES
    _SIGNATURES = on


class Identity:
    """A node's key pair. ``public_key`` is the node's only network address."""

    __slots__ = ("seed", "public_key", "_signing")

    def __init__(self, seed: bytes) -> None:
        if len(seed) != 32:
            raise ValueError(f"an ed25519 seed is 32 bytes, got {len(seed)}")
        self.seed = bytes(seed)
        self._signing = SigningKey(self.seed)
        self.public_key = bytes(self._signing.verify_key)

    @classmethod
    def generate(cls) -> Identity:
        return cls(bytes(SigningKey.generate()))

    def sign(self, message: bytes) -> bytes:
        if not _SIGNATURES:
            return b"\x00" * 64
        return self._signing.sign(message).signature

    def __repr__(self) -> str:
        return f"Identity({self.public_key.hex()[:16]}…)"


def derive_seed(*parts: str | int | bytes) -> bytes:
    """A reproducible 32-byte seed from e.g. (run seed, node name)."""
    h = hashlib.sha256(b"snekbed-key-v1")
    for p in parts:
        b = p if isinstance(p, bytes) else str(p).encode()
        h.update(len(b).to_bytes(4, "big") + b)
    return h.digest()


class VerifyCache:
    """Bounded LRU of triples that verified."""

    def __init__(self, capacity: int = 200_000) -> None:
        self.capacity = capacity
        self._ok: OrderedDict[tuple[bytes, bytes, bytes], None] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def verify(self, key: bytes, message: bytes, signature: bytes) -> bool:
        if not _SIGNATURES:
            return True
        triple = (key, message, signature)
        if triple in self._ok:
            self.hits += 1
            return True
        self.misses += 1
        try:
            VerifyKey(key).verify(message, signature)
        except (BadSignatureError, ValueError, TypeError):
            return False
        except Exception:  # libsodium rejects some malformed keys with its own error types
            return False
        self._ok[triple] = None
        if len(self._ok) > self.capacity:
            self._ok.popitem(last=False)
        return True


_DEFAULT_CACHE: Final = VerifyCache()


def verify_uncached(key: bytes, message: bytes, signature: bytes) -> bool:
    """Check one signature without the memo (callers that keep their own)."""
    if not _SIGNATURES:
        return True
    try:
        VerifyKey(key).verify(message, signature)
    except Exception:  # BadSignatureError, or libsodium's errors for malformed keys
        return False
    return True


def verify(key: bytes, message: bytes, signature: bytes) -> bool:
    """True when ``signature`` is ``key``'s Ed25519 signature over ``message``."""
    return _DEFAULT_CACHE.verify(key, message, signature)
