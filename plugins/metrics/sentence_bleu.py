"""Sentence BLEU: sacrebleu's ``sentence_bleu`` of every segment (exp smoothing, effective
order), from the ``bleu`` metric's segment statistics (Xiaomi §3.4 labels RankSVM pairs by the
order of their sentence-level BLEU). The plugin's corpus score is the mean over segments."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import Field

from mtcore.api import DataError, Metric, PluginConfig, Score
from mtcore_plugins.metrics.bleu import BleuConfig, BleuMetric, Tokenizer


def _check(hyps: Sequence[str], refs: Sequence[Sequence[str]]) -> None:
    if not refs:
        raise DataError("sentence BLEU needs at least one reference stream")
    for i, ref in enumerate(refs):
        if len(ref) != len(hyps):
            raise DataError(
                f"reference stream {i} has {len(ref)} segments but there are {len(hyps)} "
                "hypotheses: each reference stream needs one segment per hypothesis"
            )


def sentence_bleu(
    hyps: Sequence[str],
    refs: Sequence[Sequence[str]],
    lang: str,
    tokenize: str = "auto",
    lowercase: bool = False,
) -> list[float]:
    """sacrebleu's sentence BLEU of every hypothesis (exp smoothing, effective order)."""
    _check(hyps, refs)
    bleu = BleuMetric(BleuConfig(tokenize=tokenize, lowercase=lowercase))  # type: ignore[arg-type]
    scores = bleu.score_statistics(bleu.segment_statistics(hyps, refs, lang), sentence=True)
    return [float(s) for s in scores]


class SentenceBleuConfig(PluginConfig):
    tokenize: Tokenizer = Field(
        "auto", description="sacrebleu tokenizer, as for the bleu metric (auto, wmt, 13a, ...)"
    )
    lowercase: bool = Field(False, description="case-insensitive BLEU")


class SentenceBleuMetric(Metric[SentenceBleuConfig]):
    """The mean sentence BLEU of a corpus; :meth:`segment_scores` gives each segment's."""

    name = "sentence_bleu"

    def segment_scores(
        self,
        hyps: Sequence[str],
        refs: Sequence[Sequence[str]],
        lang: str,
        sources: Sequence[str] | None = None,
    ) -> list[float]:
        """Each hypothesis' sentence BLEU against the references at its index; the sources
        are not read."""
        return sentence_bleu(hyps, refs, lang, self.config.tokenize, self.config.lowercase)

    def corpus_score(self, hyps: Sequence[str], refs: Sequence[Sequence[str]], lang: str) -> Score:
        scores = self.segment_scores(hyps, refs, lang)
        mean = sum(scores) / len(scores) if scores else 0.0
        config = BleuConfig(tokenize=self.config.tokenize, lowercase=self.config.lowercase)
        metric = BleuMetric(config).sacrebleu(lang, sentence=True)
        counts = {sum(x is not None for x in segment) for segment in zip(*refs, strict=True)}
        metric.num_refs = counts.pop() if len(counts) == 1 else -1  # as sacrebleu counts them
        return Score(
            "sentBLEU", round(mean, 4), str(metric.get_signature()), {"segments": len(scores)}
        )
