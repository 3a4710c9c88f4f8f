"""MinHash-LSH near-duplicate detection with bounded memory (Broder 1997; the banding of
Leskovec, Rajaraman & Ullman, *Mining of Massive Datasets* §3.4), laid out as datatrove's
minhash deduplication is: signatures per shard, band hashes scattered to bucket files on disk,
duplicate pairs found one bucket at a time, clusters joined by union-find, one member kept.

Texts are compared after :func:`normalize_for_minhash` (case-folded, NFKC, digits made 0,
punctuation, symbols and spaces dropped), so boilerplate with a changed number or a sentence
with other punctuation is the same text; their character ``ngram``-shingles are hashed and each
of ``bands * rows`` multiply-shift hash functions keeps its minimum. Two texts whose shingle
sets have Jaccard similarity s share a band with probability 1 - (1 - s^rows)^bands: with
datatrove's defaults (14 bands of 8 rows, 5-grams) that is an S-curve through 0.72.
"""

from __future__ import annotations

import os
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import BinaryIO

import numpy as np

from mtcore.api import worker_memo
from mtcore_plugins.steps._buckets import scatter

_EMPTY = np.uint64(0)
_KEEP, _DROP, _DIGIT = 0, 1, 2


def _classes() -> np.ndarray:
    """Per code point: dropped (punctuation, symbols, separators, control and format
    characters), a decimal digit (becomes ``0``), or kept. Built once per process (0.4 s)."""
    table = np.zeros(0x110000, dtype=np.uint8)
    for point in range(0x110000):
        category = unicodedata.category(chr(point))
        if category[0] in "PSZ" or category in ("Cc", "Cf"):
            table[point] = _DROP
        elif category == "Nd":
            table[point] = _DIGIT
    return table


def _prepared(texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """The normalized texts as one code-point array and its offsets: NFKC and case folding
    in Python (C code), the character classes in the compiled kernel."""
    kernels = _kernel()
    folded = [
        text.casefold() if text.isascii() else unicodedata.normalize("NFKC", text).casefold()
        for text in texts
    ]
    codes = np.frombuffer("".join(folded).encode("utf-32-le"), dtype=np.uint32)
    offsets = np.zeros(len(texts) + 1, dtype=np.int64)
    np.cumsum([len(t) for t in folded], out=offsets[1:])
    return kernels["filter"](codes, offsets, worker_memo(("minhash classes",), _classes))  # type: ignore[operator, no-any-return]


def normalize_for_minhash(text: str) -> str:
    """What near-duplicates share: ``"Page 12 of 40 — News!"`` and ``"page 3 of 41: news"``
    both become ``"page0of00news"``."""
    codes, _ = _prepared([text])
    return codes.astype("<u4").tobytes().decode("utf-32-le")


def hash_params(count: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``count`` multiply-shift hash functions ``(a * x + b) >> 32`` over 64-bit shingle
    hashes: odd multipliers ``a`` and offsets ``b``, from ``seed``."""
    rng = np.random.default_rng(seed)
    a = rng.integers(1, 2**63, size=count, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
    b = rng.integers(0, 2**63, size=count, dtype=np.uint64)
    return a, b


def _kernels():  # type: ignore[no-untyped-def]
    import numba

    @numba.njit(cache=True, nogil=True)
    def filter_codes(codes, offsets, classes):  # type: ignore[no-untyped-def]
        out = np.empty(len(codes), dtype=np.uint32)
        new_offsets = np.zeros(len(offsets), dtype=np.int64)
        n = 0
        for doc in range(len(offsets) - 1):
            for i in range(offsets[doc], offsets[doc + 1]):
                kind = classes[codes[i]]
                if kind == 0:
                    out[n] = codes[i]
                    n += 1
                elif kind == 2:
                    out[n] = 48  # "0"
                    n += 1
            new_offsets[doc + 1] = n
        return out[:n], new_offsets

    @numba.njit(cache=True, nogil=True)
    def mix(x):  # type: ignore[no-untyped-def]
        # splitmix64's finalizer: every input bit moves every output bit
        x ^= x >> np.uint64(30)
        x *= np.uint64(0xBF58476D1CE4E5B9)
        x ^= x >> np.uint64(27)
        x *= np.uint64(0x94D049BB133111EB)
        x ^= x >> np.uint64(31)
        return x

    @numba.njit(cache=True, nogil=True)
    def band_hashes(codes, offsets, ngram, a, b, bands, rows):  # type: ignore[no-untyped-def]
        count = len(offsets) - 1
        perms = bands * rows
        out = np.zeros((count, bands), dtype=np.uint64)
        short = np.full((count, perms), 0xFFFF, dtype=np.uint16)
        sig = np.empty(perms, dtype=np.uint64)
        for doc in range(count):
            start, end = offsets[doc], offsets[doc + 1]
            if end == start:
                continue  # nothing left after normalization: no band, never a duplicate
            sig[:] = np.uint64(0xFFFFFFFFFFFFFFFF)
            width = min(ngram, end - start)
            for first in range(start, end - width + 1):
                h = np.uint64(width)
                for i in range(first, first + width):
                    h = mix(h ^ np.uint64(codes[i]))
                for k in range(perms):
                    v = (a[k] * h + b[k]) >> np.uint64(32)
                    if v < sig[k]:
                        sig[k] = v
            for band in range(bands):
                h = mix(np.uint64(band + 1))
                for k in range(band * rows, (band + 1) * rows):
                    h = mix(h ^ sig[k])
                out[doc, band] = h | np.uint64(1)  # never 0, the "no band" mark
            for k in range(perms):
                short[doc, k] = np.uint16(sig[k] & np.uint64(0xFFFF))
        return out, short

    return {"filter": filter_codes, "minhash": band_hashes}


_KERNEL: list[dict[str, object]] = []


def _kernel() -> dict[str, object]:
    if not _KERNEL:
        _KERNEL.append(_kernels())
    return _KERNEL[0]


def signatures(
    texts: Sequence[str], ngram: int, a: np.ndarray, b: np.ndarray, bands: int, rows: int
) -> tuple[np.ndarray, np.ndarray]:
    """(len(texts), bands) uint64: each normalized text's band hashes (0 for a text that is
    empty after normalization: it joins no cluster); and (len(texts), bands * rows) uint16:
    the low 16 bits of each MinHash value, for estimating a candidate pair's similarity
    (:func:`similarity`; two different values agree by chance once in 65,536)."""
    codes, offsets = _prepared(texts)
    hashes, short = _kernel()["minhash"](codes, offsets, ngram, a, b, bands, rows)  # type: ignore[operator]
    return hashes, short


class SignatureFile:
    """The (pairs, values) uint16 signatures a step wrote to disk, read row by row with
    ``pread``: a memory map would keep every page it touched (and the kernel's fault-around
    neighbours) in the process's resident memory, the whole file at scale."""

    def __init__(self, path: Path, width: int) -> None:
        self.path = path
        self.width = width

    def rows(self, index: np.ndarray) -> np.ndarray:
        size = self.width * 2
        fd = os.open(self.path, os.O_RDONLY)
        try:
            data = b"".join(os.pread(fd, size, int(i) * size) for i in index)
        finally:
            os.close(fd)
        return np.frombuffer(data, dtype=np.uint16).reshape(len(index), self.width)


def similarity(
    sigs: np.ndarray | SignatureFile, first: np.ndarray, other: np.ndarray
) -> np.ndarray:
    """The estimated Jaccard similarity of each pair (first[i], other[i]): the share of their
    MinHash values that agree. ``sigs``: the signatures in memory, or on disk."""
    if not len(first):
        return np.zeros(0)
    if isinstance(sigs, np.ndarray):
        return (sigs[first] == sigs[other]).mean(axis=1)  # type: ignore[no-any-return]
    needed = np.unique(np.concatenate([first, other]))
    table = sigs.rows(needed)
    a = table[np.searchsorted(needed, first)]
    b = table[np.searchsorted(needed, other)]
    return (a == b).mean(axis=1)  # type: ignore[no-any-return]


def threshold(bands: int, rows: int) -> float:
    """The similarity where the S-curve is steepest, about where a pair becomes a duplicate."""
    return float((1.0 / bands) ** (1.0 / rows))


class Buckets:
    """Band hashes with their pair numbers, scattered over ``count`` files in ``folder`` by
    hash, so that finding equal hashes needs one file in memory at a time (16 bytes a record,
    ``pairs * bands / count`` records a file)."""

    def __init__(self, folder: Path, count: int, handles: Sequence[BinaryIO] | None = None) -> None:
        """``handles``: the bucket files opened by the caller (an :class:`AppendLog`'s, named
        as :meth:`name` says), who then closes them; else created here."""
        self.folder = folder
        self.count = count
        folder.mkdir(parents=True, exist_ok=True)
        self.own = handles is None
        self.handles = list(handles or [open(self.path(i), "wb") for i in range(count)])  # noqa: SIM115

    @staticmethod
    def name(number: int) -> str:
        return f"bucket-{number:05d}.bin"

    def path(self, number: int) -> Path:
        return self.folder / self.name(number)

    def add(self, hashes: np.ndarray, first_index: int) -> None:
        """``hashes`` (n, bands) of pairs ``first_index`` ... ``first_index + n - 1``."""
        n, bands = hashes.shape
        index = np.repeat(np.arange(first_index, first_index + n, dtype=np.uint64), bands)
        flat = hashes.reshape(-1)
        keep = flat != _EMPTY
        records: np.ndarray = np.empty((int(keep.sum()), 2), dtype=np.uint64)
        records[:, 0] = flat[keep]
        records[:, 1] = index[keep]
        scatter(records, (records[:, 0] >> np.uint64(40)) % np.uint64(self.count), self.handles)

    def close(self) -> None:
        if self.own:
            for handle in self.handles:
                handle.close()

    def edges(
        self, done: Callable[[int], object] = lambda _: None
    ) -> Iterable[tuple[np.ndarray, np.ndarray]]:
        """Per bucket file: pairs (first, other) of pair numbers sharing a band hash, each
        group's members joined to its lowest number; ``done(1)`` as each file is read."""
        for number in range(self.count):
            records = np.fromfile(self.path(number), dtype=np.uint64).reshape(-1, 2)
            done(1)
            if len(records) < 2:
                continue
            order = np.lexsort((records[:, 1], records[:, 0]))
            keys, index = records[order, 0], records[order, 1]
            starts = np.ones(len(keys), dtype=bool)
            starts[1:] = keys[1:] != keys[:-1]
            group_first = index[np.maximum.accumulate(np.where(starts, np.arange(len(keys)), 0))]
            joined = ~starts
            yield group_first[joined].astype(np.int64), index[joined].astype(np.int64)


class UnionFind:
    """Clusters of pair numbers joined by edge arrays, each cluster's root its lowest number;
    4 bytes a pair (8 above 2**31 pairs)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.dtype = np.int32 if size < 2**31 else np.int64
        self.parent = np.arange(size, dtype=self.dtype)

    def roots(self, x: np.ndarray) -> np.ndarray:
        """The current root of each of ``x``."""
        parent = self.parent
        x = x.astype(self.dtype, copy=False)
        while True:
            up = parent[x]
            if (up == x).all():
                return x
            grand = parent[up]
            parent[x] = grand  # path halving
            x = grand

    def join(self, first: np.ndarray, other: np.ndarray) -> None:
        """Joins the clusters of ``first[i]`` and ``other[i]`` for every ``i``."""
        while len(first):
            a, b = self.roots(first), self.roots(other)
            low, high = np.minimum(a, b), np.maximum(a, b)
            differ = low != high
            if not differ.any():
                break
            low, high = low[differ], high[differ]
            # several edges may point one root at different roots: the lowest wins, the rest
            # are retried against the new roots in the next round
            np.minimum.at(self.parent, high, low)
            first, other = low, high

    def result(self) -> np.ndarray:
        """Each pair number's cluster root."""
        return self.roots(np.arange(self.size, dtype=self.dtype))


def union_find(size: int, edges: Iterable[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """Each pair number's cluster root (the lowest number in its cluster), from edge arrays."""
    clusters = UnionFind(size)
    for first, other in edges:
        clusters.join(first, other)
    return clusters.result()


def keep_one(roots: np.ndarray, scores: np.ndarray | None, higher_is_better: bool) -> np.ndarray:
    """A bool mask keeping one pair per cluster: the best-scored (ties: the earliest), or the
    earliest without scores."""
    index = np.arange(len(roots), dtype=roots.dtype)
    if scores is None:
        return roots == index
    rank = -scores if higher_is_better else scores
    order = np.lexsort((index, rank, roots))
    first = np.ones(len(order), dtype=bool)
    first[1:] = roots[order][1:] != roots[order][:-1]
    keep = np.zeros(len(roots), dtype=bool)
    keep[order[first]] = True
    return keep
