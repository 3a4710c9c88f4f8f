"""Corpus chrF (chrF++ with word_order 2) through sacrebleu, and sentence chrF per segment
(:meth:`ChrfMetric.segment_scores`: the ``evaluate`` step's paired bootstrap, the ``mbr``
step's default utility)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import Field

from mtcore.api import DataError, Metric, PluginConfig, Score
from mtcore.api.engine import check_lengths


class ChrfConfig(PluginConfig):
    char_order: int = Field(6, ge=1, le=10, description="character n-gram order")
    word_order: int = Field(0, ge=0, le=4, description="word n-gram order (2 gives chrF++)")
    beta: int = Field(2, ge=1, le=10, description="recall weight")
    lowercase: bool = Field(False, description="case-insensitive")


class ChrfMetric(Metric[ChrfConfig]):
    name = "chrf"

    @property
    def score_name(self) -> str:
        return "chrF++" if self.config.word_order else "chrF"

    def sacrebleu(self, lang: str) -> Any:
        """The sacrebleu CHRF this metric scores with (for paired significance tests)."""
        from sacrebleu.metrics import CHRF

        cfg = self.config
        return CHRF(
            char_order=cfg.char_order,
            word_order=cfg.word_order,
            beta=cfg.beta,
            lowercase=cfg.lowercase,
        )

    def segment_scores(
        self,
        hyps: Sequence[str],
        refs: Sequence[Sequence[str]],
        lang: str,
        sources: Sequence[str] | None = None,
    ) -> list[float]:
        """sacrebleu's ``CHRF.sentence_score`` of every hypothesis against the references at
        its index in every stream (the best-matching one, as sacrebleu takes several; None
        is no reference); the sources are not read. Each distinct text's n-grams are counted
        once per call, through sacrebleu's own extraction, so MBR's every-candidate-against-
        every-sample pairs cost a third of scoring them one by one."""
        check_lengths(hyps, refs, [f"reference stream {i}" for i in range(len(refs))])
        if not refs:
            raise DataError("sentence chrF needs at least one reference stream")
        metric = self.sacrebleu(lang)
        counted: dict[str, Any] = {}

        def ngrams(text: str) -> Any:
            if text not in counted:
                info = metric._extract_reference_info([metric._preprocess_segment(text)])
                counted[text] = info["ref_ngrams"][0]
            return counted[text]

        scores = []
        for i, (hyp, *segment) in enumerate(zip(hyps, *refs, strict=True)):
            mine = ngrams(hyp)
            best = -1.0  # sacrebleu: the first reference with the highest F score
            for ref in segment:
                if ref is None:
                    continue
                stats = []
                for hyp_counts, ref_counts in zip(mine, ngrams(ref), strict=True):
                    stats.extend(metric._get_match_statistics(hyp_counts, ref_counts))
                best = max(best, metric._compute_f_score(stats))
            if best < 0:
                raise DataError(f"segment {i} has no reference in any stream")
            scores.append(float(best))
        return scores

    def corpus_score(self, hyps: Sequence[str], refs: Sequence[Sequence[str]], lang: str) -> Score:
        metric = self.sacrebleu(lang)
        result = metric.corpus_score(list(hyps), [list(r) for r in refs])
        return Score(self.score_name, round(result.score, 4), str(metric.get_signature()))
