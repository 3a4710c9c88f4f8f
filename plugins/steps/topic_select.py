"""Test-set-related selection (Yishu §2.2.2): training pairs whose source shares topic n-grams
or rare words with the test-set source, for in-domain fine-tuning.

Yishu gives no formula; it follows Li et al. (2020, SJTU-NICT at WMT20: "the TF-IDF algorithm
to filter the training set to obtain a domain more similar set with the test set") and Wang et
al. (2021), reasoning that low-frequency words "pertain to domain-specific nouns and other
related terms that directly reflect the topic". Our reading, and its settings:

- terms are word n-grams (``max_n``, 1-2 by default) of the source side, lowercased, words as
  the ``lm`` filter's tokens (MeCab for Japanese, jieba for Chinese, whitespace otherwise) with
  punctuation stripped; a term with no letter (numbers, symbols) is never a topic term;
- a *topic term* is a term of the test-set source whose document frequency in the training
  sources is at most ``max_df`` (a fraction of the pairs): rare in the corpus, so it carries the
  test set's topic, while function words ("the", "of") that every pair shares do not count;
- a pair's score is the TF-IDF weight it shares with the test set: the sum of
  ``idf = ln(N / df)`` over the distinct topic terms its source contains (binary term
  frequency: a sentence is short); a pair is related when it shares at least ``min_terms``
  topic terms, and ``top_k``/``top_fraction`` keep the best related pairs by score.

Only the test set's terms are counted (one pass of the corpus, sharded over the executor), so
memory follows the test set, not the corpus. Outputs the selected pairs, a score table aligned
with the input (columns ``topic.score`` and ``topic.terms``) for ``select`` and reports, and the
topic terms with their document frequencies.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import regex
from pydantic import Field, model_validator

from mtcore.api import (
    BlockReader,
    Corpus,
    CorpusWriter,
    DataError,
    KeepSpec,
    PluginConfig,
    RawBlock,
    Step,
    StepContext,
    map_shards,
    ranked_cut,
    worker_memo,
)
from mtcore_plugins.steps.select import write_scores

WORD = regex.compile(r"[\p{L}\p{M}\p{N}_]+")
LETTER = regex.compile(r"\p{L}")


class TopicSelectConfig(PluginConfig):
    lang: str | None = Field(
        None, description="source language (corpus and test-set column); the corpus' first"
    )
    max_n: int = Field(2, ge=1, le=5, description="longest n-gram counted as a term")
    max_df: float = Field(
        0.01,
        gt=0,
        le=1,
        description="a test term is a topic term when at most this fraction of the training "
        "sources contain it (rare in the corpus)",
    )
    min_terms: int = Field(
        1, ge=1, le=1000, description="topic terms a pair must share with the test set"
    )
    top_k: int | None = Field(
        None, ge=1, description="then keep this many related pairs, best first"
    )
    top_fraction: float | None = Field(
        None, gt=0, le=1, description="then keep this fraction of the related pairs, best first"
    )
    lowercase: bool = Field(True, description="compare lowercased words")
    shard_size: int = Field(20_000, ge=1, le=10_000_000, description="pairs per task")

    @model_validator(mode="after")
    def _one(self) -> TopicSelectConfig:
        if self.top_k is not None and self.top_fraction is not None:
            raise ValueError("give at most one of top_k, top_fraction")
        return self


def terms(text: str, lang: str, max_n: int, lowercase: bool) -> set[str]:
    """The distinct word n-grams (1..max_n) of ``text`` that contain a letter."""
    from mtcore_plugins.common.tokens import tokens

    words = [w for token in tokens(text, lang) for w in WORD.findall(token)]
    if lowercase:
        words = [w.lower() for w in words]
    found = set()
    for n in range(1, max_n + 1):
        for i in range(len(words) - n + 1):
            gram = words[i : i + n]
            if any(LETTER.search(w) for w in gram):
                found.add(" ".join(gram))
    return found


class TopicSelectStep(Step):
    """Outputs ``corpus`` (related pairs, corpus order), ``scores`` (one row per input pair:
    shared TF-IDF weight and number of shared topic terms) and ``terms/terms.tsv`` (each topic
    term with its document frequency and idf)."""

    name = "topic_select"
    Config = TopicSelectConfig
    config: TopicSelectConfig
    inputs: ClassVar[dict[str, bool]] = {"corpus": True, "test": True}
    outputs: ClassVar[tuple[str, ...]] = ("corpus", "scores", "terms")

    def run(self, ctx: StepContext) -> None:
        config = self.config
        corpus = Corpus.open(ctx.inputs["corpus"].path)
        test = Corpus.open(ctx.inputs["test"].path)
        lang = config.lang or corpus.langs[0]
        for name, where in (("corpus", corpus), ("test", test)):
            if lang not in where.langs:
                raise DataError(
                    f"{ctx.step_id}: language {lang!r} is not in the {name} input {where.path} "
                    f"({list(where.langs)})"
                )
        vocab = self._test_terms(test, lang)
        vocab_file = ctx.scratch("vocab") / "terms.json"  # data, never a pickle
        vocab_file.write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
        task = (str(vocab_file), corpus.langs, corpus.langs.index(lang), config.max_n)
        store = ctx.scratch("matches")
        df = np.zeros(len(vocab), dtype=np.int64)
        total = 0
        for raw, (_, ids) in self._matches(ctx, corpus, task, store):
            df += np.bincount(ids, minlength=len(vocab))
            total += raw.count
        topic = (df > 0) & (df <= config.max_df * total)
        idf = np.where(topic, np.log(np.maximum(total, 1) / np.maximum(df, 1)), 0.0)
        scores, shared = np.zeros(total), np.zeros(total, dtype=np.int64)
        start = 0
        for raw, (offsets, ids) in self._matches(ctx, corpus, task, store):
            rows = np.repeat(np.arange(raw.count), np.diff(offsets))
            scores[start : start + raw.count] = np.bincount(rows, idf[ids], minlength=raw.count)
            shared[start : start + raw.count] = np.bincount(
                rows, topic[ids].astype(np.int64), minlength=raw.count
            )
            start += raw.count
        keep = self._cut(scores, shared)
        self._write(ctx, corpus, keep, scores, shared)
        self._write_terms(ctx.output("terms"), vocab, df, topic, idf)
        ctx.stats.add("pairs_in", total)
        ctx.stats.add("topic_terms", int(topic.sum()))
        ctx.stats.add("pairs_related", int((shared >= config.min_terms).sum()))
        ctx.stats.add("pairs_out", int(keep.sum()))

    def _test_terms(self, test: Corpus, lang: str) -> dict[str, int]:
        column = test.langs.index(lang)
        found: dict[str, int] = {}
        for pair in test:
            for term in sorted(terms(pair[column], lang, self.config.max_n, self.config.lowercase)):
                found.setdefault(term, len(found))
        return found

    def _matches(
        self, ctx: StepContext, corpus: Corpus, task: tuple[Any, ...], store: Path
    ) -> Iterator[tuple[RawBlock, tuple[np.ndarray, np.ndarray]]]:
        """Per shard, the test terms each source contains (CSR: offsets, term ids). The second
        call reads the results the first one saved."""
        return map_shards(
            ctx.executor,
            match_task,
            BlockReader(corpus.files(), self.config.shard_size),
            lambda raw: (*task, self.config.lowercase, raw),
            store,
        )

    def _cut(self, scores: np.ndarray, shared: np.ndarray) -> np.ndarray:
        config = self.config
        keep = shared >= config.min_terms
        if config.top_k is None and config.top_fraction is None:
            return keep
        spec = KeepSpec(top_k=config.top_k, top_fraction=config.top_fraction)
        alive = np.flatnonzero(keep)
        keep[alive[~ranked_cut(scores[alive], spec, higher_is_better=True)]] = False
        return keep

    def _write(
        self,
        ctx: StepContext,
        corpus: Corpus,
        keep: np.ndarray,
        scores: np.ndarray,
        shared: np.ndarray,
    ) -> None:
        with CorpusWriter(ctx.output("corpus"), corpus.langs) as writer:
            start = 0
            for raw in BlockReader(corpus.files(), self.config.shard_size):
                mask = keep[start : start + raw.count]
                sides = [raw.kept_bytes(side, mask) for side in range(len(raw.raws))]
                writer.write_raw(sides, int(mask.sum()))
                start += raw.count
        table = np.column_stack([scores, shared.astype(np.float64)])
        write_scores(ctx.output("scores"), ["topic.score", "topic.terms"], table)

    @staticmethod
    def _write_terms(
        out: Path, vocab: dict[str, int], df: np.ndarray, topic: np.ndarray, idf: np.ndarray
    ) -> None:
        with open(out / "terms.tsv", "w", encoding="utf-8", newline="\n") as handle:
            handle.write("term\tdf\tidf\n")
            for term, i in vocab.items():
                if topic[i]:
                    handle.write(f"{term}\t{int(df[i])}\t{idf[i]:.6f}\n")


def match_task(task: tuple[Any, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Runs in a worker: the test-term ids of each source of one shard, as CSR arrays."""
    vocab_file, langs, column, max_n, lowercase, raw = task
    vocab: dict[str, int] = worker_memo(
        ("topic vocabulary", vocab_file),
        lambda: json.loads(Path(vocab_file).read_text(encoding="utf-8")),
    )
    lang = langs[column]
    offsets = [0]
    ids: list[int] = []
    for line in raw.decode(langs).columns[column].lines:
        ids.extend(sorted(vocab[t] for t in terms(line, lang, max_n, lowercase) if t in vocab))
        offsets.append(len(ids))
    return np.asarray(offsets, dtype=np.int64), np.asarray(ids, dtype=np.int64)
