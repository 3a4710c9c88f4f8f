# ruff: noqa: RUF001, RUF003 (full-width marks are what these rules are about)
"""The papers' rule filters, ``script_ratio``, ``placeholders`` and the ``ui_strings`` processor
on real lines: Tatoeba En-Ja/En-Zh test sets, small_parallel_enja, the Microtopia Weibo corpus,
WMT22's Zh-En sources with one system's (DLUT) raw outputs and the machine's ja/zh_CN gettext
catalogs. Every row names the corpus its pair comes from and
the test checks that the pair is really there; a row that edits a real pair says so and keeps
the real pair as ``base``."""

from __future__ import annotations

import os
import random
from functools import cache
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pytest

from mtcore.contracts.errors import PluginError
from mtcore.recipe.load import build_recipe
from mtcore.run.runner import Runner
from mtcore.text.block import TextBlock
from tests.support.data import ENJA, SHARED, clean_split_recipe

TATOEBA = {
    "tatoeba-enja": SHARED / "en-ja/Helsinki-NLP+OPUS-MT-testsets/testsets/eng-jpn",
    "tatoeba-enzh": SHARED / "zh-en/Helsinki-NLP+OPUS-MT-testsets/testsets/eng-zho",
}
TATOEBA_SIDES = {"tatoeba-enja": ("eng", "jpn"), "tatoeba-enzh": ("eng", "zho")}
MICROTOPIA = SHARED / "zh-en/wlin12+SMMTT/data/parallel/microtopia.en-zh"
WMT22_ZHEN = SHARED / "zh-en/wmt-conference+wmt22-news-systems/txt"
LOCALE = Path("/usr/share/locale")
LANGS = {
    "tatoeba-enja": ("en", "ja"),
    "small-enja": ("en", "ja"),
    "gettext-ja": ("en", "ja"),
    "tatoeba-enzh": ("en", "zh"),
    "microtopia": ("en", "zh"),
    "gettext-zh_CN": ("en", "zh"),
    "wmt22-zhen-dlut": ("zh", "en"),
}


def _missing(path: Path) -> None:
    if os.environ.get("CI"):  # CI always has the data: a missing path is a bug, not a skip
        pytest.fail(f"real data not found at {path}")
    pytest.skip(f"real data not found at {path}")


def _lines(path: Path) -> list[str]:
    if not path.exists():
        _missing(path)
    return path.read_text(encoding="utf-8").split("\n")[:-1]


@cache
def _gettext(lang: str) -> list[tuple[str, str]]:
    from mtcore_plugins.sources.gettext import parse_mo

    catalogs = sorted((LOCALE / lang / "LC_MESSAGES").glob("*.mo"))
    if not catalogs:
        pytest.skip(f"no gettext catalogs under {LOCALE / lang}")
    pairs = []
    for path in catalogs:
        for msgid, msgstr in parse_mo(path.read_bytes()):
            if not msgid or b"\x00" in msgid:  # header, plural entries
                continue
            try:
                pairs.append((msgid.decode().split("\x04")[-1], msgstr.decode()))
            except UnicodeDecodeError:
                continue
    return pairs


@cache
def corpus(name: str) -> list[tuple[str, str]]:
    """Every pair of the named real corpus, in file order."""
    if name in TATOEBA:
        stem = TATOEBA[name] / "tatoeba-test-v2021-08-07"
        a, b = TATOEBA_SIDES[name]
        return list(zip(_lines(Path(f"{stem}.{a}")), _lines(Path(f"{stem}.{b}")), strict=True))
    if name == "small-enja":
        return list(zip(_lines(ENJA / "train.en"), _lines(ENJA / "train.ja"), strict=True))
    if name == "wmt22-zhen-dlut":  # source and a system's output, line by line
        zh = _lines(WMT22_ZHEN / "sources/generaltest2022.zh-en.src.zh")
        en = _lines(WMT22_ZHEN / "system-outputs/generaltest2022.zh-en.hyp.DLUT.en")
        return list(zip(zh, en, strict=True))
    if name == "microtopia":  # "<English> ||| <Chinese>"
        return [tuple(line.split(" ||| ", 1)) for line in _lines(MICROTOPIA)]  # type: ignore[misc]
    return _gettext(name.split("-", 1)[1])


@cache
def corpus_set(name: str) -> frozenset[tuple[str, str]]:
    return frozenset(corpus(name))


class Case(NamedTuple):
    filter: str
    config: dict[str, Any]
    source: str
    pair: tuple[str, str]
    accepted: bool
    base: tuple[str, str] | None = None  # the real pair an edited row starts from


TATOEBA_JA_PAIR = ("I borrowed 1,000 yen from my cousin.", "私はいとこから１０００円借りた。")
TATOEBA_ZH_PAIR = ("Bob helped me.", "Bob帮助了我。")
MOJIBAKE = ("Nancy is afraid of dogs.", "Nancyæ\x80\x95ç\x8b\x97ã\x80\x82")
CONGRATS = ("Congratulations!", "祝贺你")
AMP = (
    "Break for bath &amp; food, back in about 40 minutes!",
    "一旦風呂＆飯落ち、４０分ぐらいして帰還！",
)
LOL = ("LOLOLOLOL!", "草草の草ァ！")
DLUT_POWER = (  # WMT22 zh-en source line 103 and DLUT's output
    "小功率编码器电缆 中大功率编码器电缆 小功率动力线 中大功率动力线",
    "Small Power Encoder Cable High Power Encoder Cable Small Power Power Power Power Power Cable "
    "High Power Power Power Power Cable",
)
DLUT_FEBRUARY = (  # line 1474
    "随机挑选三个热搜：二月二龙抬头、好丽友涨价、货拉拉事件，舆情扩散形成波峰，然后【指数下降】"
    "（平滑曲线）最终消散，如果产生次生舆情会有小驼峰再次出现。",
    "Three hot searches were randomly selected: " + ", ".join(["February"] * 95),
)
CHEERS = (
    "Cheersssss!!!! To new day! A new album a new me!!!! ;-) so much love to EVERY1 who helped "
    "make this moment",
    "干杯！！！！为新的一天！一张全新的专辑和一个全新的我！！！！：-）非常感谢促成此刻的每一个人",
)
WINK = (
    "To SKYY_x： ;) I'll gladly take credit for that quote !",
    "对SKYY_x说：;) 我将会很高兴为那句引用接受褒奖",
)
HTTPS = (
    "Consider using a secure (HTTPS) URL for this web link.",
    "このWebリンクには安全な（HTTPS）URLを使用することを検討してください。",
)

CASES = [
    # --- identical (NT5 §3.2)
    Case("identical", {}, "gettext-ja", ("PackageKit", "PackageKit"), False),  # untranslated name
    Case("identical", {}, "gettext-ja", ("immutable", "IMMUTABLE"), True),  # differs in case only
    # ... which the normalised comparison (case-folded) calls identical
    Case("identical", {"normalize": True}, "gettext-ja", ("immutable", "IMMUTABLE"), False),
    Case("identical", {"normalize": True}, "tatoeba-enja", TATOEBA_JA_PAIR, True),  # real pair
    # --- empty (Yishu §2.1.1): a real target blanked, or only an ideographic space
    Case("empty", {}, "tatoeba-enja", (TATOEBA_JA_PAIR[0], ""), False, TATOEBA_JA_PAIR),
    Case("empty", {}, "tatoeba-enja", (TATOEBA_JA_PAIR[0], "\u3000"), False, TATOEBA_JA_PAIR),
    Case("empty", {}, "tatoeba-enja", TATOEBA_JA_PAIR, True),  # both sides have text
    # --- invalid_unicode (NT5 §3.2)
    Case("invalid_unicode", {}, "tatoeba-enzh", MOJIBAKE, False),  # mojibake: C1 controls
    Case("invalid_unicode", {}, "tatoeba-enzh", TATOEBA_ZH_PAIR, True),  # clean text
    # an emoji of Unicode 6 is assigned: not invalid
    Case(
        "invalid_unicode",
        {},
        "microtopia",
        (
            "Just arrived at the NRJ Music Award show!! I can FEEL the LOVE!!\U0001f618",
            "刚刚抵达法国NRJ电台音乐大奖节目现场！！我感受到了爱",
        ),
        True,
    ),
    # a decoding error's U+FFFD inserted into a real target
    Case(
        "invalid_unicode",
        {},
        "tatoeba-enzh",
        (TATOEBA_ZH_PAIR[0], "Bob帮\ufffd了我。"),
        False,
        TATOEBA_ZH_PAIR,
    ),
    # a private-use character (a font's icon): invalid by default, allowed when asked
    Case(
        "invalid_unicode",
        {},
        "tatoeba-enzh",
        ("Bob\ue000 helped me.", "Bob帮助了我。"),
        False,
        TATOEBA_ZH_PAIR,
    ),
    Case(
        "invalid_unicode",
        {"private_use": False},
        "tatoeba-enzh",
        ("Bob\ue000 helped me.", "Bob帮助了我。"),
        True,
        TATOEBA_ZH_PAIR,
    ),
    # a tab is the one control character allowed
    Case(
        "invalid_unicode",
        {},
        "tatoeba-enzh",
        ("Bob\thelped me.", "Bob帮助了我。"),
        True,
        TATOEBA_ZH_PAIR,
    ),
    # --- avg_word_length (NT5 §3.2: characters per word above 12)
    Case("avg_word_length", {}, "tatoeba-enzh", CONGRATS, False),  # 16 characters, one word
    # unsegmented Japanese is one 16-character "word" by whitespace, 9 MeCab words
    Case("avg_word_length", {"unit": "word"}, "tatoeba-enja", TATOEBA_JA_PAIR, False),
    Case("avg_word_length", {"unit": "token"}, "tatoeba-enja", TATOEBA_JA_PAIR, True),
    Case("avg_word_length", {"max_ratio": 16}, "tatoeba-enzh", CONGRATS, True),  # at the limit
    # --- escaped_html (Yishu §2.1.1)
    Case("escaped_html", {}, "tatoeba-enja", AMP, False),  # "&amp;" left escaped
    Case("escaped_html", {"max_entities": 1}, "tatoeba-enja", AMP, True),  # one is tolerated
    # a bare "&" is text, not an entity
    Case(
        "escaped_html",
        {},
        "gettext-ja",
        ("Group ID for tabs drag and drop", "タブのドラッグ&ドロップに対するグループ ID です"),
        True,
    ),
    # --- char_repetition (Yishu §2.1.1: 1 char > 4 times, 2 chars > 3 times, 3 chars > twice)
    Case("char_repetition", {}, "tatoeba-enja", LOL, False),  # "LO" four times in a row
    Case("char_repetition", {}, "microtopia", CHEERS, False),  # "sssss": five in a row
    Case("char_repetition", {}, "tatoeba-enja", TATOEBA_JA_PAIR, True),  # "000" three zeros
    Case("char_repetition", {"limits": {2: 4}}, "tatoeba-enja", LOL, True),  # "LO" x4 allowed
    # a number of six zeros edited into a real line: repeats, unless digits are ignored
    Case(
        "char_repetition",
        {},
        "tatoeba-enja",
        ("I borrowed 1000000 yen from my cousin.", TATOEBA_JA_PAIR[1]),
        False,
        TATOEBA_JA_PAIR,
    ),
    Case(
        "char_repetition",
        {"ignore_digits": True},
        "tatoeba-enja",
        ("I borrowed 1000000 yen from my cousin.", TATOEBA_JA_PAIR[1]),
        True,
        TATOEBA_JA_PAIR,
    ),
    # words (Yishu's recipe reads the rule for English as words too): a raw WMT22 system
    # output stutters a word, as machine translation does, which the character limits alone
    # do not see ("Power " is six characters) ...
    Case("char_repetition", {}, "wmt22-zhen-dlut", DLUT_POWER, True),
    Case("char_repetition", {"words": 4}, "wmt22-zhen-dlut", DLUT_POWER, False),  # Power x5
    # ... trailing punctuation belongs to the word ("February, " 95 times) ...
    Case("char_repetition", {"words": 4}, "wmt22-zhen-dlut", DLUT_FEBRUARY, False),
    # ... four in a row is within the limit (one "Power" edited out of the five)
    Case(
        "char_repetition",
        {"words": 4},
        "wmt22-zhen-dlut",
        (
            DLUT_POWER[0],
            DLUT_POWER[1].replace("Power Power Power Power Power", "Power " * 3 + "Power"),
        ),
        True,
        DLUT_POWER,
    ),
    # a word must repeat whole: "Powerful" after four "Power"s is not a fifth
    Case(
        "char_repetition",
        {"words": 4},
        "wmt22-zhen-dlut",
        (
            DLUT_POWER[0],
            DLUT_POWER[1].replace("Power Power Power Power Power", "Power " * 4 + "Powerful"),
        ),
        True,
        DLUT_POWER,
    ),
    # a number repeated five times: a word, unless digits are ignored
    Case(
        "char_repetition",
        {"words": 4},
        "tatoeba-enja",
        ("I borrowed 1000 1000 1000 1000 1000 yen from my cousin.", TATOEBA_JA_PAIR[1]),
        False,
        TATOEBA_JA_PAIR,
    ),
    Case(
        "char_repetition",
        {"words": 4, "ignore_digits": True},
        "tatoeba-enja",
        ("I borrowed 1000 1000 1000 1000 1000 yen from my cousin.", TATOEBA_JA_PAIR[1]),
        True,
        TATOEBA_JA_PAIR,
    ),
    # --- final_punctuation (Yishu §2.1.1; "?" and "？" are the same mark)
    Case("final_punctuation", {}, "tatoeba-enja", ("Are you all right?", "大丈夫？"), True),
    Case("final_punctuation", {}, "tatoeba-enja", ("Good Idea!", "名案だ。"), False),  # ! vs 。
    # a Japanese question ends in か。: it matches "?"
    Case(
        "final_punctuation",
        {},
        "small-enja",
        ("what time is it ?", "何 時 で しょ う か 。"),
        True,
    ),
    # closing quotes are looked through: '."' against a Japanese line ending in 」 and no
    # mark, which reads as a full stop ...
    Case(
        "final_punctuation",
        {},
        "tatoeba-enja",
        ('"Where are you?" "I’m here."', "「どこにいるの？」「ここだよ」"),
        True,
    ),
    # ... unless missing_is_stop is off
    Case(
        "final_punctuation",
        {"missing_is_stop": False},
        "tatoeba-enja",
        ('"Where are you?" "I’m here."', "「どこにいるの？」「ここだよ」"),
        False,
    ),
    # ... which missing_ok lets through: the Japanese line has no final mark
    Case(
        "final_punctuation",
        {"missing_ok": True},
        "tatoeba-enja",
        ('"Where are you?" "I’m here."', "「どこにいるの？」「ここだよ」"),
        True,
    ),
    # --- brackets (Yishu §2.1.1; full-width equals half-width)
    Case("brackets", {}, "gettext-ja", HTTPS, True),  # (HTTPS) against （HTTPS）
    # an aside in brackets (full-width open, half-width close) the English lacks
    Case(
        "brackets", {}, "tatoeba-enja", ("I am twelve years old.", "私は 12（十二) 歳です。"), False
    ),
    Case("brackets", {}, "microtopia", WINK, True),  # one ")" each side
    Case("brackets", {"balanced": True}, "microtopia", WINK, False),  # ... closing nothing
    # --- numbers (Yishu §2.1.1: every number; Xiaomi §2.2.1: three digits or more)
    Case("numbers", {}, "tatoeba-enja", TATOEBA_JA_PAIR, True),  # 1,000 = １０００
    # "thirty" written out matches ３０ in digits
    Case("numbers", {}, "tatoeba-enja", ("Wait thirty minutes.", "３０分待ってて。"), True),
    # ... "forty" does not
    Case(
        "numbers",
        {},
        "tatoeba-enja",
        ("Wait forty minutes.", "３０分待ってて。"),
        False,
        ("Wait thirty minutes.", "３０分待ってて。"),
    ),
    # two digits are below min_digits: not compared
    Case(
        "numbers",
        {"min_digits": 3},
        "tatoeba-enja",
        ("Wait thirty minutes.", "３０分待ってて。"),
        True,
    ),
    # 5000 against the Chinese numeral 五千
    Case(
        "numbers",
        {"min_digits": 3},
        "tatoeba-enzh",
        ("5000 yuan is a lot of money.", "五千元是一大笔钱。"),
        True,
    ),
    # 100,000 against 10萬 (ten ten-thousands)
    Case(
        "numbers",
        {"min_digits": 3},
        "tatoeba-enzh",
        ("My husband earns $100,000 a year.", "我丈夫一年收入10萬美元。"),
        True,
    ),
    # ... but not against 1萬
    Case(
        "numbers",
        {"min_digits": 3},
        "tatoeba-enzh",
        ("My husband earns $100,000 a year.", "我丈夫一年收入1萬美元。"),
        False,
        ("My husband earns $100,000 a year.", "我丈夫一年收入10萬美元。"),
    ),
    # --- urls (Xiaomi §2.2.1)
    Case(
        "urls",
        {},
        "microtopia",
        (
            "Join the LPU video chat with Mike Shinoda now at http://t.cn/zlympTS",
            "现在加入http://t.cn/zlympTa网站，和Mike Shinoda进行视频聊天吧",
        ),
        False,  # the short links differ in their last character
    ),
    Case(
        "urls",
        {},
        "microtopia",
        (
            "Pre-Order the CD at http://t.cn/zWstVFh or digital on iTunes TheConnectionDeluxe",
            "快去http://t.cn/zWstVFh预定CD，或者去iTunes购买The Connection豪华版的数字音乐专辑",
        ),
        True,  # the same link, glued to Chinese text
    ),
    # the same URL, mid-sentence on one side
    Case(
        "urls",
        {},
        "gettext-ja",
        (
            "International Standard Recording Code - see http://www.ifpi.org/isrc/",
            "International Standard Recording Code - http://www.ifpi.org/isrc/ を参照してください",
        ),
        True,
    ),
    # --- markup (HW-TSC §2.2)
    Case("markup", {}, "gettext-ja", ("<b>Comment:</b>", "<b>コメント:</b>"), False),  # Pango
    # element names quoted in a message are tags all the same
    Case(
        "markup",
        {},
        "gettext-ja",
        (
            "A <text> element can't occur before a <tags> element",
            "要素 <text> は要素 <tag> の前に記述できません",
        ),
        False,
    ),
    # "<%s>" is not a tag (no name)
    Case(
        "markup",
        {},
        "gettext-ja",
        ('<%s> element has invalid ID "%s"', '要素 <%s> の ID "%s" が間違っています'),
        True,
    ),
    Case("markup", {}, "tatoeba-enja", AMP, True),  # one entity is not entity-encoded markup
    Case(
        "markup",
        {},
        "tatoeba-enja",
        ("{{Wait thirty minutes.}}", "３０分待ってて。"),
        False,
        ("Wait thirty minutes.", "３０分待ってて。"),
    ),  # wiki template braces
    # ... not markup when wiki markup is switched off
    Case(
        "markup",
        {"wiki": False},
        "tatoeba-enja",
        ("{{Wait thirty minutes.}}", "３０分待ってて。"),
        True,
        ("Wait thirty minutes.", "３０分待ってて。"),
    ),
    # --- script_ratio (Yishu §2.1.1: non-native ratio above 0.4; Xiaomi §2.2.1)
    Case(
        "script_ratio",
        {"languages": {"ja": {"unit": "word"}}},
        "tatoeba-enja",
        ("I love Tatoeba.", "私、Tatoebaが大好きなのよ。"),
        True,
    ),  # in words: 1 Latin word of 9 units, native 0.89
    Case(
        "script_ratio",
        {},
        "tatoeba-enja",
        ("I love Tatoeba.", "私、Tatoebaが大好きなのよ。"),
        False,
    ),  # in letters (Yishu §2.1.1's "character ratios"): 7 of 15 Latin, native 0.53 < 0.6
    # Xiaomi: 0.53 is above 0.25, Latin is allowed, kana present
    Case(
        "script_ratio",
        {"preset": "xiaomi"},
        "tatoeba-enja",
        ("I love Tatoeba.", "私、Tatoebaが大好きなのよ。"),
        True,
    ),
    Case(
        "script_ratio", {"preset": "xiaomi"}, "tatoeba-enja", ("Absolutely!", "絶対！"), False
    ),  # Japanese without kana
    # an override drops the kana requirement and keeps the rest of the preset
    Case(
        "script_ratio",
        {"preset": "xiaomi", "languages": {"ja": {"require": []}}},
        "tatoeba-enja",
        ("Absolutely!", "絶対！"),
        True,
    ),
    Case(
        "script_ratio",
        {"preset": "xiaomi"},
        "tatoeba-enzh",
        ("This is Edward.", "是Edward。"),
        False,
    ),  # 1 Han of 7 letters: 0.14 < 0.15
    Case("script_ratio", {"preset": "xiaomi"}, "tatoeba-enzh", TATOEBA_ZH_PAIR, True),  # 4/7
    Case(
        "script_ratio",
        {"preset": "xiaomi"},
        "tatoeba-enzh",
        ("Where do you live?", "Lèu kiá dịgŏ?"),
        False,
    ),  # romanised Min Dong
    Case("script_ratio", {"preset": "none"}, "tatoeba-enzh", MOJIBAKE, True),  # no rule
    Case("script_ratio", {}, "tatoeba-enzh", MOJIBAKE, False),  # Latin-1 letters in Chinese
]


@pytest.fixture(scope="module")
def load(registry):
    def build(name: str, config: dict[str, Any], langs: tuple[str, ...]):
        plugin = registry.load("filters", name).from_dict(config)
        plugin.setup(langs)
        return plugin

    return build


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.filter}-{c.source}")
def test_case_table(case: Case, load) -> None:
    real = case.base or case.pair
    assert real in corpus_set(case.source), f"{real!r} is not a pair of {case.source}"
    langs = LANGS[case.source]
    plugin = load(case.filter, case.config, langs)
    (score,) = plugin.score([case.pair])
    assert bool(plugin.accept(score)) is case.accepted, score
    # the engine's path (a shard as a TextBlock) decides the same
    block_scores = plugin.score_block(TextBlock.from_pairs([case.pair], langs))
    assert bool(np.asarray(plugin.accept_block(block_scores))[0]) is case.accepted


PLACEHOLDER_CASES = [
    # a placeholder only in the translation (the message gained an argument)
    Case(
        "placeholders",
        {},
        "gettext-ja",
        (
            "%s: option is ambiguous; possibilities:",
            "%s: オプション '%s' は曖昧です: 次のものが可能です:",
        ),
        False,
    ),
    # ... tolerated with max_unmatched: 1
    Case(
        "placeholders",
        {"max_unmatched": 1},
        "gettext-ja",
        (
            "%s: option is ambiguous; possibilities:",
            "%s: オプション '%s' は曖昧です: 次のものが可能です:",
        ),
        True,
    ),
    # full-width ％s is not a placeholder: a machine-translated catalog broke both
    Case(
        "placeholders",
        {},
        "gettext-ja",
        (
            "Could not find component providing '%s::%s'.",
            "'％s ::％s'を提供できるコンポーネントが見つかりません。",
        ),
        False,
    ),
    # positional arguments in another order, %m with a position: the same placeholders
    Case(
        "placeholders",
        {},
        "gettext-ja",
        (
            'could not write block %u in file "%s": %m',
            'ファイル"%2$s"で%1$uブロックが書き出せませんでした: %3$m',
        ),
        True,
    ),
    # %u (unsigned) translated as %d (signed): a different argument type
    Case(
        "placeholders",
        {},
        "gettext-ja",
        ("%u reno fast retransmits failed", "%dの高速再送失敗"),
        False,
    ),
    # only placeholders and punctuation in the translation: nothing to learn from
    Case("placeholders", {}, "gettext-ja", ("%1$s on %2$s", "%2$s:%1$s"), False),
    Case(
        "placeholders",
        {"reject_content_free": False},
        "gettext-ja",
        ("%1$s on %2$s", "%2$s:%1$s"),
        True,
    ),
    # a shell variable name translated
    Case(
        "placeholders",
        {},
        "gettext-zh_CN",
        (
            "only ${VARNAME} expansion is supported, error at: %s",
            "只支持 ${变量名} 扩展，错误位于：%s",
        ),
        False,
    ),
    # the translation formats an argument the English message never passes
    Case("placeholders", {}, "gettext-zh_CN", ("Invalid file format", "无效的文件格式 %s"), False),
    Case("placeholders", {}, "gettext-ja", HTTPS, True),  # no placeholder on either side
]


@pytest.mark.parametrize("case", PLACEHOLDER_CASES, ids=lambda c: f"{c.filter}-{c.source}")
def test_placeholder_table(case: Case, load) -> None:
    test_case_table(case, load)


UI_CASES = [
    # GTK mnemonic inside a capitalised word; the Japanese "(_O)" suffix
    ("gettext-ja", ("C_ollate", "ページを揃える(_O)"), ("Collate", "ページを揃える")),
    ("gettext-ja", ("Paper _type:", "種類(_T):"), ("Paper type:", "種類:")),
    # Pango markup tags around the text
    ("gettext-ja", ("<b>Comment:</b>", "<b>コメント:</b>"), ("Comment:", "コメント:")),
    # identifiers keep their underscore
    (
        "gettext-ja",
        ('Enable the "track_counts" option.', '"track_counts"オプションを有効にしてください。'),
        ('Enable the "track_counts" option.', '"track_counts"オプションを有効にしてください。'),
    ),
    # "<p>" alone is a usage metavariable, not markup; real line breaks become spaces
    (
        "gettext-zh_CN",
        ("  --plugin <p> - load the specified plugin\n", "  --plugin <p> - 加载指定的插件程序\n"),
        ("--plugin <p> - load the specified plugin", "--plugin <p> - 加载指定的插件程序"),
    ),
    # a literal "\n" escape (the catalog holds backslash + n) becomes a space
    (
        "gettext-ja",
        ("%s: option '%s' requires an argument\\n", "%s: オプション '%s' は引数が必要です\\n"),
        ("%s: option '%s' requires an argument", "%s: オプション '%s' は引数が必要です"),
    ),
    # psql's "\restrict" command is not an escape; "&" between katakana is text
    (
        "gettext-ja",
        (
            "  \\restrict RESTRICT_KEY\n                         enter restricted mode with "
            "provided key\n",
            "  \\restrict RESTRICT_KEY\n                         "
            "指定のキーで制限モードを開始する\n",
        ),
        (
            "\\restrict RESTRICT_KEY enter restricted mode with provided key",
            "\\restrict RESTRICT_KEY 指定のキーで制限モードを開始する",
        ),
    ),
    (
        "gettext-ja",
        ("Group ID for tabs drag and drop", "タブのドラッグ&ドロップに対するグループ ID です"),
        ("Group ID for tabs drag and drop", "タブのドラッグ&ドロップに対するグループ ID です"),
    ),
]


@pytest.mark.parametrize("source,pair,expected", UI_CASES)
def test_ui_strings_table(source, pair, expected, registry) -> None:
    assert pair in corpus_set(source)
    processor = registry.load("processors", "ui_strings").from_dict({})
    langs = LANGS[source]
    assert (
        tuple(processor.process([side], lang)[0] for side, lang in zip(pair, langs, strict=True))
        == expected
    )


@pytest.mark.parametrize(
    "text,config,expected",
    [
        # Qt's convention on a real GTK label (gtk20 "_Open" / "Save _As"): & marks, && escapes
        ("&Open", {}, "Open"),
        ("Save &As", {}, "Save As"),
        ("Search && Replace", {}, "Search & Replace"),
        ("Search && Replace", {"ampersand": False}, "Search && Replace"),
        # two candidate marks are identifiers, not a mnemonic
        ("R&D and AT&T", {}, "R&D and AT&T"),
        ("開く(&O)...", {}, "開く..."),  # Windows-style suffix
        ("<b>Bold</b>", {"markup": False}, "<b>Bold</b>"),
    ],
)
def test_ui_strings_conventions(text, config, expected, registry) -> None:
    processor = registry.load("processors", "ui_strings").from_dict(config)
    assert processor.process([text], "en") == [expected]


def test_ui_strings_never_returns_a_line_break(registry) -> None:
    processor = registry.load("processors", "ui_strings").from_dict({})
    pairs = corpus("gettext-ja")[:3000]
    out = processor.process([ja for _, ja in pairs], "ja")
    assert len(out) == len(pairs)
    assert not any("\n" in line or "\t" in line for line in out)


# --- properties: order, batch splitting, the block path -------------------------------------

ALL = [
    ("identical", {"normalize": True}),
    ("empty", {}),
    ("invalid_unicode", {}),
    ("avg_word_length", {}),
    ("escaped_html", {}),
    ("char_repetition", {}),
    ("char_repetition", {"words": 4, "ignore_digits": True}),
    ("final_punctuation", {}),
    ("brackets", {"balanced": True}),
    ("numbers", {}),
    ("urls", {}),
    ("markup", {}),
    ("script_ratio", {"preset": "xiaomi"}),
    ("placeholders", {}),
]


def _mixed(source: str, n: int, seed: int) -> list[tuple[str, str]]:
    pairs = [p for p in corpus(source) if "\n" not in p[0] + p[1]]
    return random.Random(seed).sample(pairs, n)


@pytest.mark.parametrize("name,config", ALL, ids=[n for n, _ in ALL])
@pytest.mark.parametrize(
    "sources", [("tatoeba-enja", "gettext-ja"), ("microtopia", "tatoeba-enzh")]
)
def test_scores_follow_pairs_not_batches(name, config, sources, load) -> None:
    langs = LANGS[sources[0]]
    pairs = _mixed(sources[0], 150, 1) + _mixed(sources[1], 150, 2)
    plugin = load(name, config, langs)
    scores = [np.asarray(s).tolist() for s in plugin.score(pairs)]
    assert len(scores) == len(pairs)
    order = list(range(len(pairs)))
    random.Random(3).shuffle(order)
    shuffled = plugin.score([pairs[i] for i in order])
    assert [np.asarray(s).tolist() for s in shuffled] == [scores[i] for i in order]
    pieces = [plugin.score(pairs[i : i + 37]) for i in range(0, len(pairs), 37)]
    assert [np.asarray(s).tolist() for piece in pieces for s in piece] == scores
    block = np.asarray(plugin.score_block(TextBlock.from_pairs(pairs, langs))).tolist()
    assert block == scores
    kept = np.asarray(plugin.accept_block(plugin.score_block(TextBlock.from_pairs(pairs, langs))))
    assert kept.tolist() == [bool(plugin.accept(s)) for s in plugin.score(pairs)]


@pytest.mark.parametrize(
    "name", ["final_punctuation", "brackets", "numbers", "urls", "placeholders"]
)
def test_two_sided_rules_need_two_languages(name, registry) -> None:
    plugin = registry.load("filters", name).from_dict({})
    with pytest.raises(PluginError, match="two sides"):
        plugin.setup(("en",))


def test_script_ratio_override_must_name_a_corpus_language(registry) -> None:
    plugin = registry.load("filters", "script_ratio").from_dict({"languages": {"jp": {}}})
    with pytest.raises(PluginError, match=r"\['jp'\].*valid: en, ja"):
        plugin.setup(("en", "ja"))


def test_configs_reject_bad_values(registry) -> None:
    from pydantic import ValidationError

    for name, values in [
        ("char_repetition", {"limits": {0: 4}}),
        ("char_repetition", {"words": 0}),
        ("avg_word_length", {"max_ratio": 0}),
        ("numbers", {"min_digits": 0}),
        ("script_ratio", {"preset": "deepl"}),
        ("script_ratio", {"languages": {"ja": {"native": ["klingon"]}}}),
        ("brackets", {"kinds": ["angle"]}),
        ("urls", {"typo": 1}),
    ]:
        with pytest.raises(ValidationError):
            registry.load("filters", name).from_dict(values)


# --- a recipe's clean step -----------------------------------------------------------------

RECIPE_FILTERS: list[dict[str, Any]] = [
    {"name": "empty"},
    {"name": "invalid_unicode"},
    {"name": "char_repetition"},
    {"name": "escaped_html"},
    {"name": "brackets"},
    {"name": "numbers", "min_digits": 3},
    {"name": "final_punctuation"},
    {"name": "script_ratio", "preset": "xiaomi"},
]


def test_clean_step_counts_drops_per_filter(tmp_path, registry, load) -> None:
    pairs = corpus("tatoeba-enja")[:1500]
    files = {}
    for i, lang in enumerate(("en", "ja")):
        files[lang] = tmp_path / f"tatoeba.{lang}"
        files[lang].write_text("".join(p[i] + "\n" for p in pairs), encoding="utf-8")
    document = clean_split_recipe("rules", files, RECIPE_FILTERS, held_out=20)
    document["steps"]["clean"]["shard_size"] = 400
    recipe = build_recipe(document, registry)
    result = Runner(recipe, registry, tmp_path / "w", show_progress=False).run(until="clean")
    counts = result.manifest("clean")["counts"]

    # the same chain applied here, filter after filter, drops the same pairs
    alive = list(pairs)
    expected = {}
    for entry in RECIPE_FILTERS:
        config = {k: v for k, v in entry.items() if k != "name"}
        plugin = load(entry["name"], config, ("en", "ja"))
        verdicts = [plugin.accept(s) for s in plugin.score(alive)]
        expected[f"dropped.{entry['name']}"] = verdicts.count(False)
        alive = [p for p, ok in zip(alive, verdicts, strict=True) if ok]
    assert {k: v for k, v in counts.items() if k.startswith("dropped.")} == expected
    assert counts["pairs_in"] == 1500
    assert counts["pairs_out"] == len(alive)
    assert expected["dropped.final_punctuation"] > 0  # the chain really removes pairs
    assert expected["dropped.numbers"] > 0
