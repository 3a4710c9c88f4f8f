"""Test-set-related selection (Yishu §2.2.2), shared by the ``topic_select`` step and the
``topic`` selector: training pairs whose source shares topic n-grams or rare words with the
test-set source.

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
  topic terms.

Only the test set's terms are counted (one pass of the corpus, sharded over the executor, its
matches saved for the scoring pass), so memory follows the test set, not the corpus.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import regex
from pydantic import Field

from mtcore.api import (
    BlockReader,
    Corpus,
    DataError,
    PluginConfig,
    RawBlock,
    StepContext,
    map_shards,
    worker_memo,
)

WORD = regex.compile(r"[\p{L}\p{M}\p{N}_]+")
LETTER = regex.compile(r"\p{L}")


class TopicConfig(PluginConfig):
    """The term settings of the ``topic_select`` step and the ``topic`` selector."""

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
    lowercase: bool = Field(True, description="compare lowercased words")
    shard_size: int = Field(20_000, ge=1, le=10_000_000, description="pairs per task")

    def language(self, corpus: Corpus, test: Corpus, where: str) -> str:
        """The source language, checked to be in both the corpus and the test set."""
        lang = self.lang or corpus.langs[0]
        for name, found in (("corpus", corpus), ("test", test)):
            if lang not in found.langs:
                raise DataError(
                    f"{where}: language {lang!r} is not in the {name} input {found.path} "
                    f"({list(found.langs)})"
                )
        return lang


def terms(text: str, lang: str, max_n: int, lowercase: bool) -> set[str]:
    """The distinct word n-grams (1..max_n) of ``text`` that contain a letter."""
    from mtcore_plugins.common.text.tokens import tokens

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


@dataclass
class TopicTerms:
    """The test set's terms (term -> id, in test-set order), their document frequencies in
    the corpus, which are topic terms and their idf; ``total`` is the corpus size and ``task``
    what every matching task of the corpus carries (vocabulary file, languages, column, n)."""

    vocab: dict[str, int]
    df: np.ndarray
    topic: np.ndarray
    idf: np.ndarray
    total: int
    task: tuple[Any, ...]

    def write(self, out: Path) -> None:
        """``terms.tsv``: each topic term with its document frequency and idf."""
        with open(out / "terms.tsv", "w", encoding="utf-8", newline="\n") as handle:
            handle.write("term\tdf\tidf\n")
            for term, i in self.vocab.items():
                if self.topic[i]:
                    handle.write(f"{term}\t{int(self.df[i])}\t{self.idf[i]:.6f}\n")


def fit_terms(
    config: TopicConfig, corpus: Corpus, test: Corpus, lang: str, ctx: StepContext
) -> TopicTerms:
    """The topic terms of ``test`` in ``corpus``: one sharded pass counting document
    frequencies (its matches saved in ``ctx.scratch("matches")`` for :func:`score_pairs`)."""
    vocab = test_set_terms(config, test, lang)
    vocab_file = ctx.scratch("vocab") / "terms.json"  # data, never a pickle
    vocab_file.write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    task = (str(vocab_file), corpus.langs, corpus.langs.index(lang), config.max_n)
    df = np.zeros(len(vocab), dtype=np.int64)
    total = 0
    for raw, (_, ids) in matches(config, corpus, task, ctx):
        df += np.bincount(ids, minlength=len(vocab))
        total += raw.count
    topic = (df > 0) & (df <= config.max_df * total)
    idf = np.where(topic, np.log(np.maximum(total, 1) / np.maximum(df, 1)), 0.0)
    return TopicTerms(vocab, df, topic, idf, total, task)


def score_pairs(
    config: TopicConfig, corpus: Corpus, found: TopicTerms, ctx: StepContext
) -> tuple[np.ndarray, np.ndarray]:
    """Per pair: the idf it shares with the test set, and how many topic terms it shares."""
    scores, shared = np.zeros(found.total), np.zeros(found.total, dtype=np.int64)
    start = 0
    for raw, (offsets, ids) in matches(config, corpus, found.task, ctx):
        rows = np.repeat(np.arange(raw.count), np.diff(offsets))
        scores[start : start + raw.count] = np.bincount(rows, found.idf[ids], minlength=raw.count)
        shared[start : start + raw.count] = np.bincount(
            rows, found.topic[ids].astype(np.int64), minlength=raw.count
        )
        start += raw.count
    return scores, shared


def test_set_terms(config: TopicConfig, test: Corpus, lang: str) -> dict[str, int]:
    """Every term of the test-set source, numbered in order of first appearance."""
    column = test.langs.index(lang)
    found: dict[str, int] = {}
    for pair in test:
        for term in sorted(terms(pair[column], lang, config.max_n, config.lowercase)):
            found.setdefault(term, len(found))
    return found


def matches(
    config: TopicConfig, corpus: Corpus, task: tuple[Any, ...], ctx: StepContext
) -> Iterator[tuple[RawBlock, tuple[np.ndarray, np.ndarray]]]:
    """Per shard, the test terms each source contains (CSR: offsets, term ids). The second
    call reads the results the first one saved."""
    return map_shards(
        ctx.executor,
        match_task,
        BlockReader(corpus.files(), config.shard_size),
        lambda raw: (*task, config.lowercase, raw),
        ctx.scratch("matches"),
    )


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
