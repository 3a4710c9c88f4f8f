"""Moore-Lewis cross-entropy difference (Moore and Lewis 2010), for in-domain data selection.

Score of a sentence s: ``H_in(s) - H_gen(s)``, the per-token cross-entropy (log10, ``</s>``
counted, as :func:`mtcore_plugins.steps.kenlm.log10_perplexity`) under a KenLM model of the
in-domain text minus that under a model of a random sample of the general pool the sentences
are selected from. Lower is better: negative means more in-domain than general. NT5 §3.3
selects "the top 20,000 scored sentences" (``keep: {top_k: 20000}`` in a clean step, or a
score step and a ``select`` step with ``top_k: 20000, direction: lower``).

Both models come from ``kenlm`` steps, connected to the clean/score step under the input roles
named by ``in_domain`` and ``general``. ``side`` picks the source side (Moore and Lewis), the
target side, or both (their sum: Axelrod et al. 2011's bilingual cross-entropy difference).

Moore and Lewis score both models over one vocabulary, the in-domain one; with
``shared_vocab`` (default) a word the in-domain model has never seen is queried as ``<unk>``
in both models, so a general-only word cannot make a sentence look in-domain merely because
the in-domain model gives every unknown word the same probability.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from mtcore.api import Filter, Pair, PluginConfig, PluginError
from mtcore_plugins.filters.lm import LanguageModelFilter, load_model

UNK = "<unk>"


class MooreLewisConfig(PluginConfig):
    in_domain: str = Field(
        "in_domain",
        min_length=1,
        description="step input role connected to the in-domain kenlm step",
    )
    general: str = Field(
        "general",
        min_length=1,
        description="step input role connected to the kenlm step of a general-pool sample",
    )
    side: Literal["source", "target", "both"] = Field(
        "source",
        description="which side to score: source (Moore and Lewis 2010), target, or both "
        "(the sum of the two sides' differences)",
    )
    source: str | None = Field(
        None, description="the source language; the corpus' first language when unset"
    )
    max_score: float | None = Field(
        0.0,
        description="highest difference kept (0: at least as likely in-domain as general); "
        "unset keeps every pair (rank with `keep` or a select step instead)",
    )
    shared_vocab: bool = Field(
        True,
        description="query words the in-domain model never saw as <unk> in both models (Moore "
        "and Lewis score over the in-domain vocabulary)",
    )


class MooreLewisFilter(Filter):
    """Score: H_in - H_gen per token (log10), summed over the chosen sides; lower is better."""

    name = "moore_lewis"
    Config = MooreLewisConfig
    higher_is_better = False

    def setup(self, langs: tuple[str, ...], resources: Mapping[str, Path] | None = None) -> None:
        super().setup(langs, resources)
        config = self.config
        assert isinstance(config, MooreLewisConfig)
        source = config.source if config.source is not None else langs[0]
        if source not in langs:
            raise PluginError(
                f"filter 'moore_lewis': source {source!r} is not a corpus language ({list(langs)})"
            )
        if config.side != "source" and len(langs) != 2:
            raise PluginError(
                f"filter 'moore_lewis': side {config.side!r} needs a parallel corpus of two "
                f"languages; the corpus has {list(langs)}"
            )
        column = langs.index(source)
        wanted = {"source": [column], "target": [1 - column], "both": [0, 1]}[config.side]
        self.sides = wanted if len(langs) == 2 else [column]
        self.paths: dict[str, dict[int, Path]] = {}
        for role in (config.in_domain, config.general):
            folder = self.resource(role)
            meta = LanguageModelFilter._meta(folder, role)
            missing = [langs[i] for i in self.sides if langs[i] not in meta["langs"]]
            if missing:
                raise PluginError(
                    f"filter 'moore_lewis': the kenlm model at {folder} (input {role!r}) has no "
                    f"model for {missing}; it has {meta['langs']}"
                )
            self.paths[role] = {i: folder / meta["files"][langs[i]] for i in self.sides}

    def cross_entropies(self, role: str, side: int, lines: Sequence[str]) -> list[float]:
        """log10 per-token cross-entropy of each tokenized line under one model."""
        model = load_model(self.paths[role][side])
        out = []
        for line in lines:
            words = line.count(" ") + 1 if line else 0
            out.append(-model.score(line, bos=True, eos=True) / (words + 1))
        return out

    def score(self, batch: Sequence[Pair]) -> list[float]:
        from mtcore_plugins.common.ngram import lm_line

        config = self.config
        assert isinstance(config, MooreLewisConfig)
        totals = [0.0] * len(batch)
        for side in self.sides:
            lines = [lm_line(pair[side], self.langs[side]) for pair in batch]
            if config.shared_vocab:
                vocab = load_model(self.paths[config.in_domain][side])
                lines = [" ".join(w if w in vocab else UNK for w in ln.split()) for ln in lines]
            inside = self.cross_entropies(config.in_domain, side, lines)
            general = self.cross_entropies(config.general, side, lines)
            for row, (h_in, h_gen) in enumerate(zip(inside, general, strict=True)):
                totals[row] += h_in - h_gen
        return totals

    def accept(self, score: Any) -> bool:
        config = self.config
        assert isinstance(config, MooreLewisConfig)
        limit = config.max_score
        return bool(limit is None or (math.isfinite(score) and score <= limit))
