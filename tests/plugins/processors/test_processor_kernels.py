"""The compiled ``unicode`` and ``whitespace`` processors against the plain Python they stand
for (``unicodedata.normalize`` and ``" ".join(line.split())`` per line): on raw WMT text in five
scripts, and on lines built from the characters whose normal form depends on their neighbours."""

from __future__ import annotations

import random
import unicodedata

import pytest

from mtcore_plugins.processors._compiled import normalized, squeezed
from tests.support.data import SHARED

RAW_TEXT = [
    "en-ja/wmt-conference+wmt22-news-systems/txt/references/generaltest2022.en-ja.ref.A.ja",
    "zh-en/wmt-conference+wmt22-news-systems/txt/sources/generaltest2022.zh-en.src.zh",
    "en-ru/wmt-conference+wmt22-news-systems/txt/references/generaltest2022.en-ru.ref.A.ru",
    "en-ja/wmt-conference+wmt22-news-systems/txt/sources/generaltest2022.en-ja.src.en",
    "en-cs/wmt-conference+wmt22-news-systems/txt/references/generaltest2022.en-cs.ref.B.cs",
]
FORMS = ("NFKC", "NFC", "NFKD", "NFD")

# Each with why it is here.
TRICKY = [
    "a",
    " ",
    "\u3000",  # ideographic space: NFKC makes it U+0020
    "\uff21\uff11\uff0c\u3002",  # full-width letter, digit, comma; ideographic full stop
    "ﬁ",  # a ligature: NFKC gives two letters
    "㍻",  # one character, NFKC: 平成
    "①",  # circled digit
    "\u2126",  # ohm sign: a singleton decomposition even in NFC
    "\uf900",  # CJK compatibility ideograph: singleton too
    "e",
    "\u0301",  # combining acute: composes with the e before it
    "\u0344",  # a combining mark with a decomposition of two marks
    "ｶ",  # half-width katakana
    "\uff9e",  # half-width voiced mark: NFKC gives a combining mark that joins the kana
    "カ",
    "\u3099",  # combining voiced mark
    "\u1100",  # Hangul leading consonant
    "\u1161",  # vowel: composes with it
    "\u11a8",  # trailing consonant: composes with an LV syllable
    "가",  # an LV syllable
    "\u3131",  # compatibility jamo: NFKC gives a conjoining one
    "\u314f",
    "\u0bc6",  # Tamil vowel sign e
    "\u0bbe",  # Tamil aa: combining class 0, yet composes with the sign before it
    "\u0915\u093c",  # Devanagari ka + nukta: a composition excluded from NFC
    "Å",
    "\u212b",  # angstrom sign: a singleton to Å
    "😀",
    "\U0001d400",  # mathematical bold A: NFKC gives A
    "\t",
    "\xa0",  # no-break space
]


@pytest.mark.parametrize("name", RAW_TEXT)
def test_raw_wmt_text_as_python_per_line(name):
    path = SHARED / name
    if not path.exists():
        pytest.skip(f"{path} is not in ../shared/data")
    lines = path.read_text(encoding="utf-8").split("\n")[:-1]
    lines += [line.replace(" ", "  ") + " \u3000" for line in lines[:200]]  # runs and ends
    for form in FORMS:
        assert normalized(lines, form) == [unicodedata.normalize(form, x) for x in lines], form
    assert squeezed(lines) == [" ".join(x.split()) for x in lines]


def test_built_lines_as_python_per_line():
    rng = random.Random(3)
    lines = ["".join(rng.choice(TRICKY) for _ in range(rng.randint(0, 12))) for _ in range(5000)]
    for form in FORMS:
        assert normalized(lines, form) == [unicodedata.normalize(form, x) for x in lines], form
    assert squeezed(lines) == [" ".join(x.split()) for x in lines]


def test_lines_that_cannot_be_joined_go_line_by_line():
    odd = ["a\nb", "ｶ\uff9e", "x\udcffy"]  # a newline inside a line; a lone surrogate
    assert normalized(odd, "NFKC") == [unicodedata.normalize("NFKC", x) for x in odd]
    assert squeezed(["a\n b  c", " "]) == ["a b c", ""]
    assert normalized([], "NFC") == [] and squeezed([]) == []
    assert normalized([""], "NFC") == [""] and squeezed(["", "  "]) == ["", ""]
