"""Concatenates corpora with per-corpus weights or upsampling to a target ratio.

NT5 §4.2 trains on "the bitext upsampled to 1:1 with the synthetic data"; ``ratio: {bitext: 1,
bt: 1}`` says that, and ``weights: {bitext: 2}`` repeats a corpus a fixed number of times.

Counts are exact and deterministic. An input of ``n`` pairs contributes ``round(w * n)`` pairs,
rounding the exact decimal product half up (``1.5 x 301 = 451.5 -> 452``): ``floor(w * n / n)``
whole copies of the corpus, then ``w * n mod n`` further pairs chosen uniformly without
replacement (Knuth's selection sampling, in corpus order, seeded by ``seed`` and the input's
role name, so the choice does not change with other inputs). With ``ratio`` the input with the
largest ``n / share`` keeps its ``n`` pairs and every other input is upsampled to ``share *
that`` (same rounding): mixing only ever repeats data, never drops any. Pairs are written input
by input in the order the inputs are listed; training shuffles them.
"""

from __future__ import annotations

import random
from fractions import Fraction
from pathlib import Path
from typing import ClassVar

import numpy as np
from pydantic import Field, field_validator, model_validator

from mtcore.api import (
    BlockReader,
    Corpus,
    CorpusWriter,
    DataError,
    PluginConfig,
    Step,
    StepContext,
    StepError,
)
from mtcore_plugins.steps._sampling import role_rng, round_half_up

SHARD = 100_000
MAX_WEIGHT = 1000.0


class MixConfig(PluginConfig):
    weights: dict[str, float] = Field(
        default_factory=dict,
        description="input role -> weight: pairs out = weight x pairs in (2 repeats a corpus, "
        "1.5 adds a seeded half, 0.5 keeps a seeded half); unnamed inputs weigh 1",
    )
    ratio: dict[str, float] = Field(
        default_factory=dict,
        description="input role -> share of the output, naming every input (NT5 §4.2: "
        "{bitext: 1, bt: 1}); inputs are upsampled, never downsampled, to reach it",
    )
    langs: list[str] | None = Field(
        None, description="column order of the output; default: the first input's languages"
    )
    seed: int = Field(1, ge=0, le=2**31 - 1, description="seed of the choice of extra pairs")

    @field_validator("weights", "ratio")
    @classmethod
    def _positive(cls, value: dict[str, float]) -> dict[str, float]:
        for role, weight in value.items():
            if not 0.0 < weight <= MAX_WEIGHT:
                raise ValueError(f"{role!r}: {weight} must be > 0 and <= {MAX_WEIGHT:g}")
        return value

    @model_validator(mode="after")
    def _one_rule(self) -> MixConfig:
        if self.weights and self.ratio:
            raise ValueError("give weights or ratio, not both")
        return self


class MixStep(Step[MixConfig]):
    """Any number of corpus inputs (role names are free) holding the output languages;
    columns are picked by language. Counts pairs in and out per input (``mix.<role>.in``,
    ``mix.<role>.out``) and reports the effective weights."""

    name = "mix"
    inputs: ClassVar[dict[str, bool]] = {"*": True}
    outputs: ClassVar[tuple[str, ...]] = ("corpus",)

    def run(self, ctx: StepContext) -> None:
        c = self.config
        corpora = {role: Corpus.open(artifact.path) for role, artifact in ctx.inputs.items()}
        self._check_roles(ctx.step_id, list(corpora))
        langs = tuple(c.langs or next(iter(corpora.values())).langs)
        sizes = {role: corpus.count() for role, corpus in corpora.items()}
        targets = plan_counts(sizes, c.weights, c.ratio, ctx.step_id)
        with CorpusWriter(ctx.output("corpus"), langs) as writer:
            for role, corpus in corpora.items():
                missing = [lang for lang in langs if lang not in corpus.langs]
                if missing:
                    raise StepError(
                        f"{ctx.step_id}: input {role!r} ({corpus.path}) has languages "
                        f"{list(corpus.langs)}, not {missing}"
                    )
                files = [corpus.file(lang) for lang in langs]
                before = writer.lines
                write_repeated(writer, files, sizes[role], targets[role], role_rng(c.seed, role))
                if writer.lines - before != targets[role]:  # a corpus changed while read
                    raise StepError(
                        f"{ctx.step_id}: wrote {writer.lines - before} pairs of {role!r}, "
                        f"planned {targets[role]}"
                    )
                ctx.stats.add(f"mix.{role}.in", sizes[role])
                ctx.stats.add(f"mix.{role}.out", targets[role])
        ctx.stats.add("pairs_out", writer.lines)
        ctx.metrics["weights"] = {
            role: round(targets[role] / sizes[role], 6) if sizes[role] else 0.0 for role in sizes
        }

    def _check_roles(self, step_id: str, roles: list[str]) -> None:
        c = self.config
        for setting, named in (("weights", c.weights), ("ratio", c.ratio)):
            unknown = sorted(set(named) - set(roles))
            if unknown:
                raise StepError(
                    f"{step_id}: {setting} names {', '.join(map(repr, unknown))}, not an input "
                    f"(inputs: {', '.join(roles)})"
                )
        unnamed = [role for role in roles if role not in c.ratio]
        if c.ratio and unnamed:
            raise StepError(
                f"{step_id}: ratio must give every input a share; missing: {', '.join(unnamed)}"
            )


def plan_counts(
    sizes: dict[str, int], weights: dict[str, float], ratio: dict[str, float], step_id: str = "mix"
) -> dict[str, int]:
    """Pairs out per input, computed on exact decimals (``Fraction(str(0.1)) == 1/10``)."""
    if not ratio:
        return {
            role: round_half_up(Fraction(str(weights.get(role, 1.0))) * n)
            for role, n in sizes.items()
        }
    empty = [role for role, n in sizes.items() if n == 0]
    if empty:
        raise DataError(
            f"{step_id}: input {', '.join(empty)} is empty: no upsampling gives it a share "
            "of the ratio"
        )
    shares = {role: Fraction(str(ratio[role])) for role in sizes}
    scale = max(Fraction(n) / shares[role] for role, n in sizes.items())
    return {role: round_half_up(shares[role] * scale) for role in sizes}


def write_repeated(
    writer: CorpusWriter, files: list[Path], size: int, target: int, rng: random.Random
) -> None:
    """``target // size`` whole copies of the corpus, then ``target % size`` of its pairs
    chosen by selection sampling (Knuth, TAOCP 3.4.2, Algorithm S), in corpus order."""
    if size == 0:
        return
    copies, extra = divmod(target, size)
    for _ in range(copies):
        for raw in BlockReader(files, SHARD):
            writer.write_raw(raw.raws, raw.count)
    if not extra:
        return
    need, left = extra, size
    for raw in BlockReader(files, SHARD):
        keep = np.zeros(raw.count, dtype=bool)
        for i in range(raw.count):
            if rng.random() * left < need:
                keep[i] = True
                need -= 1
            left -= 1
        chosen = int(keep.sum())
        writer.write_raw([raw.kept_bytes(side, keep) for side in range(len(files))], chosen)
