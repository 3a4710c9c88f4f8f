"""Duplicate removal over the whole corpus (NT5 §3.2, HW-TSC §2.2)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import ClassVar, Literal

from pydantic import Field

from mtcore.plugin import Filter, Pair, PluginConfig


class DedupConfig(PluginConfig):
    key: Literal["pair", "source", "target"] = Field(
        "pair", description="what must be unique: the whole pair, or one side"
    )
    normalize: bool = Field(False, description="compare case-folded text with whitespace collapsed")


class DedupFilter(Filter):
    """Score: 1 for a segment whose key was seen earlier in the corpus, else 0. Stateful: the
    runner feeds it the whole corpus in order in one process, so the first copy is kept."""

    name = "dedup"
    Config = DedupConfig
    stateful: ClassVar[bool] = True

    def setup(self, langs: tuple[str, ...]) -> None:
        super().setup(langs)
        self.seen: set[bytes] = set()

    def _key(self, pair: Pair) -> bytes:
        if self.config.key == "source":
            parts: Sequence[str] = pair[:1]
        elif self.config.key == "target":
            parts = pair[-1:]
        else:
            parts = pair
        text = "\t".join(parts)
        if self.config.normalize:
            text = " ".join(text.casefold().split())
        # 16 bytes of blake2b: collisions are negligible at WMT scale and memory stays small.
        return hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest()

    def score(self, batch: Sequence[Pair]) -> list[int]:
        out = []
        for pair in batch:
            key = self._key(pair)
            out.append(1 if key in self.seen else 0)
            self.seen.add(key)
        return out

    def accept(self, score: int) -> bool:
        return score == 0
