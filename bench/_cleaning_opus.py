"""OpusFilter's closest equivalent of an mtcore cleaning chain, run on the same pairs.

Each mtcore filter maps to OpusFilter 3.3.1 filters with the same thresholds where the rule is
the same, or to the nearest rule OpusFilter has (noted); ``dedup`` maps to a
``remove_duplicates`` step at the same place in the chain. Rules with no equivalent are left
out and named. Word-based rules: OpusFilter splits on whitespace and has no tokenizer in its
length rules, so on a Chinese or Japanese side they count characters (``CJK_CHARS_PER_TOKEN``
per token of the mtcore limit) or do not apply (long and average word length).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from _cleaning_chains import Stage, entry_name, filter_config, kept_mask, write_corpus
from _cleaning_data import UNSPACED, Pair
from _opusfilter import run_opusfilter

CJK_CHARS_PER_TOKEN = 1.5
NO_LIMIT = 10**9
SCRIPTS = {"zh": "Han", "ja": "Han", "ru": "Cyrillic", "uk": "Cyrillic"}
TOKENIZERS = {"zh": ["jieba", "zh"], "ja": ["mecab", "ja"]}
INVALID = "[\ufffd\\p{Co}\\p{Cs}\\p{Cn}\\p{Cc}]"
ENTITY = "&(#[0-9]+|#[xX][0-9a-fA-F]+|[a-zA-Z][a-zA-Z0-9]*);"
NONE = "no OpusFilter equivalent"


def _cjk(langs: Sequence[str]) -> list[bool]:
    return [lang.split("-")[0] in UNSPACED for lang in langs]


def _units(unit: str, langs: Sequence[str]) -> list[str]:
    if unit == "char":
        return ["char", "char"]
    return ["char" if cjk else "word" for cjk in _cjk(langs)]


def equivalent(entry: Any, config: dict[str, Any], langs: Sequence[str]) -> tuple[list, str]:
    """OpusFilter filters standing for one mtcore chain entry, and a note ('' when the rule
    is the same)."""
    keep = entry.get("keep") if isinstance(entry, dict) else None
    if keep:
        if not keep.get("threshold_too"):
            return [], f"{NONE} (ranked cut)"
        filters, note = equivalent(entry_name(entry), config, langs)
        return filters, "; ".join(n for n in (note, "its ranked cut: none") if n)
    name = entry_name(entry)
    if name in SAME:
        return [{SAME[name]: dict(config)}], ""
    if name in FIXED:
        return [FIXED[name][0]], FIXED[name][1]
    if name in MAPPERS:
        return MAPPERS[name](config, langs)
    return [], NONE


def _length(config: dict[str, Any], langs: Sequence[str]) -> tuple[list, str]:
    tokens = config["unit"] == "token"
    scale = [CJK_CHARS_PER_TOKEN if cjk and tokens else 1 for cjk in _cjk(langs)]
    rule = {
        "unit": _units(config["unit"], langs),
        "min_length": config["min_length"],
        "max_length": [math.ceil(config["max_length"] * s) for s in scale],
    }
    return [{"LengthFilter": rule}], _chars_note(config, langs)


def _length_ratio(config: dict[str, Any], langs: Sequence[str]) -> tuple[list, str]:
    limit = config["max_ratio"] + (1e-9 if config["inclusive"] else 0)  # OpusFilter: <
    rule = {"unit": _units(config["unit"], langs), "threshold": limit}
    return [{"LengthRatioFilter": rule}], _chars_note(config, langs)


def _long_word(config: dict[str, Any], langs: Sequence[str]) -> tuple[list, str]:
    limits = [NO_LIMIT if c else config["max_chars"] + 1 for c in _cjk(langs)]  # OpusFilter: <
    return [{"LongWordFilter": {"threshold": limits}}], _cjk_note(langs)


def _avg_word_length(config: dict[str, Any], langs: Sequence[str]) -> tuple[list, str]:
    limits = [NO_LIMIT if c else config["max_ratio"] for c in _cjk(langs)]
    rule = {"min_length": 0, "max_length": limits}
    return [{"AverageWordLengthFilter": rule}], _cjk_note(langs)


def _char_repetition(config: dict[str, Any], langs: Sequence[str]) -> tuple[list, str]:
    return [
        {"RepetitionFilter": {"threshold": times, "min_length": n, "max_length": n}}
        for n, times in sorted(config["limits"].items())
    ], "spaces allowed between repeats"


def _langid(config: dict[str, Any], langs: Sequence[str]) -> tuple[list, str]:
    low = config["min_prob"]
    rule = {"languages": list(langs), "thresholds": low if isinstance(low, list) else [low] * 2}
    note = "" if config["backend"] == "langid" else f"langid.py for {config['backend']}"
    return [{"LangidFilter": rule}], note


def _alignment(config: dict[str, Any], langs: Sequence[str]) -> tuple[list, str]:
    limit = -math.log(max(config["min_probability"], 1e-12))
    rule = {"src_threshold": limit, "tgt_threshold": limit, "model": config["model"]}
    for key, lang in zip(("src_tokenizer", "tgt_tokenizer"), langs, strict=True):
        if lang in TOKENIZERS:
            rule[key] = TOKENIZERS[lang]
    return [{"WordAlignFilter": rule}], "each direction below -log p"


def _chars_note(config: dict[str, Any], langs: Sequence[str]) -> str:
    return "CJK side in characters" if config["unit"] == "token" and any(_cjk(langs)) else ""


def _cjk_note(langs: Sequence[str]) -> str:
    return "not on a CJK side" if any(_cjk(langs)) else ""


def _scripts(config: dict[str, Any], langs: Sequence[str]) -> tuple[list, str]:
    scripts = [SCRIPTS.get(lang, "Latin") for lang in langs]
    if config["preset"] == "yishu":
        return [{"CharacterScoreFilter": {"scripts": scripts, "thresholds": [0.6, 0.6]}}], ""
    if config["preset"] != "xiaomi":
        return [], NONE
    limits = [0.15 if lang == "zh" else 0.0 for lang in langs]
    rules: list[dict[str, Any]] = [
        {"CharacterScoreFilter": {"scripts": scripts, "thresholds": limits}}
    ]
    if "ja" in langs:
        kana = ["\\p{Hiragana}|\\p{Katakana}" if lang == "ja" else "" for lang in langs]
        rules.append({"RegExpFilter": {"regexps": kana, "accept_match": True}})
    return rules, "ja: kana required, no ratio"


SAME = {
    "repetition": "RepetitionFilter",
    "terminal_punctuation": "TerminalPunctuationFilter",
    "nonzero_numerals": "NonZeroNumeralsFilter",
}
FIXED: dict[str, tuple[dict[str, Any], str]] = {
    "empty": ({"LengthFilter": {"unit": "char", "min_length": 1, "max_length": NO_LIMIT}}, ""),
    "identical": ({"SimilarityFilter": {"threshold": 1.0, "unit": "char"}}, ""),
    "invalid_unicode": ({"RegExpFilter": {"regexps": INVALID}}, "a regular expression"),
    "escaped_html": ({"RegExpFilter": {"regexps": ENTITY}}, "a regular expression"),
    "final_punctuation": (
        {"TerminalPunctuationFilter": {"threshold": -2}},
        "a penalty, not agreement",
    ),
    "numbers": ({"NonZeroNumeralsFilter": {"threshold": 0.5}}, "digit similarity"),
    "markup": ({"HtmlTagFilter": {}}, "tags only"),
    "html_tag": ({"HtmlTagFilter": {}}, ""),
}
MAPPERS: dict[str, Callable[[dict[str, Any], Sequence[str]], tuple[list, str]]] = {
    "length": _length,
    "length_ratio": _length_ratio,
    "long_word": _long_word,
    "avg_word_length": _avg_word_length,
    "char_repetition": _char_repetition,
    "langid": _langid,
    "alignment": _alignment,
    "script_ratio": _scripts,
}


def plan(stages_: Sequence[Stage], langs: Sequence[str], registry: Any):
    """OpusFilter steps (lists of filters, or ``dedup`` keys) and a note per mtcore filter."""
    steps: list[Any] = []
    notes: list[tuple[str, str, str]] = []
    for stage in stages_:
        for entry in stage.filters:
            config = filter_config(registry, entry)
            label = f"{stage.step}.{entry_name(entry)}"
            if entry_name(entry) == "dedup":
                steps.append(("dedup", config["key"]))
                notes.append((label, "remove_duplicates", ""))
                continue
            filters, note = equivalent(entry, config, langs)
            names = ", ".join(next(iter(f)) for f in filters) or "-"
            notes.append((label, names, note))
            if filters:
                if not steps or not isinstance(steps[-1], list):
                    steps.append([])
                steps[-1].extend(filters)
    return steps, notes


def run(steps: Sequence[Any], pairs: Sequence[Pair], langs: tuple[str, str], work: Path):
    """Runs the OpusFilter steps on the pairs; returns which pairs it kept."""
    work.mkdir(parents=True, exist_ok=True)
    write_corpus(work, pairs, langs)
    current = [f"corpus.{lang}" for lang in langs]
    config: list[dict[str, Any]] = []
    for number, step in enumerate(steps):
        outputs = [f"step{number}.{lang}" for lang in langs]
        io = {"inputs": current, "outputs": outputs}
        if isinstance(step, tuple):
            compare = {"pair": "all", "source": [0], "target": [1]}.get(step[1], "all")
            config.append({"type": "remove_duplicates", "parameters": {**io, "compare": compare}})
        else:
            config.append({"type": "filter", "parameters": {**io, "filters": step}})
        current = outputs
    if not config:
        return np.ones(len(pairs), dtype=bool)
    extras = tuple(e for e in ("eflomal", "jieba", "mecab") if _needs(steps, e))
    run_opusfilter(config, work, extras)
    out = [(work / name).read_text("utf-8").split("\n")[:-1] for name in current]
    return kept_mask(pairs, list(zip(out[0], out[1], strict=True)))


def _needs(steps: Sequence[Any], extra: str) -> bool:
    text = repr(steps)
    return {"eflomal": "WordAlignFilter", "jieba": "'jieba'", "mecab": "'mecab'"}[extra] in text
