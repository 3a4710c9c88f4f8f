"""Character-level normalizers: Unicode forms, full/half width, HTML, control characters,
whitespace and case (Xiaomi §2.1, Yishu §2.1.1, NT5 §3.2).

Every processor returns one line per input line and never a line break: text that decodes to
one (an HTML ``&#10;``) becomes a space, because a line break inside a segment would split it in
two downstream and misalign the corpus.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
from pydantic import Field, field_validator, model_validator

from mtcore.api import PluginConfig, Processor
from mtcore.api.engine import INNER_BREAKS
from mtcore_plugins.processors._compiled import (
    normalize_codes,
    normalized,
    squeeze_codes,
    squeezed,
)

_BREAKS = re.compile(f"\n|{INNER_BREAKS.pattern}")


def without_breaks(text: str) -> str:
    """``text`` with every line-break character turned into a space and NUL removed."""
    if "\x00" in text:
        text = text.replace("\x00", "")
    return _BREAKS.sub(" ", text)


# --- unicode -------------------------------------------------------------------------------


class UnicodeConfig(PluginConfig):
    form: Literal["NFKC", "NFC", "NFKD", "NFD"] = Field(
        "NFKC",
        description="Unicode normalization form; NFKC also folds full-width forms, ligatures "
        "and half-width katakana",
    )


class UnicodeProcessor(Processor[UnicodeConfig]):
    """Unicode normalization (``unicodedata.normalize``, by a table for most lines)."""

    name = "unicode"

    def process(self, batch: Sequence[str], lang: str) -> list[str]:
        return normalized(batch, self.config.form)

    def process_codes(self, codes: np.ndarray, lang: str) -> np.ndarray:
        return normalize_codes(codes, self.config.form)


# --- full width / half width ---------------------------------------------------------------

WidthClass = Literal["all", "digits", "letters", "punctuation", "space"]
_CLASSES = ("digits", "letters", "punctuation", "space")


def _width_class(code: int) -> str:
    char = chr(code)
    if char.isdigit():
        return "digits"
    if char.isalpha():
        return "letters"
    return "punctuation"


def width_table(direction: str, scope: Sequence[str]) -> dict[int, str]:
    """``str.translate`` table between U+FF01-FF5E and U+0021-007E (and U+3000 / U+0020) for
    the character classes in ``scope``."""
    wanted = set(_CLASSES) if "all" in scope else set(scope)
    table: dict[int, str] = {}
    for half in range(0x21, 0x7F):
        if _width_class(half) not in wanted:
            continue
        full = half + 0xFEE0
        if direction == "to_half":
            table[full] = chr(half)
        else:
            table[half] = chr(full)
    if "space" in wanted:
        if direction == "to_half":
            table[0x3000] = " "
        else:
            table[0x20] = "\u3000"
    return table


class FullWidthConfig(PluginConfig):
    # Xiaomi §2.1: full-width Roman letters and digits to half-width before training; §2.3: after
    # decoding "halfwidth punctuation marks and digits are also converted back to their original
    # full-width form" for Chinese and Japanese.
    direction: Literal["to_half", "to_full"] = Field(
        "to_half",
        description="to_half: U+FF01-FF5E to ASCII and U+3000 to a space; to_full: the reverse "
        "(post-processing Japanese or Chinese output)",
    )
    scope: list[WidthClass] = Field(
        default_factory=lambda: list[WidthClass](["all"]),
        min_length=1,
        description="which characters convert: all, or any of digits, letters, punctuation, "
        "space (U+3000 and U+0020)",
    )

    @field_validator("scope", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value


class FullWidthProcessor(Processor[FullWidthConfig]):
    """Full-width ASCII variants to ASCII or back, limited to some character classes."""

    name = "fullwidth"

    def __init__(self, config: FullWidthConfig | None = None) -> None:
        super().__init__(config)
        self.table = width_table(self.config.direction, self.config.scope)

    def process(self, batch: Sequence[str], lang: str) -> list[str]:
        table = self.table
        return [line.translate(table) for line in batch]


# --- html ----------------------------------------------------------------------------------


def _names(text: str) -> frozenset[str]:
    return frozenset(text.split())


# HTML elements (WHATWG list plus common obsolete ones). In `html` mode only these are tags, so
# that placeholders such as `<TAB>`, `<n>` or `<NUMBER>` in UI strings survive.
HTML_ELEMENTS = _names(
    """a abbr acronym address area article aside audio b base basefont bdi bdo big blink
    blockquote body br button canvas caption center cite code col colgroup data datalist dd del
    details dfn dialog dir div dl dt em embed fieldset figcaption figure font footer form frame
    frameset h1 h2 h3 h4 h5 h6 head header hgroup hr html i iframe img input ins kbd label legend
    li link main map mark marquee menu meta meter nav nobr noframes noscript object ol optgroup
    option output p param picture pre progress q rp rt ruby s samp script search section select
    small source span strike strong style sub summary sup table tbody td template textarea tfoot
    th thead time title tr track tt u ul var video wbr"""
)
# Tags that separate words when rendered: stripped to a space, the others to nothing.
BLOCK_ELEMENTS = _names(
    """address article aside blockquote body br dd div dl dt fieldset figcaption figure footer
    form h1 h2 h3 h4 h5 h6 header hr html li main nav ol p pre section table tbody td tfoot th
    thead title tr ul"""
)
_ATTRS = r"""(?:\s+[A-Za-z_:][\w:.-]*(?:\s*=\s*(?:"[^"<>]*"|'[^'<>]*'|[^\s"'=<>`]+))?)*"""
_TAG = re.compile(rf"<(/?)([A-Za-z][A-Za-z0-9:-]*)({_ATTRS})\s*/?>", re.ASCII)
_COMMENT = re.compile(r"<!--.*?-->")


class HtmlConfig(PluginConfig):
    # Yishu §2.1.1: "Eliminate escaped HTML characters"; Xiaomi §2.1: "replacing any escaped
    # characters with the corresponding symbol".
    unescape: bool = Field(True, description="replace HTML entities (&amp;, &#233;, ...)")
    max_rounds: int = Field(
        3,
        ge=1,
        le=10,
        description="unescape again while the text changes (double-escaped &amp;lt;), at most "
        "this many times",
    )
    strip_tags: bool = Field(True, description="remove tags and <!-- comments --> (after unescape)")
    tags: Literal["html", "any"] = Field(
        "html",
        description="html: only HTML element names are tags (<b>, </a>, <br/>); any: every "
        "well-formed tag, placeholders like <n> or <key> included",
    )

    @model_validator(mode="after")
    def _does_something(self) -> HtmlConfig:
        if not (self.unescape or self.strip_tags):
            raise ValueError("unescape and strip_tags are both false: set at least one")
        return self


class HtmlProcessor(Processor[HtmlConfig]):
    """HTML entity unescaping and tag stripping. ``a < b > c`` and ``1<2`` are not tags."""

    name = "html"

    def process(self, batch: Sequence[str], lang: str) -> list[str]:
        return [self._line(line) for line in batch]

    def _line(self, text: str) -> str:
        if self.config.unescape and "&" in text:
            for _ in range(self.config.max_rounds):
                done = html.unescape(text)
                if done == text:
                    break
                text = done
            text = without_breaks(text)
        if self.config.strip_tags and "<" in text:
            text = _COMMENT.sub(" ", text)
            text = _TAG.sub(self._tag, text)
        return text

    def _tag(self, match: re.Match[str]) -> str:
        name = match.group(2).lower()
        if self.config.tags == "html" and name not in HTML_ELEMENTS:
            return match.group(0)
        return " " if name in BLOCK_ELEMENTS else ""


# --- control characters --------------------------------------------------------------------

Category = Literal["Cc", "Cf", "Co", "Cn"]


class ControlCharsConfig(PluginConfig):
    # Xiaomi §2.1: "removing non-printable ASCII characters ... and control character";
    # NT5 §3.2 removes sentences with invalid Unicode characters (this repairs them instead).
    categories: list[Category] = Field(
        default_factory=lambda: list[Category](["Cc", "Cf", "Co", "Cn"]),
        min_length=1,
        description="general categories removed: Cc control (a tab becomes a space), Cf format "
        "(zero-width space and joiners, soft hyphen, BOM), Co private use, Cn unassigned",
    )
    replacement_char: bool = Field(
        True, description="also remove U+FFFD, the mark of bytes that were not valid UTF-8"
    )
    keep: str = Field(
        "",
        max_length=1000,
        description="characters kept whatever their category (e.g. U+200C ZWNJ for Persian)",
    )


class ControlCharsProcessor(Processor[ControlCharsConfig]):
    """Removes invisible and invalid code points by Unicode general category."""

    name = "control_chars"

    def __init__(self, config: ControlCharsConfig | None = None) -> None:
        super().__init__(config)
        import regex

        cfg = self.config
        parts = [rf"\p{{{cat}}}" for cat in cfg.categories]
        if cfg.replacement_char:
            parts.append(r"\uFFFD")
        keep = "\t" + cfg.keep if "Cc" in cfg.categories else cfg.keep
        pattern = f"[{''.join(parts)}]"
        if keep:
            pattern = f"[{pattern}--[{''.join(regex.escape(c) for c in keep)}]]"
        self.pattern = regex.compile(pattern, regex.V1)
        self.tab = "Cc" in cfg.categories and "\t" not in cfg.keep

    def process(self, batch: Sequence[str], lang: str) -> list[str]:
        sub = self.pattern.sub
        out = [sub("", line) for line in batch]
        if self.tab:
            out = [line.replace("\t", " ") for line in out]
        return out


# --- whitespace and case -------------------------------------------------------------------


class WhitespaceConfig(PluginConfig):
    pass


class WhitespaceProcessor(Processor[WhitespaceConfig]):
    """Every whitespace character (Zs: no-break and ideographic spaces...; tab) becomes one
    U+0020, runs collapse, ends are stripped (Yishu §2.1.1 "Normalize spacing")."""

    name = "whitespace"

    def process(self, batch: Sequence[str], lang: str) -> list[str]:
        return squeezed(batch)

    def process_codes(self, codes: np.ndarray, lang: str) -> np.ndarray:
        return squeeze_codes(codes)


class LowercaseConfig(PluginConfig):
    casefold: bool = Field(
        False, description="str.casefold instead of str.lower (ß -> ss, final sigma folded)"
    )


class LowercaseProcessor(Processor[LowercaseConfig]):
    """Lower-cases every line (Xiaomi §2.1)."""

    name = "lowercase"

    def process(self, batch: Sequence[str], lang: str) -> list[str]:
        if self.config.casefold:
            return [line.casefold() for line in batch]
        return [line.lower() for line in batch]
