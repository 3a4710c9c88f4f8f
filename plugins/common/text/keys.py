"""What exact deduplication compares: a 128-bit BLAKE2b digest per pair, of the pair, its
source or its target, as written or case-folded with whitespace collapsed. Shared by the
``dedup`` filter (in a clean chain, keys kept in memory) and the ``dedup`` step (keys bucketed
on disk)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from mtcore.api import Pair

_SEP = "\t"


def hash_texts(texts: Iterable[str]) -> np.ndarray:
    """(n, 2) uint64: a 128-bit BLAKE2b digest of each text's UTF-8 bytes."""
    return hash_bytes(t.encode("utf-8") for t in texts)


def hash_bytes(items: Iterable[bytes]) -> np.ndarray:
    """(n, 2) uint64: a 128-bit BLAKE2b digest of each item."""
    digest = b"".join(hashlib.blake2b(x, digest_size=16).digest() for x in items)
    return np.frombuffer(digest, dtype="<u8").reshape(-1, 2).astype(np.uint64)


def normalize_text(text: str) -> str:
    """The ``normalize`` comparison: case-folded, whitespace runs collapsed, stripped."""
    return " ".join(text.casefold().split())


def pair_keys(pairs: Sequence[Pair], key: str, normalize: bool) -> np.ndarray:
    """The digests of ``key`` (``pair``, ``source`` or ``target``) of each pair; the sides of
    a pair are joined by a tab, which no corpus line holds."""

    def text(pair: Pair) -> str:
        parts = pair[:1] if key == "source" else pair[-1:] if key == "target" else pair
        joined = _SEP.join(parts)
        return normalize_text(joined) if normalize else joined

    return hash_texts(text(p) for p in pairs)


def block_keys(block: Any, key: str, normalize: bool) -> np.ndarray:
    """:func:`pair_keys` of a :class:`~mtcore.api.TextBlock`; without ``normalize`` the same
    digests straight from the UTF-8 bytes of the lines (nothing decoded)."""
    if normalize:
        return pair_keys(block.pairs(), key, True)
    columns = block.columns
    if key == "source":
        columns = columns[:1]
    elif key == "target":
        columns = columns[-1:]
    sides = [c.raw.split(b"\n")[:-1] for c in columns]
    joined = sides[0] if len(sides) == 1 else [b"\t".join(p) for p in zip(*sides, strict=True)]
    return hash_bytes(joined)
