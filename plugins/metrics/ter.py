"""Translation Edit Rate (Snover et al. 2006) through sacrebleu: edits per reference word,
lower is better. sacrebleu's TER is exact but slow (about 20 ms a segment on news sentences)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from pydantic import Field

from mtcore.api import Metric, PluginConfig, Score


class TerConfig(PluginConfig):
    normalized: bool = Field(False, description="tercom's -N: tokenize and normalize punctuation")
    no_punct: bool = Field(False, description="remove punctuation before scoring")
    asian_support: bool = Field(
        False,
        description="split CJK characters and Japanese/Chinese punctuation (needs normalized)",
    )
    case_sensitive: bool = Field(False, description="tercom's -s: case matters")


class TerMetric(Metric[TerConfig]):
    """Corpus TER; ``details`` holds the edit and reference-word counts it is the ratio of."""

    name = "ter"
    higher_is_better: ClassVar[bool] = False

    def corpus_score(self, hyps: Sequence[str], refs: Sequence[Sequence[str]], lang: str) -> Score:
        from sacrebleu.metrics import TER

        cfg = self.config
        metric = TER(
            normalized=cfg.normalized,
            no_punct=cfg.no_punct,
            asian_support=cfg.asian_support,
            case_sensitive=cfg.case_sensitive,
        )
        result = metric.corpus_score(list(hyps), [list(r) for r in refs])
        details = {"edits": result.num_edits, "ref_length": result.ref_length}
        return Score("TER", round(result.score, 4), str(metric.get_signature()), details)
