"""Splits a corpus into train / valid / test by a seeded random choice of lines."""

from __future__ import annotations

import random
from typing import ClassVar

import numpy as np
from pydantic import Field

from mtcore.api import BlockReader, Corpus, CorpusWriter, DataError, PluginConfig, Step, StepContext

BLOCK_LINES = 100_000


class SplitConfig(PluginConfig):
    valid_size: int = Field(500, ge=0, le=10_000_000, description="pairs held out for validation")
    test_size: int = Field(500, ge=0, le=10_000_000, description="pairs held out for testing")
    seed: int = Field(1, ge=0, description="seed of the random choice")


class SplitStep(Step[SplitConfig]):
    """Held-out pairs are chosen uniformly at random with a fixed seed; every split keeps the
    corpus order, and every input pair lands in exactly one split."""

    name = "split"
    inputs: ClassVar[dict[str, bool]] = {"corpus": True}
    outputs: ClassVar[tuple[str, ...]] = ("train", "valid", "test")

    def run(self, ctx: StepContext) -> None:
        corpus = Corpus.open(ctx.inputs["corpus"].path)
        total = corpus.count()
        held = self.config.valid_size + self.config.test_size
        if held >= total:
            raise DataError(
                f"{ctx.step_id}: corpus has {total} pairs, too few to hold out "
                f"{self.config.valid_size} + {self.config.test_size} and keep any for training"
            )
        chosen = random.Random(self.config.seed).sample(range(total), held)
        # held-out line numbers in order, with their split (1 valid, 2 test): memory for the
        # held-out pairs only, whatever the corpus size
        order = np.argsort(chosen, kind="stable")
        held_at = np.asarray(chosen, dtype=np.int64)[order]
        held_role = np.where(order < self.config.valid_size, 1, 2).astype(np.int8)
        writers = [CorpusWriter(ctx.output(name), corpus.langs) for name in self.outputs]
        # Lines are copied as bytes: a corpus in the workdir is already checked text.
        for raw in BlockReader(corpus.files(), BLOCK_LINES):
            first = raw.first_line - 1
            lo, hi = np.searchsorted(held_at, [first, first + raw.count])
            role = np.zeros(raw.count, dtype=np.int8)
            role[held_at[lo:hi] - first] = held_role[lo:hi]
            for number, writer in enumerate(writers):
                keep = role == number
                if keep.any():
                    sides = [raw.kept_bytes(side, keep) for side in range(len(raw.raws))]
                    writer.write_raw(sides, int(keep.sum()))
        for name, writer in zip(self.outputs, writers, strict=True):
            writer.close()
            ctx.stats.add(f"pairs.{name}", writer.lines)
