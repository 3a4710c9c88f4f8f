"""Draws an exact-size, seeded, uniform sample of a corpus's lines without replacement, in
corpus order: the papers' monolingual volumes (NT5 §3.2's 1.4B and 1.2B sentences, Xiaomi §4.1's
"random sample with 160M sentences") out of larger crawls.

Streaming, memory of one block whatever the corpus size: the corpus is counted, then read in
blocks of ``BLOCK_LINES``; each block keeps a number of lines drawn from the hypergeometric law
of the lines still needed among the lines still unread (numpy's ``Generator`` seeded by
``seed``), and which of its lines those are uniformly. Every ``size``-subset is equally likely,
so the sample is the same as one drawn from the whole file at once. numpy's hypergeometric takes
counts below 10^9: beyond that (a corpus of over a billion lines) a block's count is the
binomial draw of the same mean, clipped to what the remaining lines allow (the relative
difference in variance is the block's share of the unread lines, under 10^-4), so the size
stays exact. A corpus of ``size`` lines or fewer is kept whole, and the stats say so.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

import numpy as np
from pydantic import Field

from mtcore.api import BlockReader, Corpus, CorpusWriter, PluginConfig, Step, StepContext

BLOCK_LINES = 100_000
HYPERGEOMETRIC_LIMIT = 10**9  # numpy: "both ngood and nbad must be less than 1000000000"


class SampleConfig(PluginConfig):
    size: int = Field(
        ge=1, le=10**12, description="lines (pairs) to keep; a smaller corpus is kept whole"
    )
    seed: int = Field(1, ge=0, le=2**63 - 1, description="seed of the random choice")


def block_count(rng: np.random.Generator, need: int, left: int, block: int) -> int:
    """How many of the next ``block`` lines of ``left`` unread ones a uniform sample that still
    needs ``need`` of them keeps."""
    if need == 0 or block == 0:
        return 0
    if need < HYPERGEOMETRIC_LIMIT and left - need < HYPERGEOMETRIC_LIMIT:
        return int(rng.hypergeometric(need, left - need, block))
    drawn = int(rng.binomial(block, need / left))
    return min(max(drawn, block - (left - need)), need, block)


class SampleStep(Step[SampleConfig]):
    """One corpus in, ``min(size, lines)`` of its lines out, in their order. Stats:
    ``lines_in``, ``lines_out`` and ``kept_whole`` (1 when the corpus had no more than
    ``size`` lines)."""

    name = "sample"
    inputs: ClassVar[dict[str, bool]] = {"corpus": True}
    outputs: ClassVar[tuple[str, ...]] = ("corpus",)

    def volume(self, lines_in: Mapping[str, float | None]) -> dict[str, float]:
        known = lines_in.get("corpus")
        size = float(self.config.size)
        return {"lines": size if known is None else min(size, known)}

    def run(self, ctx: StepContext) -> None:
        corpus = Corpus.open(ctx.inputs["corpus"].path)
        total = corpus.count()
        need = min(self.config.size, total)
        rng = np.random.default_rng(self.config.seed)
        left = total
        whole = need == total
        with CorpusWriter(ctx.output("corpus"), corpus.langs) as writer:
            # lines are copied as bytes: a corpus in the workdir is already checked text
            for raw in BlockReader(corpus.files(), BLOCK_LINES):
                count = raw.count
                keep_n = count if whole else block_count(rng, need, left, count)
                keep = np.zeros(count, dtype=bool)
                if keep_n == count:
                    keep[:] = True
                elif keep_n:
                    keep[rng.choice(count, keep_n, replace=False)] = True
                if keep_n:
                    sides = [raw.kept_bytes(side, keep) for side in range(len(raw.raws))]
                    writer.write_raw(sides, keep_n)
                need -= keep_n
                left -= count
        ctx.stats.add("lines_in", total)
        ctx.stats.add("lines_out", writer.lines)
        ctx.stats.add("kept_whole", int(whole))
        if whole and total < self.config.size:
            ctx.log.warning(
                "%s: the corpus has %d lines, fewer than size %d: all kept",
                ctx.step_id,
                total,
                self.config.size,
            )
