"""Moore-Lewis cross-entropy difference (Moore and Lewis 2010), shared by the ``moore_lewis``
filter and the ``moore_lewis`` selector.

Score of a sentence s: ``H_in(s) - H_gen(s)``, the per-token cross-entropy (log10, ``</s>``
counted, as :func:`mtcore_plugins.common.lm.ngram.log10_perplexity`) under a KenLM model of the
in-domain text minus that under a model of a random sample of the general pool the sentences
are selected from. Lower is better: negative means more in-domain than general. ``side`` picks
the source side (Moore and Lewis), the target side, or both (their sum: Axelrod et al. 2011's
bilingual cross-entropy difference).

Moore and Lewis score both models over one vocabulary, the in-domain one; with
``shared_vocab`` (default) a word the in-domain model has never seen is queried as ``<unk>``
in both models, so a general-only word cannot make a sentence look in-domain merely because
the in-domain model gives every unknown word the same probability.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal

from pydantic import Field

from mtcore.api import Artifact, Pair, PluginConfig, PluginError
from mtcore_plugins.common.lm.ngram import kenlm_meta, lm_line, load_model

UNK = "<unk>"


class CrossEntropyConfig(PluginConfig):
    """The model settings of the ``moore_lewis`` filter and selector."""

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
    shared_vocab: bool = Field(
        True,
        description="query words the in-domain model never saw as <unk> in both models (Moore "
        "and Lewis score over the in-domain vocabulary)",
    )


class CrossEntropyDifference:
    """``H_in - H_gen`` per token (log10) of each pair, summed over the chosen sides; built
    from the settings, the corpus languages and the two kenlm artifacts, by ``plugin`` (named
    in errors). Picklable: the models load once per process when first queried."""

    def __init__(
        self,
        config: CrossEntropyConfig,
        langs: tuple[str, ...],
        folders: Mapping[str, Path],
        plugin: str,
    ) -> None:
        source = config.source if config.source is not None else langs[0]
        if source not in langs:
            raise PluginError(
                f"{plugin}: source {source!r} is not a corpus language ({list(langs)})"
            )
        if config.side != "source" and len(langs) != 2:
            raise PluginError(
                f"{plugin}: side {config.side!r} needs a parallel corpus of two languages; the "
                f"corpus has {list(langs)}"
            )
        column = langs.index(source)
        wanted = {"source": [column], "target": [1 - column], "both": [0, 1]}[config.side]
        self.langs = langs
        self.sides = wanted if len(langs) == 2 else [column]
        self.shared_vocab = config.shared_vocab
        self.paths: dict[str, dict[int, Path]] = {}
        for role, key in ((config.in_domain, "in_domain"), (config.general, "general")):
            folder = folders[role]
            meta = kenlm_meta(folder, role, plugin)
            missing = [langs[i] for i in self.sides if langs[i] not in meta["langs"]]
            if missing:
                raise PluginError(
                    f"{plugin}: the kenlm model at {folder} (input {role!r}) has no model for "
                    f"{missing}; it has {meta['langs']}"
                )
            lm = Artifact(folder, meta)
            self.paths[key] = {i: lm.member(meta["files"][langs[i]]) for i in self.sides}

    def cross_entropies(self, model: str, side: int, lines: Sequence[str]) -> list[float]:
        """log10 per-token cross-entropy of each tokenized line under one model."""
        lm = load_model(self.paths[model][side])
        out = []
        for line in lines:
            words = line.count(" ") + 1 if line else 0
            out.append(-lm.score(line, bos=True, eos=True) / (words + 1))
        return out

    def scores(self, batch: Sequence[Pair]) -> list[float]:
        totals = [0.0] * len(batch)
        for side in self.sides:
            lines = [lm_line(pair[side], self.langs[side]) for pair in batch]
            if self.shared_vocab:
                vocab = load_model(self.paths["in_domain"][side])
                lines = [" ".join(w if w in vocab else UNK for w in ln.split()) for ln in lines]
            inside = self.cross_entropies("in_domain", side, lines)
            general = self.cross_entropies("general", side, lines)
            for row, (h_in, h_gen) in enumerate(zip(inside, general, strict=True)):
                totals[row] += h_in - h_gen
        return totals
