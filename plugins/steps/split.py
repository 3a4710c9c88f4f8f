"""Splits a corpus into train / valid / test by a seeded random choice of lines."""

from __future__ import annotations

import random
from typing import ClassVar

from pydantic import Field

from mtcore.corpus import Corpus, CorpusWriter
from mtcore.errors import DataError
from mtcore.plugin import PluginConfig
from mtcore.step import Step, StepContext


class SplitConfig(PluginConfig):
    valid_size: int = Field(500, ge=0, le=10_000_000, description="pairs held out for validation")
    test_size: int = Field(500, ge=0, le=10_000_000, description="pairs held out for testing")
    seed: int = Field(1, ge=0, description="seed of the random choice")


class SplitStep(Step):
    """Held-out pairs are chosen uniformly at random with a fixed seed; every split keeps the
    corpus order, and every input pair lands in exactly one split."""

    name = "split"
    Config = SplitConfig
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
        role = dict.fromkeys(chosen[: self.config.valid_size], 1)
        role.update(dict.fromkeys(chosen[self.config.valid_size :], 2))
        writers = [CorpusWriter(ctx.output(name), corpus.langs) for name in self.outputs]
        for index, pair in enumerate(corpus):
            writers[role.get(index, 0)].write(pair)
        for name, writer in zip(self.outputs, writers, strict=True):
            writer.close()
            ctx.stats.add(f"pairs.{name}", writer.lines)
