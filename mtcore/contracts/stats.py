"""Counters a step reports (pairs in, out, dropped per filter, bad input handled per rule)."""

from __future__ import annotations

from collections import Counter
from typing import Any


class Stats:
    """Named integer counters, mergeable across shards; order of first use is kept."""

    def __init__(self, counts: dict[str, int] | None = None) -> None:
        self.counts: Counter[str] = Counter()
        if counts:
            self.counts.update(counts)

    def add(self, key: str, n: int = 1) -> None:
        self.counts[key] += n

    def merge(self, other: Stats | dict[str, int]) -> None:
        self.counts.update(other.counts if isinstance(other, Stats) else other)

    def __getitem__(self, key: str) -> int:
        return self.counts[key]

    def as_dict(self) -> dict[str, Any]:
        return dict(self.counts)
