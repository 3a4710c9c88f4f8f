# ruff: noqa: RUF001, RUF002, RUF003, SIM905 (full-width digits are what this module reads)
"""The numbers of a line as values, whatever their notation, for the ``numbers`` rule.

A side's numbers are items: the values one number may stand for (the year 2021 is also the
21 of 21年, 6成 is 6 tenths or 60 %) and whether the rule requires a match for it on the
other side. Decisions, each measured on clean WMT21-23 zh-en and en-ja test pairs:

- Required: numbers written with Arabic digits (Yishu §2.1.1, "Arabic numerals"), ASCII,
  full-width or circled (①), with thousands separators (``1,000``, ``1，000``, ``1 000``)
  and decimal marks (``1.5``, ``１．５``), scaled by the Chinese or Japanese units after them
  (``3万`` = 30000, ``1.5亿``, ``1亿2000万``, ``500余万``) or a scale word (``1.5 billion``,
  ``£2bn``, ``$10m``, ``41.78 lakh``). Times drop zero minutes (``4:00 p.m.`` is 下午4点)
  and read ``5.30pm`` as ``5:30``.
- Not required, but matching a required number on the other side: Chinese and Japanese
  numerals (``二十五``, ``三万``, ``二〇二〇``, ``千亿``), English number words (``thirty``,
  ``first``, ``twice``, ``fifties``), month names (``July`` = 7) and digits glued to Latin
  letters (``COVID-19``, ``G7``, ``[PERSON2]``). Numerals and number words are parts of many
  words that are no count (一起, 统一, 千万 "by all means", "the one", "a second"), and a
  name's digits are no count of the sentence; requiring them would reject most clean pairs,
  accepting them as matches costs little.
- Not required either: 0 and 1, which English writes as "no", "midnight", "a", "an", "per",
  "once" (1例 "one case", 1日 "a day", 0時 "midnight"). A 1 against a 2 is still caught by
  the 2.
"""

from __future__ import annotations

import re
from collections import Counter
from decimal import Decimal

Values = tuple[Decimal, ...]

# Only the matched numbers are translated, never the whole line: ① to ⑳ are 1 to 20.
_TO_ASCII: dict[int, int | str | None] = {
    **str.maketrans("０１２３４５６７８９．", "0123456789.", ",， \u00a0\u202f\u2009"),
    **{0x2460 + i: str(i + 1) for i in range(20)},
}
_DIGIT = "[0-9０-９]"
_HAS_DIGIT = re.compile(r"[0-9０-９\u2460-\u2473]")
_AM_PM = re.compile(r"\s?[ap]\.?m\b", re.ASCII)  # 5.30pm is 5:30

_DIGITS = {c: Decimal(i) for i, chars in enumerate("〇零 一 二两兩 三 四 五 六 七 八 九".split())
           for c in chars}  # fmt: skip
_SMALL = {"十": Decimal(10), "百": Decimal(100), "千": Decimal(1000)}
_BIG = {"万": Decimal(10) ** 4, "萬": Decimal(10) ** 4, "亿": Decimal(10) ** 8,
        "億": Decimal(10) ** 8, "兆": Decimal(10) ** 12}  # fmt: skip
_SCALES = {"hundred": Decimal(100), "thousand": Decimal(10) ** 3, "lakh": Decimal(10) ** 5,
           "million": Decimal(10) ** 6, "mn": Decimal(10) ** 6, "crore": Decimal(10) ** 7,
           "billion": Decimal(10) ** 9, "bn": Decimal(10) ** 9, "trillion": Decimal(10) ** 12,
           "tn": Decimal(10) ** 12, "m": Decimal(10) ** 6, "k": Decimal(10) ** 3}  # fmt: skip
_CURRENCY = "$£€¥₹"  # before "10m" or "5k": millions, thousands (not metres)
_ERAS = {"令和": 2018, "平成": 1988, "昭和": 1925}  # Japanese era years: 令和5年 is 2023

_ARABIC = (
    rf"{_DIGIT}{{1,3}}(?:[,， \u00a0\u202f\u2009]{_DIGIT}{{3}})+(?:[.．]{_DIGIT}+)?(?!{_DIGIT})"
    rf"|{_DIGIT}+(?:[.．]{_DIGIT}+)?|[\u2460-\u2473]"
)
# A unit is no unit where it starts a word of its own: 千克 (kg), 千米, 千瓦 (kW), 兆瓦 (MW),
# 兆赫, 百分之 (per cent).
_UNIT = r"(?:十|百(?!分)|千(?![克米瓦卡焦帕赫兆字])|[万萬亿億]|兆(?![瓦赫字帕焦比]))"
_CJK_DIGIT = "[" + "".join(_DIGITS) + "]"
_EXPRESSION = (
    rf"(?:{_ARABIC}|{_CJK_DIGIT}|{_UNIT})"
    rf"(?:{_ARABIC}|{_CJK_DIGIT}|[ \u00a0]?[余多]?{_UNIT})*"
)
_SCALE = rf"(?i:[ \u00a0]?(?P<scale>{'|'.join(sorted(_SCALES, key=len, reverse=True))})\b)"
_TOKEN = re.compile(rf"{_ARABIC}|\S", re.ASCII)

_UNITS = "zero one two three four five six seven eight nine".split()
_TEENS = "ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen"
_TENS = "twenty thirty forty fifty sixty seventy eighty ninety".split()
_ORDINALS = "first second third fourth fifth sixth seventh eighth ninth tenth eleventh twelfth"
_WORDS = {w: Decimal(i) for i, w in enumerate([*_UNITS, *_TEENS.split()])}
_WORDS |= {w: Decimal(i) for i, w in enumerate(_ORDINALS.split(), start=1)}
_WORDS |= {w: Decimal(10 * i) for i, w in enumerate(_TENS, start=2)}
_WORDS |= {w[:-1] + "ies": Decimal(10 * i) for i, w in enumerate(_TENS, start=2)}  # fifties
_WORDS |= {"twentieth": Decimal(20), "thirtieth": Decimal(30)}
# Words for a count that Chinese and Japanese write with a digit and a counter: 2倍 (twice),
# 1度 (once), 10年 (a decade), 4分の1 (a quarter), 2年 (a couple of years).
_WORDS |= {"once": Decimal(1), "twice": Decimal(2), "thrice": Decimal(3), "couple": Decimal(2),
           "half": Decimal(2), "quarter": Decimal(4), "decade": Decimal(10),
           "dozen": Decimal(12)}  # fmt: skip
# Words after which a number word starts a new number ("six and nine", "the first two"); a
# ten is followed by its unit ("twenty-five").
_ENDS_NUMBER = set(_WORDS) - set(_TENS)
_SCALE_WORDS = [w for w in _SCALES if len(w) > 2]  # not bn, m, k: no words on their own
_WORD = "|".join(sorted([*_WORDS, *_SCALE_WORDS], key=len, reverse=True))
_MONTHS = {m: Decimal(i) for i, names in enumerate((
    "January Jan", "February Feb", "March Mar", "April Apr", "May", "June Jun", "July Jul",
    "August Aug", "September Sept Sep", "October Oct", "November Nov", "December Dec"),
    start=1) for m in names.split()}  # fmt: skip

# The lookahead lets the engine skip to the next digit or numeral quickly.
_NUMBER = re.compile(rf"(?=[0-9０-９\u2460-\u2473{''.join(_DIGITS)}十百千万萬亿億兆])"
                     rf"(?P<expr>{_EXPRESSION}){_SCALE}?", re.ASCII)  # fmt: skip
_NUMBER_WORDS = re.compile(
    rf"\b(?P<words>(?i:(?:{_WORD})(?:(?:[ -]+|[ ]+and[ ]+)(?:{_WORD}))*))\b"
    rf"|\b(?P<month>{'|'.join(sorted(_MONTHS, key=len, reverse=True))})\b",
    re.ASCII,
)


def expression_value(expression: str) -> Decimal:
    """The value of digits and numerals with their units (``1亿2000万``, ``二十五``,
    ``二〇二〇``, ``千亿``)."""
    total = section = Decimal(0)
    pending: Decimal | None = None
    last_big = Decimal(0)
    for token in _TOKEN.findall(expression):
        if token[0].isdigit():  # ASCII, full-width or circled
            pending = Decimal(token.translate(_TO_ASCII))
        elif token in _DIGITS:  # consecutive digits are positional: 二〇二〇, 一百零五
            digit = _DIGITS[token]
            pending = digit if pending is None else pending * 10 + digit
        elif token in _SMALL:
            section += (Decimal(1) if pending is None else pending) * _SMALL[token]
            pending = None
        elif token in _BIG:
            unit = _BIG[token]
            section += pending if pending is not None else Decimal(0 if section else 1)
            if total and unit > last_big:  # 万亿: the units multiply
                total = (total + section) * unit
            else:
                total += section * unit
            section, pending, last_big = Decimal(0), None, unit
    return total + section + (pending or 0)


def _words_values(words: str) -> list[Decimal]:
    """The numbers of a run of number words: ``two hundred thousand`` is one, ``six and
    nine`` two."""
    out: list[Decimal] = []
    total = current = Decimal(0)
    last = ""
    for word in re.split(r"[ -]+", words.lower()):
        if word == "and":
            continue
        if word in _SCALES:
            scale = _SCALES[word]
            if scale == 100:
                current = (current or 1) * scale
            else:
                total, current = total + (current or 1) * scale, Decimal(0)
        else:
            if last in _ENDS_NUMBER:
                out.append(total + current)
                total = current = Decimal(0)
            current += _WORDS[word]
        last = word
    out.append(total + current)
    return out


def number_items(text: str, min_digits: int) -> tuple[list[Values], Counter[Decimal]]:
    """The numbers of ``text`` in digits and numerals that need a match on the other side
    (those with at least ``min_digits`` digits, written or in their value), and the values
    they offer as a match (required ones included)."""
    required: list[Values] = []
    offered: Counter[Decimal] = Counter()
    for match in _NUMBER.finditer(text):
        expr, start, end = match.group("expr"), match.start(), match.end()
        if expr in ("00", "００") and text[start - 1 : start] in (":", "："):
            continue  # 4:00 p.m. is 下午4点
        if "." in expr and len(expr) <= 5 and _AM_PM.match(text, end):  # 5.30pm: 5, 30
            hours, expr = expr.split(".")
            offered[Decimal(hours)] += 1
            if _required(text, start, hours, Decimal(hours), min_digits):
                required.append((Decimal(hours),))
            start += len(hours) + 1
        if expr.isascii() and expr.replace(".", "", 1).isdigit():
            value = Decimal(expr)
        else:
            value = expression_value(expr)
        value = _scaled(text, start, value, match.group("scale"))
        values = _alternatives(text, start, end, expr, value)
        offered.update(values)
        if len(expr) > 1 and all(c in _DIGITS for c in expr):  # 三四五六: 3, 4, 5, 6
            offered.update(_DIGITS[c] for c in expr)
        if _required(text, start, expr, values[0], min_digits):
            required.append(values)
    return required, offered


def word_values(text: str) -> Counter[Decimal]:
    """The values of the English number words and month names of ``text`` (none of them
    required: the slower pass, run only where digits leave a number unmatched)."""
    offered: Counter[Decimal] = Counter()
    for match in _NUMBER_WORDS.finditer(text):
        words, month = match.group("words", "month")
        if words is not None:
            offered.update(_words_values(words))
        else:
            offered[_MONTHS[month]] += 1
    return offered


def _scaled(text: str, start: int, value: Decimal, scale: str | None) -> Decimal:
    if scale is None:
        return value
    scale = scale.lower()
    if scale in ("m", "k") and not (start and text[start - 1] in _CURRENCY):
        return value  # 5m, 5 k: metres, a unit, not a million
    return value * _SCALES[scale]


def _alternatives(text: str, start: int, end: int, expression: str, value: Decimal) -> Values:
    """The values a number also stands for: a year its last two digits (Japanese news writes
    2021 as 21年, and the 1980s are 80年代), a Japanese era year its Western year, a count
    of 成 (tenths) a percentage."""
    era = _ERAS.get(text[max(start - 2, 0) : start])
    if era is not None:
        return (value, value + era, (value + era) % 100)
    if len(expression) == 4 and 1900 <= value < 2100 and expression.isdigit():
        return (value, value % 100)
    if text[end : end + 1] == "成":
        return (value, value * 10)
    return (value,)


def _required(text: str, start: int, expression: str, value: Decimal, min_digits: int) -> bool:
    """Arabic digits that are a count of their own, other than 0 and 1, long enough."""
    if value in (0, 1) or not _HAS_DIGIT.search(expression):
        return False
    written = sum(c.isdigit() for c in expression)
    if max(written, len(str(int(abs(value))))) < min_digits:  # 3万: five digits
        return False
    before = text[max(start - 2, 0) : start]
    if before[-1:] == "-":  # COVID-19, Ka-52
        before = text[max(start - 3, 0) : start - 1]
    return not (before[-1:].isascii() and before[-1:].isalpha())  # G7, A320, [PERSON2]


def unmatched_numbers(required: list[Values], offered: Counter[Decimal]) -> int:
    """How many ``required`` numbers find no value among ``offered`` (each used once)."""
    if not required:
        return 0
    left = offered.copy()
    missing = 0
    for values in required:
        for value in values:
            if left[value] > 0:
                left[value] -= 1
                break
        else:
            missing += 1
    return missing


def has_digits(text: str) -> bool:
    """Whether ``text`` may hold a required number."""
    return _HAS_DIGIT.search(text) is not None
