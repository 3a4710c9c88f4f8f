"""Rule-based sentence splitting of a line of text (the ``segment`` step's rules).

Chinese and Japanese: a sentence ends after a run of 。！？．!?, with the closing quotes
and brackets that follow it (」』）)】〕》〉"”’'»]), unless a quotative
と or って, or a comma follows (「本当？」と聞いた。 is one sentence). Space-delimited
languages: after a run of . ! ? (with the closing quotes and brackets after it), where
whitespace and an upper-case letter or a digit (after any opening quotes) follow, unless
the word before the period is a known abbreviation, a single letter (an initial), an acronym
(U.S.) or a number of one or two digits (an ordinal). The abbreviations: a short list
after Moses's nonbreaking-prefix files (split-sentences.perl), one for every
Latin- and Cyrillic-script language here.
"""

# ruff: noqa: RUF001, RUF002, RUF003 (full-width and Cyrillic punctuation and words are the rules here)

from __future__ import annotations

import re

CJK_LANGS = frozenset({"zh", "ja"})
_CLOSE = "」』）)】〕》〉\"”’'»]"
# a quoted sentence that the text goes on after: 「本当？」と聞いた。
_QUOTED = frozenset("とっ、，")
_CJK_END = re.compile(rf"[。！？．!?]+[{re.escape(_CLOSE)}]*")
# a candidate end: terminal punctuation, the closers after it, whitespace, more text
_SPACE_END = re.compile(rf"([.!?]+)[{re.escape(_CLOSE)}]*(\s+)(?=\S)")
_ACRONYM = re.compile(r"(?:\w\.)+\w")
_OPENERS = "\"“‘'«([¿¡"
_ABBREVIATION_WORDS = """
    mr mrs ms dr prof sr jr st mt ft no nos vs etc e.g i.e cf al fig figs vol vols ed eds
    inc ltd co corp gen gov sen rep rev hon col lt sgt capt cmdr adm maj jan feb mar apr jun jul
    aug sep sept oct nov dec approx dept est min max op p pp para art ch sec sr mme mlle nr tel
    z.b bzw ggf usw evtl ca dgl inkl str gg br ul tj tzv atd apod mil mld npr sv itd g
    т.е т.д т.п г гг др проф им ул д стр см тыс млн млрд"""
ABBREVIATIONS = frozenset(_ABBREVIATION_WORDS.split())


def split_cjk(line: str) -> list[str]:
    out: list[str] = []
    start = 0
    for end in _CJK_END.finditer(line):
        if line[end.end() : end.end() + 1] in _QUOTED:
            continue
        piece = line[start : end.end()].strip()
        if piece:
            out.append(piece)
        start = end.end()
    rest = line[start:].strip()
    if rest:
        out.append(rest)
    return out


def _continues(before: str, marks: str, following: str) -> bool:
    """Whether the text goes on in the same sentence after ``before`` + ``marks``."""
    first = following.lstrip(_OPENERS)[:1]
    if not (first.isupper() or first.isdigit()):
        return True
    if marks != ".":
        return False
    word = before.rsplit(None, 1)[-1] if before.strip() else ""
    word = word.lstrip(_OPENERS).rstrip(".")
    if len(word) == 1 and word.isalpha():  # an initial: "J. Smith"
        return True
    if _ACRONYM.fullmatch(word):  # "U.S. Special Envoy"
        return True
    if word.isdigit() and len(word) <= 2:  # an ordinal: "am 3. Oktober", "2. května"
        return True
    return word.lower() in ABBREVIATIONS


def split_spaced(line: str) -> list[str]:
    out: list[str] = []
    start = 0
    for end in _SPACE_END.finditer(line):
        if _continues(line[start : end.start(1)], end.group(1), line[end.end() :]):
            continue
        piece = line[start : end.start(2)].strip()
        if piece:
            out.append(piece)
        start = end.end()
    rest = line[start:].strip()
    if rest:
        out.append(rest)
    return out


def split_sentences(line: str, lang: str) -> list[str]:
    """The sentences of ``line`` in order; a line without an inner boundary is itself."""
    return split_cjk(line) if lang in CJK_LANGS else split_spaced(line)
