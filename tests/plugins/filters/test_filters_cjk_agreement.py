# ruff: noqa: RUF001, RUF003 (full-width and CJK marks are what these rules compare)
"""The agreement rules that read Chinese and Japanese (issue 21): ``final_punctuation``,
``brackets``, ``numbers`` and ``script_ratio`` on raw Chinese, Japanese and mixed-script lines.
Most rows are WMT21-23 test pairs (source and human reference) that the rules used to reject,
shortened; the others are the defects the rules must still catch. Each row's id says why it
is there."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from mtcore.text.block import TextBlock

ZH_EN = ("zh", "en")
JA_EN = ("ja", "en")
EN_JA = ("en", "ja")


def case(langs, pair, accepted, config=None, *, id):
    return pytest.param(langs, pair, config or {}, accepted, id=id)


def check(registry, name: str, langs, pair, config: dict[str, Any], accepted: bool) -> None:
    plugin = registry.load("filters", name).from_dict(config)
    plugin.setup(langs)
    (score,) = plugin.score([pair])
    assert bool(plugin.accept(score)) is accepted, score
    # the engine's path (a shard as a TextBlock) decides the same
    block_scores = plugin.score_block(TextBlock.from_pairs([pair], langs))
    assert bool(np.asarray(plugin.accept_block(block_scores))[0]) is accepted


FINAL_PUNCTUATION = [
    case(ZH_EN, ("这是一本书。", "This is a book."), True, id="CJK full stop equals ASCII"),
    case(ZH_EN, ("你好吗？", "How are you?"), True, id="full-width question mark"),
    case(ZH_EN, ("我们只看到一个袋子", "We only see one bag."), True, id="no mark reads as stop"),
    case(ZH_EN, ("要打电话跟他说吗", "Shall I tell him?"), True, id="吗 without a mark asks"),
    case(JA_EN, ("何を心配してますか。", "What are you worried about?"), True, id="か。 asks"),
    case(JA_EN, ("本商品も中華ですが…。", "It is Chinese..."), True, id="…。 is an ellipsis"),
    case(JA_EN, ("うーん、、、", "Hmm..."), True, id="、、、 is an ellipsis"),
    case(JA_EN, ("まあ・・・", "Well..."), True, id="・・・ is an ellipsis"),
    case(JA_EN, ("カバーする!?", "Covers it?!"), True, id="!? equals ?!"),
    case(
        ZH_EN,
        ("“大约是种玉米的10倍。”", "“It is 10 times that of corn. “"),
        True,
        id="an opening quote closing a line is looked through",
    ),
    case(JA_EN, ("「ここだよ」", "I'm here."), True, id="」 looked through, then no mark"),
    # defects
    case(ZH_EN, ("你好吗？", "How are you."), False, id="question against statement"),
    case(JA_EN, ("名案だ。", "Good idea!"), False, id="exclamation against statement"),
    case(ZH_EN, ("导致 140 人死亡，", "140 were killed."), False, id="comma: a cut line"),
    case(ZH_EN, ("我们只看到一个袋子", "One bag?"), False, id="no mark is no question"),
    case(
        ZH_EN,
        ("为什么不给取消", "Why can't I cancel it?"),
        False,
        id="a question without particle or mark is not read as one",
    ),
    case(
        ZH_EN,
        ("我们只看到一个袋子", "We only see one bag."),
        False,
        {"missing_is_stop": False},
        id="missing_is_stop off: no mark only matches no mark",
    ),
    case(
        ZH_EN,
        ("我们只看到一个袋子", "One bag?"),
        True,
        {"missing_ok": True},
        id="missing_ok: no mark matches any mark",
    ),
]


@pytest.mark.parametrize("langs,pair,config,accepted", FINAL_PUNCTUATION)
def test_final_punctuation(registry, langs, pair, config, accepted) -> None:
    check(registry, "final_punctuation", langs, pair, config, accepted)


ROUND = {"kinds": ["round"]}  # Yishu's recipe
BRACKETS = [
    case(ZH_EN, ("使用（HTTPS）连接", "Use a (HTTPS) link"), True, ROUND, id="（） equals ()"),
    case(
        ZH_EN,
        ("[PERSON2] 英语和德语。", "(PERSON2) English and German."),
        True,
        {"kinds": ["round"], "optional": False},
        id="square stands in for round",
    ),
    case(
        ZH_EN,
        ("[PERSON2] 英语和德语。", "(PERSON2) English and German."),
        False,
        {"kinds": ["round"], "optional": False, "interchangeable": False},
        id="interchangeable off: square is no round bracket",
    ),
    case(
        ZH_EN,
        ("美丽自信【正版书】", "Beautiful and Confident (authentic book)"),
        True,
        ROUND,
        id="lenticular 【】 stands in for ()",
    ),
    case(
        ZH_EN,
        ("【正版书】美丽自信", "[authentic book] Beautiful"),
        True,
        {"kinds": ["round", "square"]},
        id="【】 equals [] when both kinds count",
    ),
    case(
        ZH_EN,
        ("彼得·梅杰（Peter Meijer）周五说", "Peter Meijer said on Friday"),
        True,
        ROUND,
        id="gloss: a name's spelling the other side has",
    ),
    case(
        ZH_EN,
        ("彼得·梅杰（Peter Meijer）周五说", "Peter Meijer said on Friday"),
        False,
        {"kinds": ["round"], "optional": False},
        id="optional off: a gloss counts",
    ),
    case(
        ZH_EN,
        ("据中央社今天称", "According to the Central News Agency (CNA) today"),
        True,
        ROUND,
        id="acronym after the name it abbreviates",
    ),
    case(JA_EN, ("岩渕麗楽（れいら）は欠場", "Iwabuchi Reira is out"), True, id="kana reading"),
    case(JA_EN, ("9/22(水)に発売", "out on Wednesday, September 22"), True, id="weekday"),
    case(
        JA_EN,
        ("「時間がかかる」（市担当者）。", '"It takes time," a city official said.'),
        True,
        id="the speaker after a quote",
    ),
    case(JA_EN, ("風都探偵は知らんけど（笑）", "Don't know it lol"), True, id="（笑） is lol"),
    case(ZH_EN, ("(三)参加授课", "3. Participate in courses"), True, id="list mark (三)"),
    case(
        EN_JA,
        ("Apple (16) and Moses (14)", "アップル（16歳）とモーゼス（14歳）"),
        True,
        id="as many groups each side, one content found on the other",
    ),
    # defects
    case(
        ZH_EN,
        ("扎带（束线带）产品", "strapping products"),
        False,
        ROUND,
        id="an aside the other side lacks",
    ),
    case(
        JA_EN,
        ("引っ込ませる(陥没させる)とか", "such as indenting the switch"),
        False,
        id="a Japanese aside the English lacks",
    ),
    case(ZH_EN, ("他说（这是真的", "He said (this is true)"), False, id="a cut-off group"),
    case(
        ZH_EN,
        ("你好）（", "hello )("),
        False,
        {"balanced": True},
        id="balanced: a group closing before it opens",
    ),
]


@pytest.mark.parametrize("langs,pair,config,accepted", BRACKETS)
def test_brackets(registry, langs, pair, config, accepted) -> None:
    check(registry, "brackets", langs, pair, config, accepted)


XIAOMI = {"min_digits": 3}
NUMBERS = [
    case(ZH_EN, ("造成至少65万人死亡", "at least 650,000 deaths"), True, id="万 unit"),
    case(ZH_EN, ("仅23.4亿美元", "only US$2.34 billion"), True, id="亿 against billion"),
    case(ZH_EN, ("尚有500余万的缺口", "a gap of over 5 million"), True, id="余 before 万"),
    case(ZH_EN, ("1亿2000万人", "120 million people"), True, id="亿 and 万 in one number"),
    case(ZH_EN, ("有六成在20元以下", "60% below RMB 20"), True, id="成 is tenths"),
    case(ZH_EN, ("在 170 万英镑工地上", "at the £1.7m site"), True, id="£1.7m is a million"),
    case(JA_EN, ("１０００円借りた。", "I borrowed 1,000 yen."), True, id="full-width digits"),
    case(ZH_EN, ("定价１，０００元", "priced at 1000 yuan"), True, id="，as thousands separator"),
    case(ZH_EN, ("约有2 000人", "about 2000 people"), True, id="space as thousands separator"),
    case(JA_EN, ("高さは約１．５５メートル", "about 1.55 meters"), True, id="full-width decimal"),
    case(ZH_EN, ("在过去二十年期间", "over the past 20 years"), True, id="二十 equals 20"),
    case(ZH_EN, ("二〇二〇年", "in 2020"), True, id="二〇二〇 is a year"),
    case(ZH_EN, ("第二十六条", "Article 26"), True, id="二十六 equals 26"),
    case(ZH_EN, ("4 岁的 Khadiga", "Khadiga, four,"), True, id="number word four"),
    case(EN_JA, ("twice as long", "長さが2倍"), True, id="twice is 2倍"),
    case(EN_JA, ("a man in his fifties", "５０代の男性"), True, id="fifties is 50代"),
    case(ZH_EN, ("7月26日", "July 26"), True, id="month name"),
    case(ZH_EN, ("下午4:00", "at 4 p.m."), True, id="zero minutes dropped"),
    case(EN_JA, ("by 5.30pm", "午後５：３０まで"), True, id="5.30pm is 5:30"),
    case(JA_EN, ("時期は21年以降", "in 2021 or later"), True, id="21年 is 2021"),
    case(JA_EN, ("令和５年１月27日", "on January 27th, 2023"), True, id="era year 令和5"),
    case(ZH_EN, ("上世纪 20 年代", "the 1920s"), True, id="20年代 is the 1920s"),
    case(ZH_EN, ("新冠肺炎疫情", "the COVID-19 epidemic"), True, id="digits in a name"),
    case(ZH_EN, ("新增确诊病例1例", "a new confirmed case"), True, id="1 is a, an, per"),
    case(ZH_EN, ("3万人", "30,000 people"), True, XIAOMI, id="3万 has five digits"),
    case(ZH_EN, ("等40分钟", "wait 30 minutes"), True, XIAOMI, id="below min_digits"),
    # defects
    case(ZH_EN, ("2019年", "in 2020"), False, id="different year"),
    case(ZH_EN, ("2019年", "in 2020"), False, XIAOMI, id="different year, min_digits 3"),
    case(ZH_EN, ("3万人", "3000 people"), False, id="3万 is not 3000"),
    case(ZH_EN, ("多达530万人", "as many as 530 million"), False, id="万 read as million"),
    case(ZH_EN, ("127万到250万人", "1.27 and 25 million"), False, id="a scale lost"),
    case(ZH_EN, ("54例中46例", "of the 43, 46 are"), False, id="a changed count"),
    case(JA_EN, ("3月に購入", "bought in April"), False, id="a different month"),
    case(EN_JA, ("Wait forty minutes.", "３０分待ってて。"), False, id="forty is not ３０"),
    case(ZH_EN, ("高 5m 的雕像", "a 5 million statue"), False, id="5m without currency"),
]


@pytest.mark.parametrize("langs,pair,config,accepted", NUMBERS)
def test_numbers(registry, langs, pair, config, accepted) -> None:
    check(registry, "numbers", langs, pair, config, accepted)


def test_numbers_score_counts_both_sides(registry) -> None:
    plugin = registry.load("filters", "numbers").from_dict({})
    plugin.setup(ZH_EN)
    assert plugin.score([("2019年有3万人", "30,000 people in 2020")]) == [2]  # 2019 and 2020


SIGDIAL = ("所以我们必须和 SIGDial 或者 Interspeech 谈判。", "So we must negotiate with them.")
WORDS = {"languages": {"zh": {"unit": "word"}}}
SCRIPT_RATIO = [
    case(ZH_EN, SIGDIAL, True, WORDS, id="in words, a Latin name weighs as one unit"),
    case(
        ZH_EN,
        ("网络安全公司 Crowdstrike 副总裁亚当·迈耶斯 (Adam Meyers) 说", "Adam Meyers said"),
        True,
        WORDS,
        id="in words, a name and its spelling",
    ),
    # Yishu §2.1.1 counts characters (the preset's default): the same lines fail
    case(ZH_EN, SIGDIAL, False, id="counted in letters: 18 Latin of 29"),
    case(
        ZH_EN,
        ("网络安全公司 Crowdstrike 副总裁亚当·迈耶斯 (Adam Meyers) 说", "Adam Meyers said"),
        False,
        id="in letters, a name and its spelling: 21 Latin of 36",
    ),
    case(ZH_EN, ("unacceptable", "That is unacceptable."), False, id="untranslated line"),
    case(
        ZH_EN,
        ("Nancyæ\x80\x95ç\x8b\x97ã\x80\x82", "Nancy is afraid of dogs."),
        False,
        id="mojibake: Latin-1 letters for Chinese",
    ),
    case(ZH_EN, ("中国人民解放军", "中国人民解放军 army"), False, id="English side in Han"),
    case(
        ZH_EN,
        ("是Edward。", "This is Edward."),
        False,
        {"preset": "xiaomi"},
        id="xiaomi still counts letters: 1 Han of 7",
    ),
]


@pytest.mark.parametrize("langs,pair,config,accepted", SCRIPT_RATIO)
def test_script_ratio(registry, langs, pair, config, accepted) -> None:
    check(registry, "script_ratio", langs, pair, config, accepted)
