"""Corpus BLEU through sacrebleu, with the tokenizer chosen by target language.

Several references are scored together (sacrebleu's multi-reference BLEU: n-gram counts clipped
by the maximum over the references, the closest reference length per segment), as the
``bleu-all`` column of the official WMT tables.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
from pydantic import Field

from mtcore.api import DataError, Metric, PluginConfig, Score

Tokenizer = Literal[
    "auto", "wmt", "13a", "intl", "zh", "ja-mecab", "ko-mecab", "char", "flores200", "none"
]
# sacrebleu's own recommendation per target language.
AUTO_TOKENIZER = {"ja": "ja-mecab", "zh": "zh", "ko": "ko-mecab"}
# The official WMT22 and WMT23 automatic tables (wmt22/wmt23-news-systems
# scores/automatic-scores.tsv): character BLEU into Japanese, sacrebleu's zh tokenizer into
# Chinese, 13a otherwise. tests/e2e/test_wmt_scores.py reproduces every team's score with these.
WMT_TOKENIZER = {"ja": "char", "zh": "zh"}
MAX_ORDER = 4
WIDTH = 2 + 2 * MAX_ORDER  # a row of segment statistics: hyp_len, ref_len, correct_n, total_n


def base_lang(lang: str) -> str:
    """``ja`` for ``ja``, ``ja-JP``, ``zh_Hans``."""
    return lang.replace("_", "-").split("-", 1)[0].lower()


def auto_tokenizer(tokenize: str, lang: str) -> str:
    """The sacrebleu tokenizer that ``tokenize`` means for target language ``lang``."""
    if tokenize == "auto":
        return AUTO_TOKENIZER.get(base_lang(lang), "13a")
    if tokenize == "wmt":
        return WMT_TOKENIZER.get(base_lang(lang), "13a")
    return tokenize


class BleuConfig(PluginConfig):
    tokenize: Tokenizer = Field(
        "auto",
        description="sacrebleu tokenizer; auto: sacrebleu's choice by language (ja-mecab, zh, "
        "ko-mecab, else 13a); wmt: the official WMT22/23 tables' choice (char into Japanese, "
        "zh into Chinese, else 13a)",
    )
    lowercase: bool = Field(False, description="case-insensitive BLEU")
    smooth_method: Literal["exp", "floor", "add-k", "none"] = Field(
        "exp", description="sacrebleu smoothing"
    )


class BleuMetric(Metric[BleuConfig]):
    name = "bleu"

    score_name = "BLEU"

    def sacrebleu(self, lang: str, sentence: bool = False, force: bool = False) -> Any:
        """The sacrebleu BLEU this metric scores ``lang`` with (for paired significance tests);
        ``sentence``: with effective order, as ``sacrebleu.sentence_bleu``; ``force``: no
        warning about text that looks tokenized (n-best lists often are)."""
        from sacrebleu.metrics import BLEU

        return BLEU(
            tokenize=auto_tokenizer(self.config.tokenize, lang),
            lowercase=self.config.lowercase,
            smooth_method=self.config.smooth_method,
            effective_order=sentence,
            force=force,
        )  # no trg_lang: the tokenizer is explicit, and it only adds "consider ja-mecab" warnings

    def segment_statistics(
        self,
        hyps: Sequence[str],
        refs: Sequence[Sequence[str]],
        lang: str,
        of: Sequence[int] | None = None,
    ) -> np.ndarray:
        """``[hyp_len, ref_len, correct_1..4, total_1..4]`` (int64) per hypothesis, sacrebleu's
        own segment statistics (pinned 2.5.1: the code path of ``corpus_score``); each
        reference segment is tokenized once however many hypotheses read it."""
        if not refs:
            raise DataError("BLEU statistics need at least one reference stream")
        segments = len(refs[0])
        for number, stream in enumerate(refs):
            if len(stream) != segments:
                raise DataError(
                    f"reference stream {number} has {len(stream)} segments, stream 0 has "
                    f"{segments}: every stream needs one segment per source sentence"
                )
        rows = list(range(len(hyps))) if of is None else list(of)
        if len(rows) != len(hyps) or any(not 0 <= r < segments for r in rows):
            raise DataError(
                f"{len(hyps)} hypotheses for {segments} reference segments: each hypothesis "
                "needs a reference segment"
            )
        if not hyps:
            return np.zeros((0, WIDTH), dtype=np.int64)
        metric = self.sacrebleu(lang, force=True)
        cache = metric._cache_references([list(stream) for stream in refs])
        stats = [
            metric._compute_segment_statistics(metric._preprocess_segment(text), cache[row])
            for text, row in zip(hyps, rows, strict=True)
        ]
        return np.asarray(stats, dtype=np.int64).reshape(-1, WIDTH)

    def score_statistics(self, stats: Any, sentence: bool = False) -> np.ndarray:
        """BLEU (0-100) of each row, as ``corpus_score`` of the segments summed into it
        (``sentence``: ``sentence_score``, with effective order); exp-smoothed corpus BLEU runs
        compiled, for the tuners' inner loops."""
        from sacrebleu.metrics import BLEU

        rows = np.asarray(stats)
        if rows.ndim != 2 or rows.shape[1] != WIDTH:
            raise ValueError(f"BLEU statistics are rows of {WIDTH}, got {rows.shape}")
        smooth = self.config.smooth_method
        if smooth == "exp" and not sentence:
            from mtcore_plugins.metrics._bleu_stats import corpus_bleus

            return np.asarray(corpus_bleus(rows.astype(np.float64)))
        out = np.empty(len(rows))
        for i, row in enumerate(rows.astype(np.int64).tolist()):
            out[i] = BLEU.compute_bleu(
                correct=row[2 : 2 + MAX_ORDER],
                total=row[2 + MAX_ORDER :],
                sys_len=row[0],
                ref_len=row[1],
                smooth_method=smooth,
                effective_order=sentence,
            ).score
        return out

    def corpus_score(self, hyps: Sequence[str], refs: Sequence[Sequence[str]], lang: str) -> Score:
        metric = self.sacrebleu(lang)
        result = metric.corpus_score(list(hyps), [list(r) for r in refs])
        details = {
            "precisions": [round(p, 4) for p in result.precisions],
            "bp": round(result.bp, 4),
            "sys_len": result.sys_len,
            "ref_len": result.ref_len,
        }
        return Score("BLEU", round(result.score, 4), str(metric.get_signature()), details)
