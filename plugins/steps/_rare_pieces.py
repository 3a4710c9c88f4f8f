"""The ``binarize`` step's rare-subword filter (Xiaomi §4.1: "filter out sentence pairs
consisting of rare subword units with a frequency threshold of less than 6 to speed up the
training"): a training pair is dropped when a piece of its source occurs fewer than
``min_count`` times on the source side of the encoded training data, or a piece of its target
on the target side (each side counted alone, as the paper's two vocabularies were)."""

from __future__ import annotations

import os
from collections import Counter
from contextlib import ExitStack
from pathlib import Path


def piece_counts(path: Path) -> Counter[str]:
    """Occurrences of each space-separated piece of an encoded file."""
    counts: Counter[str] = Counter()
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            counts.update(line.split())
    return counts


def drop_rare_pairs(files: tuple[Path, Path], min_count: int) -> tuple[int, int, list[int]]:
    """Rewrites the encoded source and target ``files`` (line-aligned) without the pairs that
    hold a piece rarer than ``min_count`` on its side. Returns (pairs kept, pairs dropped, the
    number of rare pieces of each side)."""
    rare = []
    for path in files:
        counts = piece_counts(path)
        rare.append({piece for piece, n in counts.items() if n < min_count})
    kept = dropped = 0
    with ExitStack() as stack:
        readers = [stack.enter_context(open(p, encoding="utf-8")) for p in files]
        writers = [
            stack.enter_context(open(f"{p}.kept", "w", encoding="utf-8", newline="\n"))
            for p in files
        ]
        for src, tgt in zip(*readers, strict=True):
            if rare[0].intersection(src.split()) or rare[1].intersection(tgt.split()):
                dropped += 1
                continue
            writers[0].write(src)
            writers[1].write(tgt)
            kept += 1
    for path in files:
        os.replace(f"{path}.kept", path)
    return kept, dropped, [len(pieces) for pieces in rare]
