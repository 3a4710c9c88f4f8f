"""Writing-system rules per language: the share of a side's letters written in the language's
own scripts, letters outside the allowed scripts, and scripts a side must contain.

Only letters count (Unicode category L): digits, punctuation, symbols and spaces are neutral.
A letter belongs to every script of its Script_Extensions property, so the prolonged sound
mark ``ー`` is both Hiragana and Katakana and ``々`` is Han. With ``unit: word`` a ratio counts
every Han, kana, Hangul or Thai letter (a syllable or morpheme) as one unit and every run of
letters of another script (a word: ``Peter``, ``SIGDial``) as one: a Latin name in a Chinese
sentence weighs as one character, as the Chinese name would weigh two or three, instead of
one per letter. Presets hold the papers' numbers:

- ``xiaomi`` (Xiaomi IWSLT20 §2.2.1): Chinese with a Chinese-character ratio below 0.15 or a
  letter other than Chinese or English removed; Japanese with a Japanese-character ratio below
  0.25 or a letter other than Chinese, Japanese or English removed; Japanese without any
  Hiragana or Katakana removed. Other languages: no rule.
- ``yishu`` (Yishu WMT23 §2.1.1): a "non-native character ratio" above 0.4 removed, in every
  language (native ratio at least 0.6), counted in characters (letters) as the paper says. It
  removes 3.8 % of clean WMT21-23 zh-en test pairs, nearly all Chinese lines naming a person,
  a company or a product in Latin letters; ``unit: word`` (a Latin name weighs as one
  character) removes 0.2 %, for a recipe that would rather keep them.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
from pydantic import Field

from mtcore.api import PluginConfig, PluginError, TextBlock, TextColumn, worker_memo
from mtcore_plugins.common.text import langcodes
from mtcore_plugins.filters._array import ArrayFilter

Script = Literal[
    "latin",
    "han",
    "hiragana",
    "katakana",
    "hangul",
    "cyrillic",
    "greek",
    "arabic",
    "hebrew",
    "thai",
    "devanagari",
    "georgian",
    "armenian",
]
SCRIPTS: tuple[str, ...] = Script.__args__  # type: ignore[attr-defined]
SYLLABIC: tuple[str, ...] = ("han", "hiragana", "katakana", "hangul", "thai")
"""Scripts whose every letter is a unit of ``unit: word`` (no spaces between their words)."""
FAILED = -1.0
"""The score of a side that breaks a hard rule (a letter outside the allowed scripts, or none
of a required script)."""

# Own scripts per language (ISO 639-1 base code); every other language is Latin-script.
NATIVE: dict[str, tuple[str, ...]] = {
    "ja": ("han", "hiragana", "katakana"),
    "zh": ("han",),
    "ko": ("hangul", "han"),
    "el": ("greek",),
    "he": ("hebrew",),
    "th": ("thai",),
    "ka": ("georgian",),
    "hy": ("armenian",),
    **dict.fromkeys(("ru", "uk", "be", "bg", "mk", "sr", "kk", "ky", "mn", "tg"), ("cyrillic",)),
    **dict.fromkeys(("ar", "fa", "ur", "ps"), ("arabic",)),
    **dict.fromkeys(("hi", "mr", "ne", "sa"), ("devanagari",)),
}


def base_lang(lang: str) -> str:
    """``zh_CN``, ``zh-Hans``, ``zho``, ``cmn`` -> ``zh`` (:func:`langcodes.iso1`)."""
    return langcodes.iso1(lang)


def script_tables() -> tuple[np.ndarray, np.ndarray]:
    """Per code point: a uint16 bit set of its scripts (bit i: ``SCRIPTS[i]``, from
    Script_Extensions) and whether it is a letter. Built once per worker."""
    tables: tuple[np.ndarray, np.ndarray] = worker_memo(("script tables",), _script_tables)
    return tables


def _script_tables() -> tuple[np.ndarray, np.ndarray]:
    import regex

    everything = "".join(map(chr, range(0x110000)))
    bits = np.zeros(0x110000, dtype=np.uint16)
    for i, script in enumerate(SCRIPTS):
        for m in regex.finditer(rf"\p{{scx={script.capitalize()}}}+", everything):
            bits[m.start() : m.end()] |= np.uint16(1 << i)
    letters = np.zeros(0x110000, dtype=bool)
    for m in regex.finditer(r"\p{L}+", everything):
        letters[m.start() : m.end()] = True
    return bits, letters


def mask_of(scripts: Any) -> int:
    return sum(1 << SCRIPTS.index(s) for s in scripts)


class ScriptRule(PluginConfig):
    native: list[Script] | None = Field(
        None, description="the language's own scripts (default: from the language code)"
    )
    min_ratio: float = Field(0.0, ge=0, le=1, description="lowest share of native letters kept")
    allowed: list[Script] | None = Field(
        None, description="scripts a letter may belong to (default: any)"
    )
    require: list[Script] = Field([], description="at least one letter of these scripts")
    unit: Literal["letter", "word"] = Field(
        "letter",
        description="what min_ratio counts: letters, or words (a Han, kana, Hangul or Thai "
        "letter is one, so is a run of letters of another script)",
    )


_PRESETS: dict[str, dict[str, ScriptRule]] = {
    "none": {},
    # Xiaomi §2.2.1 (Chinese 0.15, Japanese 0.25, Japanese needs kana).
    "xiaomi": {
        "zh": ScriptRule(min_ratio=0.15, allowed=["han", "latin"]),
        "ja": ScriptRule(
            min_ratio=0.25,
            allowed=["han", "hiragana", "katakana", "latin"],
            require=["hiragana", "katakana"],
        ),
    },
    # Yishu §2.1.1: non-native ratio above 0.4 removed; "*" is every language.
    "yishu": {"*": ScriptRule(min_ratio=0.6, unit="letter")},
}


class ScriptRatioConfig(PluginConfig):
    preset: Literal["yishu", "xiaomi", "none"] = Field(
        "yishu", description="the papers' settings: yishu (§2.1.1), xiaomi (§2.2.1) or none"
    )
    languages: dict[str, ScriptRule] = Field(
        {},
        description="per-language overrides of the preset (the fields given replace the "
        "preset's, keyed by the corpus language code or its base code)",
    )


class SideRule:
    """A resolved rule for one side: bit masks and the lowest ratio kept."""

    def __init__(self, lang: str, rule: ScriptRule) -> None:
        native = rule.native if rule.native is not None else NATIVE.get(base_lang(lang), ["latin"])
        self.native = mask_of(native)
        self.allowed = mask_of(rule.allowed) if rule.allowed is not None else 0
        self.require = mask_of(rule.require)
        self.min_ratio = rule.min_ratio
        self.words = rule.unit == "word"

    def score(self, column: TextColumn) -> np.ndarray:
        bits_table, letters_table = script_tables()
        codes = column.codes
        letters = letters_table[codes]
        bits = bits_table[codes]
        units = word_units(letters, bits) if self.words else letters
        total = column.count_in(units)
        native = column.count_in(units & ((bits & self.native) != 0))
        ratio = np.ones(column.count, dtype=np.float64)
        np.divide(native, total, out=ratio, where=total > 0)
        if self.allowed:
            outside = column.count_in(letters & ((bits & self.allowed) == 0))
            ratio[outside > 0] = FAILED
        if self.require:
            ratio[column.count_in(letters & ((bits & self.require) != 0)) == 0] = FAILED
        return ratio


def word_units(letters: np.ndarray, bits: np.ndarray) -> np.ndarray:
    """The letters that start a unit: every syllabic letter, the first of a run of others."""
    alphabetic = letters & ((bits & mask_of(SYLLABIC)) == 0)
    follows = np.zeros_like(alphabetic)
    follows[1:] = alphabetic[:-1]
    return letters & ~(alphabetic & follows)


def resolve(preset: str, overrides: dict[str, ScriptRule], lang: str) -> ScriptRule:
    """The preset's rule for ``lang`` with the fields set in its override replacing it."""
    rules = _PRESETS[preset]
    base = rules.get(lang) or rules.get(base_lang(lang)) or rules.get("*") or ScriptRule()
    override = overrides.get(lang) or overrides.get(base_lang(lang))
    if override is None:
        return base
    return base.model_copy(update={k: getattr(override, k) for k in override.model_fields_set})


class ScriptRatioFilter(ArrayFilter[ScriptRatioConfig]):
    """Score per side: the share of its letters in the language's own scripts (1 without
    letters), or -1 when it breaks a hard rule; accept when every side reaches its
    ``min_ratio``."""

    name = "script_ratio"
    higher_is_better = True

    def setup(self, langs: tuple[str, ...], resources: Any = None) -> None:
        super().setup(langs, resources)
        known = set(langs) | {base_lang(lang) for lang in langs}
        unknown = sorted(set(self.config.languages) - known)
        if unknown:
            raise PluginError(
                f"script_ratio.languages names {unknown}, not a language of this corpus "
                f"(valid: {', '.join(sorted(known))})"
            )
        self.rules = [
            SideRule(lang, resolve(self.config.preset, self.config.languages, lang))
            for lang in langs
        ]
        self.thresholds = np.array([r.min_ratio for r in self.rules], dtype=np.float64)

    def score_block(self, block: TextBlock) -> np.ndarray:
        if not block.columns:
            return np.zeros((0, 0))
        sides = zip(self.rules, block.columns, strict=True)
        return np.stack([rule.score(column) for rule, column in sides], axis=1)

    def accept_block(self, scores: np.ndarray) -> np.ndarray:
        values = np.asarray(scores, dtype=np.float64).reshape(len(scores), -1)
        return np.asarray(((values >= self.thresholds) & (values != FAILED)).all(axis=1))
