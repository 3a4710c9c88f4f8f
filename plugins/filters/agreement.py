# ruff: noqa: RUF001, RUF002, RUF003 (full-width and CJK marks are what these rules compare)
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

from mtcore.api import ConfigT, Filter, Pair, PluginConfig, PluginError, TextBlock
from mtcore_plugins.filters._brackets import (
    KINDS,
    STAND_IN,
    count,
    groups,
    optional_groups,
    unbalanced,
)
from mtcore_plugins.filters._numbers import (
    has_digits,
    number_items,
    unmatched_numbers,
    word_values,
)


class TwoSidedFilter(Filter[ConfigT]):
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
# Two dots or more of any script end a line as an ellipsis: ... ・・・ 、、、 (。。 is one too,
# or a stop).
_DOTS = ".・･、．"
# Question particles: a Japanese or Chinese question may end in 。 or no mark (ですか。, 吗).
_ASKING = ("か", "の", "だろう", "でしょう", "吗", "嗎", "呢", "么", "麼")


class FinalPunctuationConfig(PluginConfig):
    equivalents: list[str] = Field(
        [".。．｡", "?？", "!！", ",，、", ":：", ";；", _ELLIPSIS_GROUP],
        min_length=1,
        description="groups of sentence-final marks that count as the same across scripts",
    )
    # Opening quotes too: a translator's typo (“...“) or a German „...“ closes with them.
    closing: str = Field(
        "\"'”’»›」』）)]］】〕》〉“‘„«‹〝〞〟＂＇｣",
        max_length=100,
        description="closing quotes and brackets looked through before the final mark",
    )
    missing_ok: bool = Field(False, description="a side without a final mark matches any mark")
    # Measured on clean WMT zh-en and en-ja pairs: Chinese and Japanese chat lines, headlines
    # and list items often end without the full stop their translation has (3 % of pairs).
    missing_is_stop: bool = Field(
        True,
        description="a side without a final mark matches a full stop (a question or "
        "exclamation mark still needs its own)",
    )


class FinalPunctuationFilter(TwoSidedFilter[FinalPunctuationConfig]):
    """Inconsistent sentence-final punctuation (Yishu §2.1.1). ``...``, ``・・・`` and ``、、、``
    count as ``…``; closing quotes and brackets are looked through. Score: 1 when the two sides
    end alike, else 0."""

    name = "final_punctuation"

    def setup(self, langs: tuple[str, ...], resources: Any = None) -> None:
        super().setup(langs, resources)
        self.classes = {
            mark: group
            for group, marks in enumerate(self.config.equivalents, start=1)
            for mark in marks
        }
        self.ellipsis = self.classes.get("…", 0)
        self.strip = self.config.closing + " \t\u3000"
        self.stop, self.question = self.classes.get(".", 0), self.classes.get("?", 0)
        self.exclamation = self.classes.get("!", 0)
        self.missing = self.stop if self.config.missing_is_stop else 0

    def final_class(self, text: str) -> int:
        """The group of the last mark (0: none)."""
        return self.final_classes(text)[0]

    def final_classes(self, text: str) -> tuple[int, int]:
        """The group of the last mark (0: none) and the group it may also be read as: a
        question for a question particle before 。 or no mark (ですか。), an ellipsis for …。
        or 。。, the other mark of ?! and !?."""
        text = text.rstrip(self.strip)
        mark = text[-1:]
        if mark and mark in _DOTS and text[-2:-1] == mark and self.ellipsis:
            return self.ellipsis, 0
        last = self.classes.get(mark, 0)
        end = len(text) - 1 if last else len(text)
        body = text[max(end - 8, 0) : end].rstrip()  # the words before the mark
        if last == self.stop or not last:
            if body.endswith(_ASKING):
                return last, self.question
            if body[-1:] in ("…", "。"):
                return last, self.ellipsis
        if last in (self.question, self.exclamation) and body and body[-1] in "?？!！":
            return last, self.classes.get(body[-1:], 0)
        return last, 0

    def score(self, batch: Sequence[Pair]) -> list[int]:
        finals, missing_ok, missing = self.final_classes, self.config.missing_ok, self.missing
        out = []
        for src, tgt in batch:
            (a, alt_a), (b, alt_b) = finals(src), finals(tgt)
            if a == b or (missing_ok and not (a and b)):
                out.append(1)
                continue
            a, b = a or missing, b or missing
            out.append(int(a == b or (alt_a and alt_a in (b, alt_b)) or (alt_b and alt_b == a)))
        return out

    def accept(self, score: int) -> bool:
        return score == 1

    def accept_block(self, scores: Any) -> np.ndarray:
        return np.asarray(scores, dtype=np.int64) == 1


# --- brackets -------------------------------------------------------------------------------


class BracketsConfig(PluginConfig):
    # Yishu §2.1.1: "delete corpora with an unaligned number of parentheses": a group of
    # brackets one side has and the other lacks (an aside added or lost, a bracket cut off).
    kinds: list[Literal["round", "square", "curly"]] = Field(
        ["round"], min_length=1, description="bracket kinds counted (full-width equals half)"
    )
    balanced: bool = Field(
        False, description="also reject a side whose brackets do not open and close in order"
    )
    interchangeable: bool = Field(
        True,
        description="round and square brackets stand in for each other: with both in kinds "
        "they count as one kind, with one the other may replace a group the other side "
        "has ([PERSON2] for (PERSON2), 【title】 for (title)) but is not required",
    )
    optional: bool = Field(
        True,
        description="groups that are no aside may make up a difference: content the other "
        "side has (彼得·梅杰（Peter Meijer） against Peter Meijer), an acronym (CNA), a "
        "reading in kana (岩渕麗楽（れいら）), a day of the week after a date (7/13(水)), the "
        "speaker after a quote (「…」（市担当者）), （笑）, emoticons without letters or digits "
        "and a list mark starting the line ((三) against 3.)",
    )


class BracketsFilter(TwoSidedFilter[BracketsConfig]):
    """Score: how many opening and closing brackets differ between the sides (plus the
    unbalanced sides with ``balanced``); accept 0. Full-width, CJK (【】〔〕) and ASCII forms
    are the same bracket."""

    name = "brackets"
    higher_is_better = False

    def setup(self, langs: tuple[str, ...], resources: Any = None) -> None:
        super().setup(langs, resources)
        names: list[str] = list(dict.fromkeys(self.config.kinds))
        mixed = self.config.interchangeable
        if mixed and {"round", "square"} <= set(names):
            names = ["paren", *(k for k in names if k not in STAND_IN)]
        self.kinds = [
            (KINDS[k], KINDS[STAND_IN.get(k, "none") if mixed else "none"]) for k in names
        ]
        self.any = re.compile("[" + re.escape("".join(o + c for (o, c), _ in self.kinds)) + "]")

    def score(self, batch: Sequence[Pair]) -> list[int]:
        out = []
        for src, tgt in batch:
            if not (self.any.search(src) or self.any.search(tgt)):
                out.append(0)
                continue
            out.append(sum(self._differ(src, tgt, kind, stand_in) for kind, stand_in in self.kinds))
        return out

    def _differ(self, a: str, b: str, kind: tuple[str, str], stand_in: tuple[str, str]) -> int:
        """Brackets of ``kind`` one side has more than the other, after the optional groups
        of the side with more and the stand-ins of the side with fewer made up for them."""
        opens, closes = kind
        oa, ca = count(a, opens), count(a, closes)
        ob, cb = count(b, opens), count(b, closes)
        if oa != ob and ca != cb and (oa > ob) == (ca > cb):
            if oa < ob:  # a is the side with more
                a, b, oa, ob, ca, cb = b, a, ob, oa, cb, ca
            spare = len(groups(b, stand_in))
            if self.config.optional:
                spare += optional_groups(a, b, kind)
            made_up = min(oa - ob, ca - cb, spare)
            oa, ca = oa - made_up, ca - made_up
        diff = abs(oa - ob) + abs(ca - cb)
        if self.config.balanced:
            diff += unbalanced(a, opens, closes) + unbalanced(b, opens, closes)
        return diff

    def accept(self, score: int) -> bool:
        return score == 0

    def accept_block(self, scores: Any) -> np.ndarray:
        return np.asarray(scores, dtype=np.int64) == 0


# --- numbers ---------------------------------------------------------------------------------


class NumbersConfig(PluginConfig):
    # Yishu §2.1.1: unaligned Arabic numerals (every number); Xiaomi §2.2.1: mismatched
    # numbers of three or more digits (min_digits: 3).
    min_digits: int = Field(
        1,
        ge=1,
        le=100,
        description="shortest number that needs a match, in digits written or of its value "
        "(3万 has five)",
    )
    max_unmatched: int = Field(0, ge=0, le=1000, description="most unmatched numbers kept")


class NumbersFilter(TwoSidedFilter[NumbersConfig]):
    """Numbers written in Arabic digits on one side that the other side lacks, in any
    notation: ``3万`` matches ``30,000``, ``15亿`` ``1.5 billion``, ``３０`` ``thirty``,
    ``7月`` ``July`` (the notations: :mod:`mtcore_plugins.filters._numbers`). Score: the
    numbers of both sides left without a match (each match used once)."""

    name = "numbers"
    higher_is_better = False

    def score(self, batch: Sequence[Pair]) -> list[int]:
        k = self.config.min_digits
        out = []
        for src, tgt in batch:
            if not (has_digits(src) or has_digits(tgt)):  # nothing required on either side
                out.append(0)
                continue
            (need_a, offer_a), (need_b, offer_b) = number_items(src, k), number_items(tgt, k)
            missing = unmatched_numbers(need_a, offer_b) + unmatched_numbers(need_b, offer_a)
            if missing:  # number words and month names may match what digits did not
                offer_a.update(word_values(src))
                offer_b.update(word_values(tgt))
                missing = unmatched_numbers(need_a, offer_b) + unmatched_numbers(need_b, offer_a)
            out.append(missing)
        return out

    def accept(self, score: int) -> bool:
        return score <= self.config.max_unmatched

    def accept_block(self, scores: Any) -> np.ndarray:
        return np.asarray(scores, dtype=np.int64) <= self.config.max_unmatched


def unmatched(a: list[str], b: list[str]) -> int:
    """Size of the multiset symmetric difference."""
    if a == b:
        return 0
    ca, cb = Counter(a), Counter(b)
    return sum((ca - cb).values()) + sum((cb - ca).values())


# --- urls -----------------------------------------------------------------------------------

# URL characters are ASCII (RFC 3986): a URL glued to CJK text ends where the text starts.
_URL = re.compile(
    r"(?:(?:https?|ftp)://|\bwww\.)[\w\-.~:/?#\[\]@!$&()*+,;=%]+", re.IGNORECASE | re.ASCII
)
_EMAIL = re.compile(r"\b[\w.+-]+@[\w-]+(?:\.[\w-]+)+", re.ASCII)
_URL_TAIL = ".,;:!?)]}'\"。、，．：；！？）」』】"


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


class UrlsFilter(TwoSidedFilter[UrlsConfig]):
    """URLs that differ between the sides (Xiaomi §2.2.1). Score: links found on one side and
    not the other."""

    name = "urls"
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
