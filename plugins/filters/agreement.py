"""Agreement rules between the two sides of a pair (Yishu WMT23 §2.1.1: inconsistent final
punctuation, unmatched parentheses, unmatched Arabic numerals; Xiaomi IWSLT20 §2.2.1:
mismatched numbers of three or more digits and URLs), each paper's number as the default.

They compare the sides pair by pair with compiled patterns and score only the pairs still alive.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
from pydantic import Field

from mtcore.errors import PluginError
from mtcore.plugin import Filter, Pair, PluginConfig
from mtcore.textblock import TextBlock


class TwoSidedFilter(Filter):
    """A rule comparing the two sides of a pair; per pair, on the pairs still alive."""

    def setup(self, langs: tuple[str, ...], resources: Any = None) -> None:
        if len(langs) != 2:
            raise PluginError(
                f"filter {self.name!r} compares the two sides of a pair, but the corpus has "
                f"{len(langs)} language(s) {list(langs)}: use it on a bilingual corpus"
            )
        super().setup(langs, resources)

    def score_block(self, block: TextBlock) -> list[Any]:
        return list(self.score(block.pairs()))


# --- final punctuation ----------------------------------------------------------------------

_ELLIPSIS_GROUP = "…⋯"


class FinalPunctuationConfig(PluginConfig):
    equivalents: list[str] = Field(
        [".。．｡", "?？", "!！", ",，、", ":：", ";；", _ELLIPSIS_GROUP],  # noqa: RUF001
        min_length=1,
        description="groups of sentence-final marks that count as the same across scripts",
    )
    closing: str = Field(
        "\"'”’»›」』）)]］】〕》〉",  # noqa: RUF001
        max_length=100,
        description="closing quotes and brackets looked through before the final mark",
    )
    missing_ok: bool = Field(False, description="a side without a final mark matches any mark")


class FinalPunctuationFilter(TwoSidedFilter):
    """Inconsistent sentence-final punctuation (Yishu §2.1.1). ``...`` counts as ``…``. Score:
    1 when the two sides end alike, else 0."""

    name = "final_punctuation"
    Config = FinalPunctuationConfig
    config: FinalPunctuationConfig

    def setup(self, langs: tuple[str, ...], resources: Any = None) -> None:
        super().setup(langs, resources)
        self.classes = {
            mark: group
            for group, marks in enumerate(self.config.equivalents, start=1)
            for mark in marks
        }
        self.ellipsis = self.classes.get("…", 0)
        self.strip = self.config.closing + " \t\u3000"

    def final_class(self, text: str) -> int:
        """The group of the last mark (0: none)."""
        text = text.rstrip(self.strip)
        if text.endswith("...") and self.ellipsis:
            return self.ellipsis
        return self.classes.get(text[-1:], 0)

    def score(self, batch: Sequence[Pair]) -> list[int]:
        final, missing_ok = self.final_class, self.config.missing_ok
        out = []
        for src, tgt in batch:
            a, b = final(src), final(tgt)
            out.append(int(a == b or (missing_ok and not (a and b))))
        return out

    def accept(self, score: int) -> bool:
        return score == 1

    def accept_block(self, scores: Any) -> np.ndarray:
        return np.asarray(scores, dtype=np.int64) == 1


# --- brackets -------------------------------------------------------------------------------

# Half- and full-width forms of a kind count as the same bracket.
BRACKET_KINDS: dict[str, tuple[str, str]] = {
    "round": ("(（", ")）"),  # noqa: RUF001
    "square": ("[［【〔〖", "]］】〕〗"),  # noqa: RUF001
    "curly": ("{｛", "}｝"),  # noqa: RUF001
}


class BracketsConfig(PluginConfig):
    # Yishu §2.1.1: "delete corpora with an unaligned number of parentheses".
    kinds: list[Literal["round", "square", "curly"]] = Field(
        ["round"], min_length=1, description="bracket kinds counted (full-width equals half)"
    )
    balanced: bool = Field(
        False, description="also reject a side whose brackets do not open and close in order"
    )


def unbalanced(text: str, opens: str, closes: str) -> bool:
    depth = 0
    for ch in text:
        if ch in opens:
            depth += 1
        elif ch in closes:
            depth -= 1
            if depth < 0:
                return True
    return depth != 0


class BracketsFilter(TwoSidedFilter):
    """Score: how many opening and closing brackets differ between the sides (plus the
    unbalanced sides with ``balanced``); accept 0."""

    name = "brackets"
    Config = BracketsConfig
    config: BracketsConfig
    higher_is_better = False

    def setup(self, langs: tuple[str, ...], resources: Any = None) -> None:
        super().setup(langs, resources)
        self.kinds = [BRACKET_KINDS[k] for k in dict.fromkeys(self.config.kinds)]
        self.any = re.compile("[" + re.escape("".join(o + c for o, c in self.kinds)) + "]")

    def _counts(self, text: str) -> list[int]:
        """Opening and closing brackets of each kind."""
        counts = []
        for opens, closes in self.kinds:
            counts.append(sum(text.count(ch) for ch in opens))
            counts.append(sum(text.count(ch) for ch in closes))
        return counts

    def _unbalanced(self, text: str) -> int:
        return sum(unbalanced(text, o, c) for o, c in self.kinds) if self.config.balanced else 0

    def score(self, batch: Sequence[Pair]) -> list[int]:
        out = []
        for src, tgt in batch:
            if not (self.any.search(src) or self.any.search(tgt)):
                out.append(0)
                continue
            a, b = self._counts(src), self._counts(tgt)
            diff = sum(abs(x - y) for x, y in zip(a, b, strict=True))
            out.append(diff + self._unbalanced(src) + self._unbalanced(tgt))
        return out

    def accept(self, score: int) -> bool:
        return score == 0

    def accept_block(self, scores: Any) -> np.ndarray:
        return np.asarray(scores, dtype=np.int64) == 0


# --- numbers --------------------------------------------------------------------------------

_TO_ASCII = str.maketrans("０１２３４５６７８９，．", "0123456789,.")  # noqa: RUF001
# A number with thousands separators (groups of exactly three digits), else a plain one; an
# optional decimal part. ASCII digits only after the full-width ones were translated.
_NUMBER = re.compile(r"\d{1,3}(?:,\d{3})+(?:\.\d+)?(?!\d)|\d+(?:\.\d+)?", re.ASCII)


def numbers(text: str, min_digits: int) -> list[str]:
    """The numbers of ``text`` (full-width digits normalised, thousands separators removed)
    with at least ``min_digits`` digits, sorted."""
    found = [n.replace(",", "") for n in _NUMBER.findall(text.translate(_TO_ASCII))]
    if min_digits > 1:
        found = [n for n in found if len(n) - n.count(".") >= min_digits]
    return sorted(found)


def unmatched(a: list[str], b: list[str]) -> int:
    """Size of the multiset symmetric difference."""
    if a == b:
        return 0
    ca, cb = Counter(a), Counter(b)
    return sum((ca - cb).values()) + sum((cb - ca).values())


class NumbersConfig(PluginConfig):
    # Yishu §2.1.1: unaligned Arabic numerals (every number); Xiaomi §2.2.1: mismatched
    # numbers of three or more digits (min_digits: 3).
    min_digits: int = Field(1, ge=1, le=100, description="shortest number compared, in digits")
    max_unmatched: int = Field(0, ge=0, le=1000, description="most unmatched numbers kept")


class NumbersFilter(TwoSidedFilter):
    """Score: numbers found on one side and not the other (as multisets)."""

    name = "numbers"
    Config = NumbersConfig
    config: NumbersConfig
    higher_is_better = False

    def score(self, batch: Sequence[Pair]) -> list[int]:
        k = self.config.min_digits
        return [unmatched(numbers(s, k), numbers(t, k)) for s, t in batch]

    def accept(self, score: int) -> bool:
        return score <= self.config.max_unmatched

    def accept_block(self, scores: Any) -> np.ndarray:
        return np.asarray(scores, dtype=np.int64) <= self.config.max_unmatched


# --- urls -----------------------------------------------------------------------------------

# URL characters are ASCII (RFC 3986): a URL glued to CJK text ends where the text starts.
_URL = re.compile(
    r"(?:(?:https?|ftp)://|\bwww\.)[\w\-.~:/?#\[\]@!$&()*+,;=%]+", re.IGNORECASE | re.ASCII
)
_EMAIL = re.compile(r"\b[\w.+-]+@[\w-]+(?:\.[\w-]+)+", re.ASCII)
_URL_TAIL = ".,;:!?)]}'\"。、，．：；！？）」』】"  # noqa: RUF001


def canonical_url(url: str) -> str:
    """Trailing punctuation and slash removed, scheme and host lower-cased."""
    url = url.rstrip(_URL_TAIL).rstrip("/")
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    host, slash, path = rest.partition("/")
    return f"{scheme.lower()}{sep}{host.lower()}{slash}{path}"


def links(text: str, emails: bool) -> list[str]:
    """The URLs of ``text`` and, with ``emails``, its e-mail addresses (lower-cased), sorted."""
    found = [canonical_url(url) for url in _URL.findall(text)]
    if emails:
        found.extend(e.lower() for e in _EMAIL.findall(text))
    return sorted(found)


class UrlsConfig(PluginConfig):
    emails: bool = Field(True, description="compare e-mail addresses too")
    max_unmatched: int = Field(0, ge=0, le=1000, description="most unmatched links kept")


class UrlsFilter(TwoSidedFilter):
    """URLs that differ between the sides (Xiaomi §2.2.1). Score: links found on one side and
    not the other."""

    name = "urls"
    Config = UrlsConfig
    config: UrlsConfig
    higher_is_better = False

    def score(self, batch: Sequence[Pair]) -> list[int]:
        emails = self.config.emails
        out = []
        for src, tgt in batch:
            if "." not in src and "." not in tgt:  # no host, no address: nothing to compare
                out.append(0)
                continue
            out.append(unmatched(links(src, emails), links(tgt, emails)))
        return out

    def accept(self, score: int) -> bool:
        return score <= self.config.max_unmatched

    def accept_block(self, scores: Any) -> np.ndarray:
        return np.asarray(scores, dtype=np.int64) <= self.config.max_unmatched
