"""The copy guard (plugins/steps/_copies.py) on real WMT22 lines: sources copied into the
hypothesis slot, near copies, hypotheses in the wrong language (English, Chinese or Czech
where Japanese or English is expected, Russian for Ukrainian), raw Japanese and Chinese told
apart by their script, Croatian that the identifier spreads over hr, sr and bs, lines too
short to judge; the rates over whole reference sets; and the report's shape."""

# ruff: noqa: RUF001 (Japanese and Chinese test lines)

from __future__ import annotations

import functools
import json

import pytest

from mtcore.contracts.errors import DataError
from mtcore.contracts.registry import load_registry
from mtcore_plugins.steps._copies import copies, copy_report, letters, wrong_language
from tests.support.data import SHARED

WMT22 = "wmt-conference+wmt22-news-systems/txt"


@functools.cache
def wmt22(pair: str, kind: str, n: int = 400) -> tuple[str, ...]:
    """The first ``n`` lines of WMT22 ``pair``'s source (``src``) or reference A (``ref``)."""
    src, tgt = pair.split("-")
    folder = SHARED / pair / WMT22 / ("sources" if kind == "src" else "references")
    files = sorted(folder.glob(f"*.{src if kind == 'src' else tgt}"))
    if not files:
        pytest.skip(f"real data not found at {folder}", allow_module_level=True)
    return tuple(files[0].read_text(encoding="utf-8").splitlines()[:n])


def long_line(pair: str, kind: str, skip: int = 0) -> str:
    """A line of 40 letters or more (enough for any language identifier)."""
    return [line for line in wmt22(pair, kind) if letters(line) >= 40][skip]


EN = long_line("en-ja", "src", 3)
JA = wmt22("en-ja", "ref")[wmt22("en-ja", "src").index(EN)]  # its reference translation


@pytest.mark.parametrize(
    ("hyp", "source", "lang", "copy", "wrong"),
    [
        # the English source copied into the Japanese slot: both at once
        (EN, EN, "ja", True, True),
        # the same, with spacing and case changed
        ("  " + EN.upper().replace(" ", "  "), EN, "ja", True, True),
        # a near copy: one word changed still scores chrF >= 0.9 against the source
        (EN.replace(" the ", " a ", 1), EN, "ja", True, True),
        # the real Japanese translation (raw, no spaces)
        (JA, EN, "ja", False, False),
        # English where Japanese is expected, not a copy of the source
        (long_line("ja-en", "ref"), EN, "ja", False, True),
        # Chinese where Japanese is expected: Han characters without kana
        (long_line("en-zh", "ref"), EN, "ja", False, True),
        # Japanese where Chinese is expected: kana
        (JA, EN, "zh", False, True),
        # Chinese where Chinese is expected
        (long_line("en-zh", "ref"), EN, "zh", False, False),
        # Russian where Ukrainian is expected (same script, close languages)
        (long_line("en-ru", "ref"), EN, "uk", False, True),
        # Czech where English is expected
        (long_line("en-cs", "ref"), EN, "en", False, True),
        # too short to judge either way: three kanji and a full stop; a number kept as is
        ("協力的。", "Supportive.", "en", False, False),
        ("2022", "2022", "ja", False, False),
    ],
    ids=[
        "copy-into-ja",
        "copy-respaced-upper",
        "near-copy",
        "ja-translation",
        "en-for-ja",
        "zh-for-ja",
        "ja-for-zh",
        "zh-for-zh",
        "ru-for-uk",
        "cs-for-en",
        "short-kanji",
        "short-number",
    ],
)
def test_copies_and_wrong_language(hyp: str, source: str, lang: str, copy: bool, wrong: bool):
    flags, _ = copies([hyp], [source])
    assert flags == [copy]
    found, _, _ = wrong_language([hyp], lang)
    assert found == [wrong]


def test_croatian_spread_over_serbian_and_bosnian_is_croatian() -> None:
    """lid.176 gives many Croatian lines to sr, bs or sh, members of one macrolanguage; the
    guard sums them, so those lines are not in the wrong language."""
    lines = [line for line in wmt22("en-hr", "ref") if letters(line) >= 10]
    identifier = load_registry().load("filters", "langid").from_dict({"backend": "fastlangdetect"})
    identifier.setup(("hr",))
    top = [identifier.allowed[int(row.argmax())] for row in identifier.probabilities(lines)]
    spread = [line for line, label in zip(lines, top, strict=True) if label in {"sr", "bs", "sh"}]
    assert len(spread) >= 20
    flags, judged, _ = wrong_language(spread, "hr")
    assert judged == len(spread) and sum(flags) <= 0.05 * len(spread)


@pytest.mark.parametrize(
    ("lang", "pair", "most_wrong"),
    [
        ("ja", "en-ja", 0.005),
        ("zh", "en-zh", 0.01),
        ("en", "ja-en", 0.005),
        ("cs", "en-cs", 0.005),
        ("ru", "en-ru", 0.005),
        ("uk", "en-uk", 0.01),
        ("hr", "en-hr", 0.015),
    ],
)
def test_right_language_is_rarely_called_wrong(lang: str, pair: str, most_wrong: float) -> None:
    """Real references in their own language, 400 lines each."""
    flags, judged, _ = wrong_language(wmt22(pair, "ref"), lang)
    assert judged > 250 and sum(flags) <= most_wrong * judged


@pytest.mark.parametrize(
    ("lang", "pair", "least_caught"),
    [
        # English, Chinese and Czech in a Japanese slot
        ("ja", "ja-en", 0.9),
        ("ja", "en-zh", 0.85),
        ("ja", "en-cs", 0.95),
        # Japanese in a Chinese slot (kana)
        ("zh", "en-ja", 0.98),
        # Russian for Ukrainian and the other way round
        ("uk", "en-ru", 0.95),
        ("ru", "en-uk", 0.9),
        # Czech for English
        ("en", "en-cs", 0.95),
    ],
)
def test_wrong_language_is_caught(lang: str, pair: str, least_caught: float) -> None:
    flags, judged, found = wrong_language(wmt22(pair, "ref"), lang)
    assert sum(flags) >= least_caught * judged
    assert found.most_common(1)[0][0] == pair.split("-")[1]


def test_report_counts_shares_and_examples() -> None:
    """Thirty Japanese references, seven of them replaced by their English source and one by
    a Chinese line: counts, shares over all lines, the first five line numbers from 1."""
    sources = list(wmt22("en-ja", "src")[100:130])
    hyps = list(wmt22("en-ja", "ref")[100:130])
    copied = [i for i, source in enumerate(sources) if letters(source) >= 40][:7]
    for i in copied:
        hyps[i] = sources[i]
    hyps[-1] = long_line("en-zh", "ref")
    report = copy_report(hyps, sources, "ja")
    assert json.loads(json.dumps(report)) == report  # JSON values only (the evaluate step)
    assert report["lines"] == 30
    assert report["copies"] == {
        "count": 7,
        "share": round(7 / 30, 6),
        "judged": sum(letters(s) >= 10 for s in sources),
        "examples": [i + 1 for i in copied][:5],
    }
    wrong = report["wrong_language"]
    assert wrong["count"] == 8 and wrong["share"] == round(8 / 30, 6)
    assert wrong["examples"] == [i + 1 for i in copied][:5]
    assert wrong["found"] == {"en": 7, "zh": 1}
    assert wrong["judged"] == sum(letters(h) >= 10 for h in hyps)
    assert report["settings"]["backend"] == "fastlangdetect"


def test_report_without_sources_and_for_an_unknown_language() -> None:
    hyps = list(wmt22("en-ja", "ref")[:10])
    report = copy_report(hyps, None, "ja")
    assert report["copies"] is None and report["wrong_language"]["count"] == 0
    # lid.176 has no Livonian: the language check is skipped, saying why
    skipped = copy_report(hyps, hyps, "liv")["wrong_language"]
    assert "liv" in skipped["skipped"]
    with pytest.raises(DataError, match="10 hypotheses but 9 source lines"):
        copy_report(hyps, hyps[:9], "ja")
    assert copy_report([], [], "ja")["copies"] == {
        "count": 0, "share": 0.0, "judged": 0, "examples": []
    }  # fmt: skip


def test_lines_are_measured_in_letters_with_cjk_counting_double() -> None:
    assert letters("協力的。") == 6
    assert letters("感谢您提供信息。") == 14
    assert letters("Thank you!") == 8
    assert letters("2022-03-01 #PRS_ORG#") == 6
