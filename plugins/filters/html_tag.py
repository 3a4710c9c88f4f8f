"""HTML tags in a segment (HW-TSC §2.2 removes markup content; OpusFilter's ``HtmlTagFilter``).

OpusFilter asks BeautifulSoup's ``html.parser`` builder whether the segment holds any element.
That happens exactly when Python's ``html.parser`` reports a start tag, and it only tries one
where ``<`` is followed by an ASCII letter. So one regex pass over the shard's bytes finds the
few candidate lines, and only those go through the parser: same decisions, a fraction of the
time."""

from __future__ import annotations

import re
from html import parser as html_parser
from html.parser import HTMLParser

import numpy as np

from mtcore.api import PluginConfig, TextBlock, TextColumn
from mtcore_plugins.filters._array import ArrayFilter

# html.parser's ``starttagopen``: nothing else can begin an element. Searched in the UTF-8
# bytes (``<`` and ASCII letters are single bytes there), so the text needs no decoding.
_CANDIDATE = re.compile(rb"<[a-zA-Z]")
# The parser's own (undocumented, version-specific) patterns, so that decisions match it.
_STARTTAGOPEN: re.Pattern[str] = html_parser.starttagopen  # type: ignore[attr-defined]
_TAGEND: re.Pattern[str] = html_parser.locatestarttagend_tolerant  # type: ignore[attr-defined]
_TAGNAME: re.Pattern[str] = html_parser.tagfind_tolerant  # type: ignore[attr-defined]
_ATTR: re.Pattern[str] = html_parser.attrfind_tolerant  # type: ignore[attr-defined]


class _TagProbe(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=False)
        self.found = False

    def handle_starttag(self, tag: str, attrs: object) -> None:
        self.found = True

    def handle_startendtag(self, tag: str, attrs: object) -> None:
        self.found = True


def _first_is_tag(text: str) -> bool:
    """True when the first ``<`` of ``text`` opens a complete start tag that ``html.parser``
    reports: its own ``parse_starttag`` steps, with its own regexes. Nothing before the first
    ``<`` can change the parser's state, so this settles most lines without a parser."""
    i = text.find("<")
    if i < 0 or not _STARTTAGOPEN.match(text, i):
        return False
    match = _TAGEND.match(text, i)
    if not match:
        return False
    j = match.end()
    if text.startswith(">", j):
        end = j + 1
    elif text.startswith("/>", j):
        end = j + 2
    else:
        return False
    name = _TAGNAME.match(text, i + 1)
    if not name:
        return False
    k = name.end()
    while k < end:
        attr = _ATTR.match(text, k)
        if not attr:
            break
        k = attr.end()
    return text[k:end].strip() in (">", "/>")


def has_tag(text: str) -> bool:
    """Whether ``html.parser`` finds an element in ``text``; markup that makes the parser
    fail counts as none, as in OpusFilter."""
    if _first_is_tag(text):
        return True
    probe = _TagProbe()
    try:
        probe.feed(text)
        probe.close()
    except (AssertionError, NotImplementedError, TypeError, UnboundLocalError):
        return False
    return probe.found


def tagged_lines(column: TextColumn, rows: np.ndarray | None = None) -> np.ndarray:
    """Per line (of ``rows`` only, if given, sorted): whether it holds an element."""
    candidates = column.lines_with(_CANDIDATE)
    if rows is None:
        out = np.zeros(column.count, dtype=bool)
        at = candidates
    else:
        out = np.zeros(len(rows), dtype=bool)
        at = np.searchsorted(rows, candidates)
        inside = at < len(rows)
        inside[inside] = rows[at[inside]] == candidates[inside]
        candidates, at = candidates[inside], at[inside]
    for row, slot in zip(candidates.tolist(), at.tolist(), strict=True):
        out[slot] = has_tag(column.line(row))  # the candidate lines alone are decoded
    return out


class HtmlTagConfig(PluginConfig):
    pass


class HtmlTagFilter(ArrayFilter[HtmlTagConfig]):
    """Score: per side, 1 when it holds an HTML element; accept when no side does."""

    name = "html_tag"
    higher_is_better = False

    def score_block(self, block: TextBlock) -> np.ndarray:
        return self.score_rows(block, None)

    def score_rows(self, block: TextBlock, rows: np.ndarray | None) -> np.ndarray:
        return np.stack([tagged_lines(c, rows) for c in block.columns], axis=1).astype(np.int8)

    def accept_block(self, scores: np.ndarray) -> np.ndarray:
        return np.asarray(~np.asarray(scores).reshape(len(scores), -1).any(axis=1))
