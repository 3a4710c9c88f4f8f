"""The ``segment`` step and its sentence rules, on real unsegmented lines of WMT test sets."""

# ruff: noqa: RUF001, RUF002, RUF003 (full-width characters and Cyrillic words are the test data here)

from __future__ import annotations

from pathlib import Path

import pytest

from mtcore.api import Corpus, CorpusWriter, StepError
from mtcore_plugins.steps._sentences import split_sentences
from mtcore_plugins.steps.segment import SegmentStep
from tests.support.steps import make_ctx

DATA = Path(__file__).resolve().parents[3].parent / "shared" / "data"
JA_REF = (
    DATA / "en-ja/wmt-conference+wmt22-news-systems/txt/references/generaltest2022.en-ja.ref.A.ja"
)
ZH_SRC = DATA / "zh-en/wmt-conference+wmt23-news-systems/txt/sources/generaltest2023.zh-en.src.zh"
EN_SRC = DATA / "en-ja/wmt-conference+wmt22-news-systems/txt/sources/generaltest2022.en-ja.src.en"


@pytest.mark.parametrize(
    ("line", "lang", "sentences"),
    [
        # WMT22 en-ja reference A, line by line: two sentences in one line
        (
            "確認したところ、この件に関しましては非接触での配送となりますので、残念ながらご自宅"
            "まで商品をお届けする事が出来ません。大変申し訳ございません。",
            "ja",
            [
                "確認したところ、この件に関しましては非接触での配送となりますので、残念ながらご"
                "自宅まで商品をお届けする事が出来ません。",
                "大変申し訳ございません。",
            ],
        ),
        # the closing bracket stays with its sentence; a quotative と keeps a quote inside
        (
            "「行きます！」と言った。「本当？」彼は驚いた。",
            "ja",
            ["「行きます！」と言った。", "「本当？」", "彼は驚いた。"],
        ),
        ("他说：“我们走吧！”第二天下雨了。", "zh", ["他说：“我们走吧！”", "第二天下雨了。"]),
        ("没有句号的一行", "zh", ["没有句号的一行"]),
        # English: abbreviations, initials, acronyms, times and decimals do not end a sentence
        (
            "Shipping alone was approx. US$100. It came late.",
            "en",
            ["Shipping alone was approx. US$100.", "It came late."],
        ),
        (
            "The U.S. Special Envoy met Dr. J. Brown at 10:50 a.m. on Friday. Prices rose 3.5%.",
            "en",
            [
                "The U.S. Special Envoy met Dr. J. Brown at 10:50 a.m. on Friday.",
                "Prices rose 3.5%.",
            ],
        ),
        (
            'He asked: "Why?" Nobody knew! "Well," she said.',
            "en",
            ['He asked: "Why?"', "Nobody knew!", '"Well," she said.'],
        ),
        (
            "Am 3. Oktober ist Feiertag. Das ist gut.",
            "de",
            ["Am 3. Oktober ist Feiertag.", "Das ist gut."],
        ),
        ("Это т.е. пример. Второе предложение.", "ru", ["Это т.е. пример.", "Второе предложение."]),
        ("   ", "en", []),
    ],
)
def test_sentence_rules(line: str, lang: str, sentences: list[str]) -> None:
    assert split_sentences(line, lang) == sentences


def segment(tmp_path: Path, lines: list[str], lang: str) -> tuple[list[str], dict]:
    with CorpusWriter(tmp_path / "in", (lang,)) as writer:
        for line in lines:
            writer.write((line,))
    ctx = make_ctx(tmp_path / "out", "segment", corpus=tmp_path / "in")
    SegmentStep.from_dict({}).run(ctx)
    return [pair[0] for pair in Corpus.open(ctx.output("corpus"))], ctx.stats.as_dict()


@pytest.mark.parametrize(("path", "lang"), [(JA_REF, "ja"), (ZH_SRC, "zh"), (EN_SRC, "en")])
def test_real_lines_lose_no_text(tmp_path: Path, path: Path, lang: str) -> None:
    """Every character but whitespace comes out, in order; lines with several sentences are
    split, and each sentence is a line of its own."""
    if not path.exists():
        pytest.skip(f"{path} is not staged")
    lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    out, stats = segment(tmp_path, lines, lang)
    squeeze = "".join("".join(lines).split())
    assert "".join("".join(out).split()) == squeeze
    assert stats["lines_in"] == len(lines) and stats["sentences"] == len(out)
    assert 0 < stats["lines_split"] < len(lines)
    assert len(out) > len(lines)
    assert all(sentence and "\n" not in sentence for sentence in out)


def test_parallel_corpus_refused(tmp_path: Path) -> None:
    with CorpusWriter(tmp_path / "in", ("en", "ja")) as writer:
        writer.write(("A. B.", "あ。い。"))
    ctx = make_ctx(tmp_path / "out", "segment", corpus=tmp_path / "in")
    with pytest.raises(StepError, match="misalign"):
        SegmentStep.from_dict({}).run(ctx)


def test_blank_lines_counted(tmp_path: Path) -> None:
    out, stats = segment(tmp_path, ["一。二。", " ", "三"], "zh")
    assert out == ["一。", "二。", "三"]
    assert stats["empty_dropped"] == 1 and stats["lines_split"] == 1
