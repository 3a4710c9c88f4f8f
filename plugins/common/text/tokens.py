"""Segmenter-aware tokens: words for languages written without spaces.

Japanese goes through MeCab with the IPA dictionary (fugashi over the ``ipadic`` package), as
NT5 tokenized it for its word-level rules (NT5 §3.2, footnote 3: "MeCab (Kudo, 2006) with the
IPA dictionary"; Xiaomi §2.1 segments Japanese with MeCab too, whose default dictionary it is);
Chinese through jieba; every other language splits on whitespace. UniDic (unidic-lite) cuts
finer ("どうして" -> "どう", "し", "て"), which inflates word ratios against English: on WMT's
clean En-Ja pairs NT5's word-ratio rule (> 4) dropped short pairs such as "Why?" against
"どうしてだろう" and a full-width question mark (5 UniDic words, 4 IPA words).
The segmenters are heavy, so they are built lazily, once per process (worker processes build
their own on first use).

This module is the one place words are counted: every word-based rule (``length`` and
``length_ratio`` with ``unit: token``, ``long_word``, ``avg_word_length``) asks it, and a chain
holding several of them segments each line once: the token lengths of the lines segmented last
are kept per process (:data:`CACHE_LINES` lines per language, a shard or two), keyed by the
line, so the second rule on the same shard reads them back instead of running MeCab again.
"""

from __future__ import annotations

import logging
import os
import re
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from mtcore.api import PluginError, cache_home, worker_memo
from mtcore_plugins.common.text import langcodes


def segmenter_lang(lang: str) -> str:
    """``ja`` or ``zh`` when ``lang`` needs a segmenter (``ja_JP``, ``zh-Hans``, ``cmn`` ...),
    else the empty string."""
    base = langcodes.iso1(lang)
    return base if base in ("ja", "zh") else ""


def _japanese() -> Any:
    """MeCab through fugashi, once per worker (it loads a dictionary)."""

    def build() -> Any:
        import fugashi
        import ipadic

        # -Owakati: surfaces separated by spaces, without building node objects (faster).
        return fugashi.GenericTagger(f"{ipadic.MECAB_ARGS} -Owakati")

    return worker_memo(("segmenter", "ja"), build)


def jieba_cache() -> Path:
    """Where jieba keeps its prefix-dictionary cache: a folder of mtcore's cache only this user
    may write. jieba's default is a fixed name in the shared temp directory, which it reads
    back with ``marshal``: anyone on the machine could plant one."""
    folder = cache_home() / "jieba"
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    if folder.stat().st_uid != os.getuid() or folder.stat().st_mode & 0o022:
        raise PluginError(f"{folder}: jieba's cache folder must be yours, writable by you alone")
    return folder


def _chinese() -> Any:
    """A jieba tokenizer, once per worker."""

    def build() -> Any:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # jieba imports the deprecated pkg_resources
            import jieba

        jieba.setLogLevel(logging.WARNING)
        tok = jieba.Tokenizer()
        tok.tmp_dir = str(jieba_cache())
        tok.initialize()
        return tok

    return worker_memo(("segmenter", "zh"), build)


# Runs the segmenters see: kana, CJK ideographs and symbols, full-width forms. What lies between
# them (Latin words, numbers, URLs, e-mail addresses) is split on whitespace only, as in the
# other languages: MeCab would cut an unknown Latin run into letters and pieces
# ("aaaa…" -> "a", "a", …, "aaaa"; a URL at every "/"), hiding garbage from the word rules.
_CJK = (
    "\u2e80-\u2fdf\u3000-\u30ff\u3100-\u31ff\u3200-\u4dbf\u4e00-\u9fff"
    "\uac00-\ud7af\uf900-\ufaff\ufe30-\ufe4f\uff00-\uffef\U00020000-\U0003134f"
)
_RUNS = re.compile(f"[{_CJK}]+|[^\\s{_CJK}]+")
_RUNS_CJK = re.compile(f"[{_CJK}]")


def tokens(text: str, lang: str) -> list[str]:
    """The words of ``text``; whitespace is never a token. In Japanese and Chinese the CJK runs
    go through the segmenter and every other run of non-space characters is one word."""
    kind = segmenter_lang(lang)
    if not kind:
        return text.split()
    out: list[str] = []
    for match in _RUNS.finditer(text):
        run = match.group()
        if run[0] > "\u2e7f" and _RUNS_CJK.match(run):
            if kind == "ja":
                out.extend(str(_japanese().parse(run)).split())
            else:
                out.extend(w for w in _chinese().cut(run, HMM=True) if not w.isspace())
        else:
            out.append(run)
    return out


def join_tokens(words: Sequence[str], lang: str, glued: frozenset[str] = frozenset()) -> str:
    """``words`` written back as text: with single spaces in a whitespace language; in Japanese
    and Chinese without spaces, except one between two words that meet in non-CJK characters
    (``New York``, ``3 km``), so the line reads as the language is written. A word in ``glued``
    (the noise's ``<blank>``, a SentencePiece user symbol) never takes a space there."""
    if not segmenter_lang(lang):
        return " ".join(words)
    out: list[str] = []
    last = ""
    for word in words:
        spaced = last and last not in glued and word not in glued
        if spaced and not _RUNS_CJK.match(last[-1]) and not _RUNS_CJK.match(word[0]):
            out.append(" ")
        out.append(word)
        last = word
    return "".join(out)


CACHE_LINES = 65_536
"""Lines whose token lengths are remembered per language and process (about two shards)."""


def token_lengths(texts: Sequence[str], lang: str) -> list[tuple[int, ...]]:
    """The length in characters of each :func:`tokens` of each text, in order. Segmented
    languages go through the per-process cache; whitespace languages are split directly."""
    kind = segmenter_lang(lang)
    if not kind:
        return [tuple(map(len, t.split())) for t in texts]
    cache: dict[str, tuple[int, ...]] = worker_memo(("token lengths", kind), dict)
    out: list[tuple[int, ...]] = []
    for text in texts:
        hit = cache.get(text)
        if hit is None:
            if len(cache) >= CACHE_LINES:
                cache.clear()  # cheaper than LRU bookkeeping; a chain reuses lines at once
            hit = cache[text] = tuple(map(len, tokens(text, kind))) if text else ()
        out.append(hit)
    return out


def count_tokens(texts: Sequence[str], lang: str) -> np.ndarray:
    """Number of :func:`tokens` of each text (int64, same order)."""
    if not segmenter_lang(lang):
        return np.fromiter((len(t.split()) for t in texts), dtype=np.int64, count=len(texts))
    lengths = token_lengths(texts, lang)
    return np.fromiter(map(len, lengths), dtype=np.int64, count=len(texts))


def longest_token(texts: Sequence[str], lang: str) -> np.ndarray:
    """Characters of the longest :func:`tokens` of each text, 0 for a text without any."""
    lengths = token_lengths(texts, lang)
    return np.fromiter((max(t, default=0) for t in lengths), dtype=np.int64, count=len(texts))
