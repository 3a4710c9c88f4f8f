"""Post-processing rules applied to decoder output before scoring and submission.

- ``postprocess_ja`` (NT5 §5.2, En→Ja): spaces out of short English words and placeholders
  next to Japanese text and around "/" and word-joining "-"; ASCII "," and "." written in
  Japanese text become "，" (U+FF0C, the full-width comma §5.2 names) and "。".
- ``postprocess_en`` (NT5 §5.2, Ja→En): unknown tokens removed, split placeholders re-joined,
  Moses detokenization, detruecasing.
- ``postprocess_cjk`` (Xiaomi §2.3, into Chinese or Japanese): subwords merged, spaces between
  non-ASCII characters removed, half-width punctuation (and, per language, digits) restored to
  the full-width forms the references use.

Every rule only removes spaces or swaps one character for its counterpart, so a line keeps its
words; lines with no Japanese/Chinese text pass the CJK rules unchanged (an untranslated
English segment keeps its English punctuation). Each processor returns one line per input line.
"""

# ruff: noqa: RUF001, RUF002, RUF003 (full-width punctuation is what these rules write)

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import regex
from pydantic import Field

from mtcore.api import PluginConfig, Processor
from mtcore_plugins.common.text.truecasing import words

# The anonymization placeholders of the WMT22/23 general test sets (#PRS_ORG#, #URL#, ...).
WMT_PLACEHOLDERS = ["PRS_ORG", "URL", "NAME", "NUMBER", "PHONENUMBER", "ADDRESS", "EMAIL"]
# Letters of Japanese and Chinese text: ideographs (with 々 〇), kana, the prolonged sound mark.
CJK_LETTER = r"[\p{Han}\p{Hiragana}\p{Katakana}\u30FC\u3006]"
# CJK letters or CJK/full-width punctuation (、。「」（）！ ...): "Japanese context".
CJK_ANY = r"[\p{Han}\p{Hiragana}\p{Katakana}\u3000-\u303F\u30FB\u30FC\uFF01-\uFF0F\uFF1A-\uFF20]"
_HAS_CJK = regex.compile(CJK_LETTER)
_SPACES = regex.compile(r" {2,}")


def has_cjk(line: str) -> bool:
    return _HAS_CJK.search(line) is not None


def placeholder_pattern(names: Sequence[str]) -> regex.Pattern[str] | None:
    """``# PRS _ORG #``, ``#URL #``, ``# NAME#``: a placeholder the tokenizer split, any
    spacing inside the hashes, for the given names only (``#WFH #`` is a hashtag)."""
    if not names:
        return None
    spaced = [r"\s*".join(regex.escape(part) for part in regex.split(r"(_)", n)) for n in names]
    return regex.compile(r"#\s*(" + "|".join(spaced) + r")\s*#")


def rejoin_placeholders(line: str, pattern: regex.Pattern[str] | None) -> str:
    if pattern is None or "#" not in line:
        return line
    return pattern.sub(lambda m: "#" + regex.sub(r"\s+", "", m.group(1)) + "#", line)


# --- En→Ja ---------------------------------------------------------------------------------


class JapaneseConfig(PluginConfig):
    # NT5 §5.2: "We removed the spaces in the English proper nouns of two characters or fewer".
    short_word_max: int = Field(
        2,
        ge=0,
        le=10,
        description="an ASCII word (letters, digits) of at most this many characters loses the "
        "spaces between it and neighbouring Japanese text ('EU に' -> 'EUに'); 0: off",
    )
    # NT5 §5.2: "the spaces before and after such special symbols as '/', '-' or '#PRS/ORG#'".
    slash: bool = Field(True, description="remove the spaces around '/' ('昼 / 夜' -> '昼/夜')")
    hyphen: bool = Field(
        True,
        description="remove the spaces around a '-' that joins ASCII words or a short word "
        "('s - ビデオ' -> 's-ビデオ'); a dash between Japanese phrases ('送料 - 商品') stays",
    )
    placeholders: list[str] = Field(
        default_factory=lambda: list(WMT_PLACEHOLDERS),
        max_length=100,
        description="placeholder names (#NAME#): re-joined when split, and no spaces between "
        "them and Japanese text",
    )
    # NT5 §5.2: 'We replaced English style commas "," and periods "." with the Japanese styles'.
    punctuation: bool = Field(
        True,
        description="',' and '.' after Japanese text become '，' (U+FF0C) and '。' (not in "
        "numbers, URLs, abbreviations or '...')",
    )


class JapanesePostProcessor(Processor[JapaneseConfig]):
    """NT5's En→Ja formatting rules (§5.2) for Japanese output; lines without Japanese
    letters are left alone."""

    name = "postprocess_ja"

    def __init__(self, config: JapaneseConfig | None = None) -> None:
        super().__init__(config)
        cfg = self.config
        self.placeholder = placeholder_pattern(cfg.placeholders)
        names = "|".join(regex.escape(n) for n in cfg.placeholders)
        atoms = [rf"#(?:{names})#"] if cfg.placeholders else []
        if cfg.short_word_max:
            atoms.append(rf"(?<![A-Za-z0-9])[A-Za-z0-9]{{1,{cfg.short_word_max}}}(?![A-Za-z0-9])")
        atom = "(?:" + "|".join(atoms) + ")" if atoms else None
        self.glue = (
            regex.compile(rf"(?<={atom}) +(?={CJK_ANY})|(?<={CJK_ANY}) +(?={atom})")
            if atom
            else None
        )
        # A hyphen joins two ASCII words (COVID - 19) or a short proper noun to a word
        # (s - ビデオ, エンタープライズ - D); "ビデオ入力 - 3つの" is a dash before a list.
        short = cfg.short_word_max
        self.hyphen = regex.compile(
            r"(?<=[A-Za-z0-9]) +- +(?=[A-Za-z0-9])"
            + (
                rf"|(?<=(?<![A-Za-z0-9])[A-Za-z]{{1,{short}}}) +- +(?=\S)"
                rf"|(?<=\S) +- +(?=[A-Za-z]{{1,{short}}}(?![A-Za-z0-9]))"
                if short
                else ""
            )
        )
        self.slash = regex.compile(r"(?<=\S) *(/) *(?=\S)")
        self.comma = regex.compile(rf"(?<={CJK_ANY}) *, *|(?<![0-9]) *, *(?={CJK_LETTER})")
        self.period = regex.compile(rf"(?<={CJK_ANY}) *\.(?![.A-Za-z0-9]) *")

    def process(self, batch: Sequence[str], lang: str) -> list[str]:
        return [self.line(text) if has_cjk(text) else text for text in batch]

    def line(self, text: str) -> str:
        cfg = self.config
        text = rejoin_placeholders(text, self.placeholder)
        if cfg.slash and "/" in text:
            text = self.slash.sub("/", text)
        if cfg.hyphen and "-" in text:
            text = self.hyphen.sub("-", text)
        if self.glue is not None:
            text = self.glue.sub("", text)
        if cfg.punctuation:
            if "," in text:
                text = self.comma.sub("，", text)  # §5.2: "，", not the ideographic "、"
            if "." in text:
                text = self.period.sub("。", text)
        return text


# --- Ja→En ---------------------------------------------------------------------------------


class EnglishConfig(PluginConfig):
    # NT5 §5.2: "removed all the unknown tokens from the outputs".
    unknown: list[str] = Field(
        default_factory=lambda: ["<unk>", "\u2047"],
        max_length=20,
        description="unknown-token strings removed: fairseq's <unk> and U+2047 '⁇', which "
        "SentencePiece decodes an unknown piece to",
    )
    # NT5 §5.2: "Since some placeholders were tokenized into two or more tokens, we fixed them
    # to a single token."
    placeholders: list[str] = Field(
        default_factory=lambda: list(WMT_PLACEHOLDERS),
        max_length=100,
        description="placeholder names re-joined when split ('# PRS _ORG #' -> '#PRS_ORG#')",
    )
    # NT5 §5.2: "We detokenized and detruecased the sentences".
    detokenize: Literal["auto", "always", "never"] = Field(
        "auto",
        description="Moses detokenizer (sacremoses) for the language; auto: only lines that "
        "look Moses-tokenized (' ,' ' .' ' n't' '( '), as it mangles quotes in raw text",
    )
    unescape: bool = Field(
        False, description="detokenizer also turns &amp; &lt; ... back into characters"
    )
    detruecase: Literal["sentences", "line", "off"] = Field(
        "sentences",
        description="upper-case the first letter of sentence-initial words: every sentence "
        "(detruecase.perl, with the truecase step's sentence scan) or the line's first word "
        "only; mixed-case words (iPhone, eBay) are left alone",
    )


class EnglishPostProcessor(Processor[EnglishConfig]):
    """NT5's Ja→En rules (§5.2) for English (or any cased, space-separated) output."""

    name = "postprocess_en"

    def __init__(self, config: EnglishConfig | None = None) -> None:
        super().__init__(config)
        self.placeholder = placeholder_pattern(self.config.placeholders)
        self._detokenizers: dict[str, Any] = {}

    def _detokenizer(self, lang: str) -> Any:
        if lang not in self._detokenizers:
            from sacremoses import MosesDetokenizer

            self._detokenizers[lang] = MosesDetokenizer(lang=lang)
        return self._detokenizers[lang]

    def process(self, batch: Sequence[str], lang: str) -> list[str]:
        return [self.line(text, lang) for text in batch]

    def line(self, text: str, lang: str) -> str:
        cfg = self.config
        for token in cfg.unknown:
            if token in text:
                text = text.replace(token, " ")
        text = rejoin_placeholders(text, self.placeholder)
        tokenized = cfg.detokenize == "always" or (
            cfg.detokenize == "auto" and _TOKENIZED.search(text) is not None
        )
        if tokenized:
            text = self._detokenizer(lang).detokenize(text.split(), unescape=cfg.unescape)
        else:
            text = " ".join(text.split())
        if cfg.detruecase != "off":
            text = detruecase(text, lang, first_only=cfg.detruecase == "line")
        return text


# Marks of Moses-tokenized text: a space before a comma, a final period, ) or ], after ( or [,
# or before a clitic. Not " :" or " !", which raw translations of Japanese write too.
_TOKENIZED = regex.compile(r" ,(?: |$)| \.$| [)\]]|[(\[] | (?:n't|'s|'re|'ve|'ll|'d|'m)\b")


def detruecase(line: str, lang: str, first_only: bool = False) -> str:
    """detruecase.perl: the first letter of each sentence-initial word (or of the line's first
    word only) upper-cased, except in words with a capital after the first letter (iPhone,
    eBay, xVASynth), which are written so."""
    parts: list[str] = []
    done = 0
    for start, end, initial in words(line, lang):
        word = line[start:end]
        if initial and word[0].islower() and word[1:] == word[1:].lower():
            parts += (line[done:start], word[0].upper())
            done = start + 1
        if first_only:
            break
    return "".join(parts) + line[done:] if parts else line


# --- Zh/Ja ---------------------------------------------------------------------------------

# Half-width punctuation and its full-width form in Chinese and in Japanese text.
FULL_PUNCT = {
    "zh": {",": "，", "?": "？", "!": "！", ":": "：", ";": "；", ".": "。"},
    "ja": {",": "、", "?": "？", "!": "！", ":": "：", ";": "；", ".": "。"},
}
# Inside a number whose digits become full-width, its separators do too: ２，０００ ３０．２％.
NUMBER_MARKS = {",": "，", ".": "．", "/": "／", "%": "％", ":": "："}
_DIGITS = str.maketrans({str(d): chr(0xFF10 + d) for d in range(10)})
_SUBWORD_BPE = regex.compile(r"@@( |$)")
_NON_ASCII_SPACE = regex.compile(r"(?<=[^\x00-\x7F]) +(?=[^\x00-\x7F])")


def merge_subwords(text: str) -> str:
    """SentencePiece pieces (▁ marks a word start) or subword-nmt BPE (``@@`` continues)."""
    if "\u2581" in text:
        text = text.replace(" ", "").replace("\u2581", " ")
    if "@@" in text:
        text = _SUBWORD_BPE.sub("", text)
    return " ".join(text.split())


class CjkConfig(PluginConfig):
    # Xiaomi §2.3: "All the outputs are post-processed by merging subwords, removing the space
    # between the non-ASCII characters, and rule-based de-truecasing. All halfwidth punctuation
    # marks and digits are also converted back to their original full-width form in a specific
    # language when translating to Chinese and Japanese."
    merge_subwords: bool = Field(True, description="join SentencePiece pieces and BPE '@@ ' units")
    remove_spaces: bool = Field(True, description="remove spaces between non-ASCII characters")
    fullwidth_punctuation: list[str] = Field(
        default_factory=lambda: ["zh", "ja"],
        max_length=20,
        description="languages whose , ? ! : ; . and () next to CJK text become full-width "
        "(，？！：；。（） in Chinese; 、 for the comma in Japanese)",
    )
    # The IWSLT20 Zh-Ja references Xiaomi was scored on write Japanese digits full-width
    # (ref.ja: 1,493 full-width digits, no ASCII digit) and Chinese digits mostly half-width
    # (ref.zh: 1,078 ASCII, 210 full-width).
    fullwidth_digits: list[str] = Field(
        default_factory=lambda: ["ja"],
        max_length=20,
        description="languages whose digits (with the , . / % : inside a number) become full-width",
    )


class CjkPostProcessor(Processor[CjkConfig]):
    """Xiaomi's post-processing (§2.3) for output in Chinese or Japanese. Letters and lines
    without CJK text keep their half-width form."""

    name = "postprocess_cjk"

    def __init__(self, config: CjkConfig | None = None) -> None:
        super().__init__(config)
        self.punct = regex.compile(
            rf"(?<={CJK_ANY}) *([,?!:;]|\.(?![.A-Za-z0-9])) *|(?<![0-9]) *([,?!:;]) *(?={CJK_ANY})"
        )
        self.parens = regex.compile(
            rf"\(([^()]*{CJK_LETTER}[^()]*)\)|(?<={CJK_LETTER})\(([^()]*)\)"
        )
        # a number standing on its own: not the digits of an ASCII word (G7, HDMI1, 3mm)
        self.number = regex.compile(r"(?<![A-Za-z0-9])[0-9]+(?:[,.:/][0-9]+)*%?(?![A-Za-z])")

    def process(self, batch: Sequence[str], lang: str) -> list[str]:
        return [self.line(text, lang) for text in batch]

    def line(self, text: str, lang: str) -> str:
        cfg = self.config
        if cfg.merge_subwords:
            text = merge_subwords(text)
        if not has_cjk(text):
            return text
        if cfg.remove_spaces:
            text = _NON_ASCII_SPACE.sub("", text)
        base = lang.replace("_", "-").split("-", 1)[0].lower()
        if base in cfg.fullwidth_digits:
            text = self.number.sub(lambda m: _full_number(m.group()), text)
        if base in cfg.fullwidth_punctuation and base in FULL_PUNCT:
            table = FULL_PUNCT[base]
            text = self.punct.sub(lambda m: table[m.group(1) or m.group(2)], text)
            text = self.parens.sub(lambda m: f"（{m.group(1) or m.group(2)}）", text)
        return text


def _full_number(number: str) -> str:
    out = number.translate(_DIGITS)
    return "".join(NUMBER_MARKS.get(ch, ch) for ch in out)
