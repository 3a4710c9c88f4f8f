"""Segmenter-aware tokens: words for languages written without spaces.

Japanese goes through MeCab (fugashi with the unidic-lite dictionary), as NT5 did for its
word-level rules (NT5 §3.2); Chinese through jieba; every other language splits on whitespace.
The segmenters are heavy, so they are built lazily, once per process (worker processes build
their own on first use).
"""

from __future__ import annotations

import logging
import tempfile
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

_SEGMENTERS: dict[str, Any] = {}

# Language codes as recipes spell them (ISO 639-1/-3, with region or script suffixes).
_ALIASES = {"jpn": "ja", "zho": "zh", "chi": "zh", "cmn": "zh", "yue": "zh", "wuu": "zh"}


def segmenter_lang(lang: str) -> str:
    """``ja`` or ``zh`` when ``lang`` needs a segmenter (``ja_JP``, ``zh-Hans``, ``cmn`` ...),
    else the empty string."""
    base = lang.replace("-", "_").split("_", 1)[0].lower()
    base = _ALIASES.get(base, base)
    return base if base in ("ja", "zh") else ""


def _japanese() -> Any:
    tagger = _SEGMENTERS.get("ja")
    if tagger is None:
        import fugashi  # lazy: MeCab loads a dictionary

        # -Owakati: surfaces separated by spaces, without building node objects (faster).
        tagger = fugashi.Tagger("-Owakati")
        _SEGMENTERS["ja"] = tagger
    return tagger


def _chinese() -> Any:
    tok = _SEGMENTERS.get("zh")
    if tok is None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # jieba imports the deprecated pkg_resources
            import jieba

        jieba.setLogLevel(logging.WARNING)
        tok = jieba.Tokenizer()
        # jieba writes its prefix-dictionary cache on first use: keep it in the temp dir.
        tok.tmp_dir = tempfile.gettempdir()
        tok.initialize()
        _SEGMENTERS["zh"] = tok
    return tok


def tokens(text: str, lang: str) -> list[str]:
    """The words of ``text``; whitespace is never a token."""
    kind = segmenter_lang(lang)
    if kind == "ja":
        return str(_japanese().parse(text)).split()
    if kind == "zh":
        return [w for w in _chinese().cut(text, HMM=True) if not w.isspace()]
    return text.split()


def count_tokens(texts: Sequence[str], lang: str) -> np.ndarray:
    """Number of :func:`tokens` of each text (int64, same order)."""
    kind = segmenter_lang(lang)
    if kind == "ja":
        parse = _japanese().parse
        it = (len(str(parse(t)).split()) if t else 0 for t in texts)
    elif kind == "zh":
        cut = _chinese().cut
        it = (sum(1 for w in cut(t, HMM=True) if not w.isspace()) for t in texts)
    else:
        it = (len(t.split()) for t in texts)
    return np.fromiter(it, dtype=np.int64, count=len(texts))
