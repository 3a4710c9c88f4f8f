"""Word-based rules on raw, unsegmented text: Japanese words are MeCab's, Chinese words jieba's,
every other language's whitespace words (NT5 §3.2, footnote 3), through one cached service."""

from __future__ import annotations

import numpy as np
import pytest

from mtcore.chain.ranking import KeepSpec, ranked_cut
from mtcore.exec import shards
from mtcore.text.block import TextBlock
from mtcore_plugins.common.text import tokens as _tokens
from tests.support import ROOT

# Raw lines of the WMT22 general test sets (en-ja, en-zh references), unsegmented.
JA_NEWS = (
    "菅官房長官は記者会見で、新型コロナウイルスの感染拡大を防ぐため、"
    "政府として全力で取り組む考えを示した。"
)
ZH_NEWS = "国家统计局今天发布数据显示，今年前三季度国内生产总值同比增长百分之三，经济运行总体稳定。"  # noqa: RUF001
EN_NEWS = "The government says it will do its utmost to stop the spread of the virus."
WHY = ("Why?", "どうしてだろう\uff1f")  # WMT23 general test set, en-ja line 182
URL = "https://example.com/news/2022/11/very-long-article-name-here.html"


def build(registry, name, langs=("en", "ja"), **config):
    plugin = registry.load("filters", name).from_dict(config)
    plugin.setup(langs)
    return plugin


def verdict(plugin, pair, langs):
    block = TextBlock.from_pairs([pair], langs)
    return bool(plugin.accept_block(plugin.score_block(block))[0])


@pytest.mark.parametrize(
    ("langs", "pair", "config", "kept"),
    [
        # a 50-character raw Japanese sentence: one whitespace "word", but MeCab words are short
        (("en", "ja"), ("The government will do its utmost.", JA_NEWS), {}, True),
        (("en", "ja"), ("The government will do its utmost.", JA_NEWS), {"unit": "word"}, False),
        # the same for raw Chinese through jieba (OpusFilter's blind spot on Zh-En news)
        (("zh", "en"), (ZH_NEWS, "GDP grew by 3 percent."), {}, True),
        (("zh", "en"), (ZH_NEWS, "GDP grew by 3 percent."), {"unit": "word"}, False),
        # a URL is one word in any segmenter: over 40 characters goes, on either side
        (("en", "ja"), ("See the article.", f"記事は{URL}を参照"), {}, False),
        (("en", "ja"), (f"See {URL}", "記事を参照"), {}, False),
        # mixed script: a Latin run inside Japanese is one word (MeCab alone would cut it into
        # letters), as a URL is above
        (("en", "ja"), ("x", "これは" + "a" * 41 + "です"), {}, False),
        (("en", "ja"), ("x", "これは" + "a" * 40 + "です"), {}, True),
        # a long katakana loanword is one word, but well under 40 characters
        (
            ("en", "ja"),
            ("antidisestablishmentarianism", "アンチディスエスタブリッシュメンタリアニズム"),
            {},
            True,
        ),
        # whitespace languages are unchanged: 41 characters go, 40 stay (NT5: "over 40")
        (("en", "ja"), ("a" * 41, "猫"), {}, False),
        (("en", "ja"), ("a" * 40, "猫"), {}, True),
        # region and ISO 639-3 codes reach the segmenter too
        (("eng", "jpn"), ("The government will do its utmost.", JA_NEWS), {}, True),
        (("en", "zh-Hans"), ("GDP grew by 3 percent.", ZH_NEWS), {}, True),
    ],
)
def test_long_word_counts_segmenter_words(registry, langs, pair, config, kept):
    plugin = build(registry, "long_word", langs=langs, **config)
    assert verdict(plugin, pair, langs) is kept
    assert plugin.accept(plugin.score([pair])[0]) is kept  # the per-pair path agrees


def test_long_word_scores_are_the_longest_token(registry):
    plugin = build(registry, "long_word")
    block = TextBlock.from_pairs([("big  words here", JA_NEWS), ("", "")], ("en", "ja"))
    scores = plugin.score_block(block)
    expect_ja = max(map(len, _tokens.tokens(JA_NEWS, "ja")))
    assert scores.tolist() == [[5, expect_ja], [0, 0]]
    assert not plugin.whole_blocks()  # MeCab runs per line: only on pairs still alive


def test_whitespace_only_chains_stay_vectorized(registry):
    assert build(registry, "long_word", langs=("en", "de")).whole_blocks()
    assert build(registry, "long_word", unit="word").whole_blocks()
    # the class flag is a constant: a per-line instance leaves it as declared
    assert not build(registry, "long_word").whole_blocks()
    assert type(build(registry, "long_word")).vectorized


def test_no_plugin_assigns_a_class_flag_per_instance():
    """Issue 49 point 4: class-level flags (``vectorized``, ``stateful``, ...) stay constants;
    a filter whose path depends on its settings answers ``whole_blocks()``."""
    import ast

    root = ROOT

    flags = {"vectorized", "stateful", "higher_is_better", "char_classes"}
    wrong = []
    for path in sorted((root / "plugins").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    if isinstance(target, ast.Attribute) and target.attr in flags:
                        wrong.append(f"{path.relative_to(root)}:{node.lineno}")
    assert not wrong, wrong


@pytest.mark.parametrize(
    ("langs", "pair", "rule", "config", "kept"),
    [
        # NT5 §3.2 "over 150 words": a raw Japanese sentence is 1 whitespace word, ~30 MeCab ones
        (("en", "ja"), (EN_NEWS, JA_NEWS), "length", {"unit": "token", "min_length": 10}, True),
        (("en", "ja"), (EN_NEWS, JA_NEWS), "length", {"unit": "word", "min_length": 10}, False),
        # NT5 "word ratio exceeds 4": whitespace counts make any raw CJK pair a high ratio
        (("en", "ja"), ("The government says it will do its utmost to stop the spread.", JA_NEWS),
         "length_ratio", {"unit": "token", "max_ratio": 4}, True),
        (("en", "ja"), ("The government says it will do its utmost to stop the spread.", JA_NEWS),
         "length_ratio", {"unit": "word", "max_ratio": 4}, False),
        # NT5 "word and character count > 12": 50 characters in one whitespace word
        (("en", "ja"), ("x", JA_NEWS), "avg_word_length", {"unit": "token"}, True),
        (("en", "ja"), ("x", JA_NEWS), "avg_word_length", {"unit": "word"}, False),
        (("zh", "en"), (ZH_NEWS, "x"), "avg_word_length", {"unit": "token"}, True),
    ],
)  # fmt: skip
def test_every_word_rule_reads_segmenter_words(registry, langs, pair, rule, config, kept):
    plugin = build(registry, rule, langs=langs, **config)
    assert verdict(plugin, pair, langs) is kept


def test_token_cache_segments_each_line_once(monkeypatch):
    """Several word rules in a chain ask for the same lines: MeCab runs once per line, and the
    cached answer equals a fresh one; a full cache is emptied, not grown."""
    calls: list[str] = []
    real = _tokens.tokens

    def counting(text: str, lang: str) -> list[str]:
        calls.append(text)
        return real(text, lang)

    monkeypatch.setattr(_tokens, "tokens", counting)
    monkeypatch.setattr(shards, "_WORKER_MEMO", {})
    lines = [JA_NEWS, "今日は良い天気です。", "", JA_NEWS]
    first = _tokens.count_tokens(lines, "ja").tolist()
    again = _tokens.count_tokens(lines, "ja_JP").tolist()
    longest = _tokens.longest_token(lines, "ja").tolist()
    assert first == again == [len(real(t, "ja")) for t in lines]
    assert longest == [max(map(len, real(t, "ja")), default=0) for t in lines]
    assert sorted(calls) == sorted([JA_NEWS, "今日は良い天気です。"])  # each distinct line once
    monkeypatch.setattr(_tokens, "CACHE_LINES", 2)
    _tokens.count_tokens(["一", "二", "三"], "ja")
    assert len(shards._WORKER_MEMO[("token lengths", "ja")]) <= 2


def test_japanese_words_come_from_the_ipa_dictionary(registry):
    """NT5 §3.2, footnote 3: "MeCab ... with the IPA dictionary". UniDic cuts finer, and the
    word-ratio rule (> 4) then dropped WMT23's clean En-Ja pair WHY (source and reference line
    182): five UniDic words against one English word."""
    assert _tokens.tokens(WHY[1], "ja") == ["どうして", "だろ", "う", "\uff1f"]
    ratio = build(registry, "length_ratio", unit="token", max_ratio=4)
    assert verdict(ratio, WHY, ("en", "ja"))


def test_latin_runs_inside_cjk_stay_whole():
    """MeCab and jieba see the CJK runs only; numbers, Latin words and URLs between them are
    whitespace words, as on the English side."""
    assert _tokens.tokens(f"記事は{URL}を参照", "ja") == ["記事", "は", URL, "を", "参照"]
    assert _tokens.tokens("GDP增长3.5%。", "zh") == ["GDP", "增长", "3.5%", "。"]
    assert _tokens.tokens("これは　東京です", "ja") == ["これ", "は", "東京", "です"]


def test_whitespace_languages_never_segment(monkeypatch):
    monkeypatch.setattr(_tokens, "tokens", None)  # would raise if called
    assert _tokens.count_tokens(["a  b\tc", ""], "en").tolist() == [3, 0]
    assert _tokens.longest_token(["a bbb", ""], "de").tolist() == [3, 0]


# --- NT5 §3.2: keep a share of what was translated -----------------------------------------


def test_top_fraction_of_the_input_counts_every_pair_read():
    """NT5 keeps 579M of 1.2B translated sentences: a share of the input, not of what the rules
    left. With 100 pairs in and 60 reaching the ranking, 0.4825 of the input is 48 pairs."""
    keys = np.arange(60, dtype=float)
    ranked = KeepSpec(top_fraction=0.4825)
    of_input = KeepSpec(top_fraction=0.4825, fraction_of="input")
    assert ranked_cut(keys, ranked, True, pairs_in=100).sum() == 29  # of the 60 ranked
    kept = ranked_cut(keys, of_input, True, pairs_in=100)
    assert kept.sum() == 48 and kept[-48:].all()  # the best 48
    assert ranked_cut(keys, of_input, True, pairs_in=1000).all()  # never more than reached


def test_fraction_of_needs_a_fraction():
    with pytest.raises(ValueError, match="fraction_of applies to top_fraction only"):
        KeepSpec(top_k=5, fraction_of="input")
