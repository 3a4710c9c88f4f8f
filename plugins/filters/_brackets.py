# ruff: noqa: RUF001, RUF002, RUF003 (full-width and CJK brackets are what this module reads)
"""Bracket kinds of the ``brackets`` rule and the groups that need no counterpart on the
other side: glosses (彼得·梅杰（Peter Meijer） against Peter Meijer), acronyms after the
name they abbreviate (CNA), kana readings (岩渕麗楽（れいら）), days of the week after a date
(7/13(水)), the speaker after a quote (「…」（市担当者）), （笑）, emoticons and list marks
((三) against 3.). Measured on clean WMT21-23 test pairs, these were most of the groups one
side had and the other lacked."""

from __future__ import annotations

import functools
import re
import unicodedata

# Half- and full-width forms of a kind count as the same bracket, and so do the CJK forms.
BRACKET_KINDS: dict[str, tuple[str, str]] = {
    "round": ("(（⦅｟", ")）⦆｠"),
    "square": ("[［【〔〖〘", "]］】〕〗〙"),
    "curly": ("{｛", "}｝"),
}


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


STAND_IN = {"round": "square", "square": "round"}
KINDS = BRACKET_KINDS | {
    "paren": ("(（⦅｟[［【〔〖〘", ")）⦆｠]］】〕〗〙"),  # round or square
    "none": ("", ""),
}
_KANA = "\u3041-\u309f\u30a0-\u30ff\uff66-\uff9f"
# An acronym after the name it abbreviates, "the Central News Agency (CNA)"; a time zone.
_ACRONYM = re.compile(r"[A-Z][A-Z0-9&.-]{1,7}")
_LIST_MARK = re.compile(r"\s*[(（][一二三四五六七八九十\dA-Za-z]{1,3}[)）]")  # (三) against 3.
# A reading, "lol", a day of the week after a date (7/13(水)), an emoticon.
_NOT_ASIDE = re.compile(rf"[{_KANA} ・]+|笑|[月火水木金土日](?:曜日?)?|[\W_]*")


def count(text: str, chars: str) -> int:
    return sum(text.count(ch) for ch in chars)


@functools.cache
def group_pattern(opens: str, closes: str) -> re.Pattern[str]:
    return re.compile(f"[{re.escape(opens)}]([^{re.escape(opens + closes)}]*)[{re.escape(closes)}]")


def groups(text: str, kind: tuple[str, str]) -> list[str]:
    """The contents of the innermost groups of ``kind``."""
    return group_pattern(*kind).findall(text) if kind[0] else []


def optional_groups(text: str, other: str, kind: tuple[str, str]) -> int:
    """Groups of ``kind`` in ``text`` that need no counterpart in ``other``."""
    other = unicodedata.normalize("NFKC", other).casefold()
    spare = int("(" in kind[0] and _LIST_MARK.match(text) is not None)
    for group in group_pattern(*kind).finditer(text):
        content = unicodedata.normalize("NFKC", group[1]).strip()
        if _ACRONYM.fullmatch(content) or text[group.start() - 1 : group.start()] == "」":
            spare += 1
            continue
        content = content.casefold()
        spare += bool(_NOT_ASIDE.fullmatch(content) or (len(content) > 1 and content in other))
    return spare
