"""Augmenters on real En-Ja text: tags and noise where and only where configured, noise that is
deterministic and independent of sharding, synthetic pairs one per input line in order, exact
mixing counts; then (slow) a tagged back-translation round, ensemble distillation and a round-2
model initialised from round 1, as one recipe with micro models."""

from __future__ import annotations

import re
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from mtcore.contracts.errors import DataError, RecipeError, StepError
from mtcore.contracts.registry import Registry
from mtcore.contracts.step import StepContext
from mtcore.data.corpus import Corpus, CorpusWriter
from mtcore.recipe.load import build_recipe
from mtcore_plugins.augmenters.noise import NoiseAugmenter, NoiseConfig
from mtcore_plugins.augmenters.tags import LangTagAugmenter, LangTagConfig, TagConfig
from mtcore_plugins.steps.augment import AugmentConfig, AugmentStep
from mtcore_plugins.steps.mix import MixConfig, MixStep, plan_counts
from mtcore_plugins.steps.synthetic import SyntheticStep
from tests.support.data import ENJA, real_slice
from tests.support.steps import make_ctx

# --- helpers --------------------------------------------------------------------------------


def real_lines(split: str, lang: str, n: int, start: int = 0) -> list[str]:
    """Lines ``start`` .. ``start + n`` of small_parallel_enja."""
    if not ENJA.exists():
        real_slice(Path(tempfile.gettempdir()), split, 0)  # skips (or fails on CI) as it does
    with open(ENJA / f"{split}.{lang}", encoding="utf-8") as handle:
        lines = handle.read().split("\n")
    return lines[start : start + n]


def write_corpus(path: Path, columns: dict[str, list[str]], name: str = "corpus") -> Path:
    with CorpusWriter(path, tuple(columns), name) as writer:
        writer.write_all(zip(*columns.values(), strict=True))
    return path


def read_corpus(path: Path) -> dict[str, list[str]]:
    corpus = Corpus.open(path)
    rows = list(corpus)
    return {lang: [row[i] for row in rows] for i, lang in enumerate(corpus.langs)}


def run_step(step: Any, work: Path, registry: Registry, **inputs: Path) -> Any:
    return run_in(step, make_ctx(work, "step", registry, **inputs))


def run_in(step: Any, ctx: StepContext) -> Any:
    try:
        step.run(ctx)
    finally:
        ctx.executor.close()
    return ctx


@pytest.fixture(scope="module")
def bitext(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """400 real en-ja pairs plus an empty pair (a tag or noise must leave it empty)."""
    en, ja = real_lines("train", "en", 400), real_lines("train", "ja", 400)
    return write_corpus(tmp_path_factory.mktemp("bitext"), {"en": [*en, ""], "ja": [*ja, ""]})


# --- noise ----------------------------------------------------------------------------------


def distinct_word_lines(n: int) -> list[str]:
    """Real English lines of at least six words, each word once (so positions are traceable)."""
    out = [
        line
        for line in real_lines("train", "en", 3000)
        if len(line.split()) >= 6 and len(set(line.split())) == len(line.split())
    ]
    return out[:n]


@pytest.mark.parametrize("k", [1, 2, 3])  # the bound holds for each distance, not only 3
def test_local_shuffle_moves_no_word_more_than_k(k: int) -> None:
    lines = distinct_word_lines(300)
    noise = NoiseAugmenter(NoiseConfig(drop=0.0, blank=0.0, shuffle=k))
    moved = 0
    for line, out in zip(lines, noise.augment(lines, "en", 1), strict=True):
        words, shuffled = line.split(), out.split()
        assert sorted(words) == sorted(shuffled)  # a permutation: nothing dropped or added
        distance = max(abs(shuffled.index(w) - i) for i, w in enumerate(words))
        assert distance <= k
        moved += distance == k
    assert moved > 10  # the bound is reached, so the test would see a wider shuffle


def test_drop_and_blank_rates_follow_the_settings() -> None:
    lines = real_lines("train", "en", 2000)
    words = sum(len(line.split()) for line in lines)
    dropped = NoiseAugmenter(NoiseConfig(drop=0.2, blank=0.0, shuffle=0)).augment(lines, "en", 1)
    kept = sum(len(line.split()) for line in dropped)
    assert 0.17 < 1 - kept / words < 0.23
    for line, out in zip(lines, dropped, strict=True):
        assert out.split(), "a line never loses every word"
        remaining = iter(line.split())
        assert all(w in remaining for w in out.split())  # a subsequence: order kept
    blanked = NoiseAugmenter(NoiseConfig(drop=0.0, blank=0.2, shuffle=0)).augment(lines, "en", 1)
    blanks = sum(out.split().count("<blank>") for out in blanked)
    assert 0.17 < blanks / words < 0.23
    for line, out in zip(lines, blanked, strict=True):
        assert all(o in (w, "<blank>") for w, o in zip(line.split(), out.split(), strict=True))


@pytest.mark.parametrize(
    ("settings", "lang", "check"),
    [
        # every kind off: the line is returned byte for byte, spacing included
        ({"drop": 0.0, "blank": 0.0, "shuffle": 0}, "en", "identical"),
        # char unit on unsegmented Japanese: characters noised, no spaces introduced
        ({"unit": "char", "shuffle": 0, "blank": 0.0}, "ja", "no_new_spaces"),
        # a custom blank token is what blanked words become
        ({"drop": 0.0, "shuffle": 0, "blank": 0.5, "blank_token": "<unk>"}, "en", "unk"),
    ],
)
def test_noise_settings(settings: dict[str, Any], lang: str, check: str) -> None:
    lines = real_lines("dev", lang, 200)
    out = NoiseAugmenter(NoiseConfig(**settings)).augment(lines, lang, 1)
    assert len(out) == len(lines)
    if check == "identical":
        assert out == lines
    elif check == "no_new_spaces":
        assert sum(o != line for o, line in zip(out, lines, strict=True)) > 100
        assert all(o.count(" ") <= line.count(" ") for o, line in zip(out, lines, strict=True))
    else:
        assert sum("<unk>" in o for o in out) > 150 and not any("<blank>" in o for o in out)


def test_noise_depends_on_seed_and_line_number_only() -> None:
    lines = real_lines("train", "en", 100)
    noise = NoiseAugmenter(NoiseConfig(seed=7))
    whole = noise.augment(lines, "en", 1)
    assert noise.augment(lines[40:60], "en", 41) == whole[40:60]  # any shard, same lines
    assert NoiseAugmenter(NoiseConfig(seed=7)).augment(lines, "en", 1) == whole  # any process
    assert NoiseAugmenter(NoiseConfig(seed=8)).augment(lines, "en", 1) != whole
    assert noise.augment(lines, "en", 2) != whole  # the line number, not the text, seeds it
    assert sum(o != line for o, line in zip(whole, lines, strict=True)) > 90


# --- the augment step: where and only where configured -----------------------------------


def test_noise_step_is_shard_and_worker_independent(
    bitext: Path, registry: Registry, tmp_path: Path
) -> None:
    chain: list[dict[str, Any] | str] = [{"name": "noise", "seed": 3}]
    small = AugmentStep(AugmentConfig(side="en", augmenters=chain, shard_size=7))
    big = AugmentStep(AugmentConfig(side="en", augmenters=chain, shard_size=1000))
    run_in(small, make_ctx(tmp_path / "a", "step", registry, workers=2, corpus=bitext))
    ctx = run_step(big, tmp_path / "b", registry, corpus=bitext)
    for lang in ("en", "ja"):
        a = (tmp_path / "a" / "corpus" / f"corpus.{lang}").read_bytes()
        assert a == (tmp_path / "b" / "corpus" / f"corpus.{lang}").read_bytes()
    # only the source side changes; the target side is the input byte for byte
    assert (tmp_path / "a/corpus/corpus.ja").read_bytes() == (bitext / "corpus.ja").read_bytes()
    out, before = read_corpus(tmp_path / "b" / "corpus"), read_corpus(bitext)
    changed = sum(a != b for a, b in zip(out["en"], before["en"], strict=True))
    assert changed == ctx.stats["changed.noise"] > 350
    assert out["en"][-1] == "" and ctx.stats["pairs_out"] == 401


def test_tag_then_lang_tag_on_the_source_and_rename(
    bitext: Path, registry: Registry, tmp_path: Path
) -> None:
    chain: list[dict[str, Any] | str] = ["tag", {"name": "lang_tag", "lang": "uk"}]
    step = AugmentStep(AugmentConfig(side="en", augmenters=chain, rename={"en": "cs"}))
    ctx = run_step(step, tmp_path, registry, corpus=bitext)
    out, before = read_corpus(tmp_path / "corpus"), read_corpus(bitext)
    assert list(out) == ["cs", "ja"]  # relabelled, column order kept
    assert out["ja"] == before["ja"]  # the other side is untouched
    for new, old in zip(out["cs"][:-1], before["en"][:-1], strict=True):
        assert new == f"<2uk> <BT> {old}"  # chain order: tag first, then lang_tag in front
    assert out["cs"][-1] == ""  # an empty line gets no tag
    assert ctx.stats["changed.tag"] == ctx.stats["changed.lang_tag"] == 400


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        # the side must be a column of the corpus
        ({"side": "de", "augmenters": ["tag"]}, "side 'de' is not a language"),
        # renaming a column the corpus lacks
        ({"side": "en", "rename": {"fr": "cs"}}, "rename names fr"),
        # renaming onto an existing column would merge two columns
        ({"side": "en", "rename": {"en": "ja"}}, "rename would give"),
    ],
)
def test_augment_step_errors(
    settings: dict[str, Any], message: str, bitext: Path, registry: Registry, tmp_path: Path
) -> None:
    with pytest.raises(StepError, match=re.escape(message)):
        run_step(AugmentStep(AugmentConfig(**settings)), tmp_path, registry, corpus=bitext)


@pytest.mark.parametrize(
    ("config", "values", "message"),
    [
        # a tag must stay one word for the tokenizer
        (TagConfig, {"token": "<B T>"}, "String should match pattern"),
        # a language tag template needs the placeholder
        (LangTagConfig, {"lang": "uk", "template": "<2xx>"}, "must contain {lang}"),
        # probabilities are probabilities; 1.0 would delete every word
        (NoiseConfig, {"drop": 1.0}, "less than 1"),
        # an augment step that would only copy its input is a mistake
        (AugmentConfig, {"side": "en"}, "give augmenters, rename or both"),
        # weights and ratio are two ways of saying one thing
        (MixConfig, {"weights": {"a": 2}, "ratio": {"a": 1}}, "not both"),
        # a weight of 0 would silently drop a corpus
        (MixConfig, {"weights": {"a": 0}}, "must be > 0"),
    ],
)
def test_configs_reject(config: Any, values: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        config.model_validate(values)


def test_lang_tag_token() -> None:
    assert LangTagAugmenter(LangTagConfig(lang="uk")).token == "<2uk>"
    assert LangTagAugmenter(LangTagConfig(lang="cs", template="__{lang}__")).token == "__cs__"


def test_recipe_names_an_unknown_augmenter(registry: Registry) -> None:
    document = {
        "name": "aug",
        "data": {"bitext": {"source": "local", "files": {"en": "a.en", "ja": "a.ja"}}},
        "steps": {
            "noised": {
                "kind": "augment",
                "inputs": {"corpus": "bitext"},
                "side": "en",
                "augmenters": [{"name": "nosie"}],
            }
        },
    }
    with pytest.raises(RecipeError) as caught:
        build_recipe(document, registry)
    assert "steps.noised.augmenters.0.name: Unknown augmenter 'nosie'. Did you mean 'noise'?" in (
        str(caught.value)
    )


# --- synthetic pairs ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mono_and_hyp(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Japanese monolingual text (with an empty line) and a translation of it into English
    written as a translate step writes it (the real English side stands in for model output,
    so each synthetic line's partner is known)."""
    root = tmp_path_factory.mktemp("synthetic")
    ja = [*real_lines("dev", "ja", 150), "", *real_lines("dev", "ja", 49, start=150)]
    en = [*real_lines("dev", "en", 150), "", *real_lines("dev", "en", 49, start=150)]
    mono = write_corpus(root / "mono", {"ja": ja})
    hyp = write_corpus(root / "hyp", {"en": en}, name="hyp")
    return mono, hyp


def test_back_translation_pairs_one_per_line_in_order_and_tags_the_source(
    mono_and_hyp: tuple[Path, Path], registry: Registry, tmp_path: Path
) -> None:
    mono, hyp = mono_and_hyp
    step = SyntheticStep.from_dict({"mode": "back", "tag": "<BT>"})
    ctx = run_step(step, tmp_path, registry, corpus=mono, hyp=hyp)
    out = read_corpus(tmp_path / "corpus")
    assert list(out) == ["en", "ja"]  # synthetic source first
    assert out["ja"] == read_corpus(mono)["ja"]  # the authentic target, line for line
    hyp_lines = read_corpus(hyp)["en"]
    assert out["en"] == [f"<BT> {h}" if h else "" for h in hyp_lines]
    assert ctx.stats["pairs_out"] == 200 and ctx.stats["synthetic.empty"] == 1
    assert ctx.stats["synthetic.tagged"] == 199


def test_forward_translation_of_a_parallel_corpus_keeps_the_source(
    bitext: Path, mono_and_hyp: tuple[Path, Path], registry: Registry, tmp_path: Path
) -> None:
    # distillation translates the training source: the corpus input is parallel en-ja and
    # the output ja, so the translated language (en) is the only other one
    en = read_corpus(bitext)["en"][:200]
    ja_hyp = write_corpus(tmp_path / "hyp", {"ja": read_corpus(bitext)["ja"][:200]}, "hyp")
    source = write_corpus(tmp_path / "src", {"en": en, "ja": ["x"] * 200})
    run_step(
        SyntheticStep.from_dict({"mode": "forward"}), tmp_path / "w", registry,
        corpus=source, hyp=ja_hyp,
    )  # fmt: skip
    out = read_corpus(tmp_path / "w" / "corpus")
    assert list(out) == ["en", "ja"] and out["en"] == en
    assert out["ja"] == read_corpus(bitext)["ja"][:200]  # the translation, not the corpus' ja


def test_synthetic_errors(
    bitext: Path, mono_and_hyp: tuple[Path, Path], registry: Registry, tmp_path: Path
) -> None:
    mono, hyp = mono_and_hyp
    short = write_corpus(tmp_path / "short", {"en": read_corpus(hyp)["en"][:-3]}, "hyp")
    with pytest.raises(DataError, match="has 200 lines but .* has 197: line 198 has no partner"):
        run_step(SyntheticStep.from_dict({"mode": "back"}), tmp_path / "a", registry,
                 corpus=mono, hyp=short)  # fmt: skip
    three = write_corpus(
        tmp_path / "three", {"de": ["a"] * 200, "fr": ["b"] * 200, "ja": ["c"] * 200}
    )
    with pytest.raises(DataError, match="cannot tell which language"):
        run_step(SyntheticStep.from_dict({"mode": "back"}), tmp_path / "b", registry,
                 corpus=three, hyp=hyp)  # fmt: skip
    with pytest.raises(DataError, match="both 'en'"):  # the translation paired with itself
        run_step(SyntheticStep.from_dict({"mode": "back"}), tmp_path / "c", registry,
                 corpus=hyp, hyp=hyp)  # fmt: skip


# --- mixing ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sizes", "weights", "ratio", "expected"),
    [
        # NT5 §4.2: bitext upsampled 1:1 with the synthetic data
        ({"bitext": 300, "bt": 700}, {}, {"bitext": 1, "bt": 1}, {"bitext": 700, "bt": 700}),
        # the largest n/share keeps its size; 1:2 needs no upsampling of bt here
        ({"bitext": 300, "bt": 700}, {}, {"bitext": 1, "bt": 2}, {"bitext": 350, "bt": 700}),
        # a share that does not divide evenly: 1000/3 = 333.33 -> 333
        ({"a": 1000, "b": 10}, {}, {"a": 3, "b": 1}, {"a": 1000, "b": 333}),
        # half up on the exact decimal: 1.5 x 301 = 451.5 -> 452; 0.1 x 35 = 3.5 -> 4
        ({"a": 301, "b": 35}, {"a": 1.5, "b": 0.1}, {}, {"a": 452, "b": 4}),
        # integer weight, and an unnamed input weighing 1
        ({"a": 10, "b": 7}, {"a": 3}, {}, {"a": 30, "b": 7}),
    ],
)
def test_plan_counts(
    sizes: dict[str, int],
    weights: dict[str, float],
    ratio: dict[str, float],
    expected: dict[str, int],
) -> None:
    assert plan_counts(sizes, weights, ratio) == expected


def mix(tmp_path: Path, registry: Registry, settings: dict[str, Any], **inputs: Path) -> Any:
    return run_step(MixStep.from_dict(settings), tmp_path, registry, **inputs)


def test_mix_upsamples_to_the_ratio_exactly(bitext: Path, registry: Registry, tmp_path: Path):
    en, ja = real_lines("dev", "en", 150), real_lines("dev", "ja", 150)
    bt = write_corpus(tmp_path / "bt", {"ja": ja, "en": en})  # other column order
    n_bitext, settings = 401, {"ratio": {"bitext": 1, "bt": 3}, "seed": 5}
    ctx = mix(tmp_path / "m", registry, settings, bitext=bitext, bt=bt)
    out = read_corpus(tmp_path / "m" / "corpus")
    assert list(out) == ["en", "ja"]
    # n/share: bitext 401/1, bt 150/3; bitext's is the largest, so it keeps its 401 pairs and
    # bt is upsampled to 3 x 401 = 1203 (8 whole copies of its 150 pairs and 3 more pairs)
    assert ctx.stats["mix.bitext.out"] == 401 and ctx.stats["mix.bt.out"] == 1203
    assert len(out["en"]) == 401 + 1203
    assert out["en"][:n_bitext] == read_corpus(bitext)["en"]
    counts = Counter(zip(out["en"][n_bitext:], out["ja"][n_bitext:], strict=True))
    assert set(counts) == set(zip(en, ja, strict=True))  # pairs stay pairs, columns by language
    assert sorted(Counter(counts.values()).items()) == [(8, 147), (9, 3)]
    assert ctx.metrics["weights"] == {"bitext": 1.0, "bt": round(1203 / 150, 6)}
    again = mix(tmp_path / "again", registry, settings, bitext=bitext, bt=bt)
    assert again.stats.as_dict() == ctx.stats.as_dict()
    assert read_corpus(tmp_path / "again" / "corpus") == out  # seeded: the same extra pairs


def test_mix_fractional_weight_chooses_seeded_lines(
    bitext: Path, registry: Registry, tmp_path: Path
) -> None:
    chosen = {}
    for seed in (1, 2):
        mix(tmp_path / str(seed), registry, {"weights": {"a": 1.25}, "seed": seed}, a=bitext)
        out = read_corpus(tmp_path / str(seed) / "corpus")
        assert len(out["en"]) == 501  # 1.25 x 401 = 501.25 -> 501
        assert out["en"][:401] == read_corpus(bitext)["en"]  # one whole copy first
        extra = out["en"][401:]
        positions = [read_corpus(bitext)["en"].index(line) for line in extra]
        assert positions == sorted(positions)  # the extra pairs keep corpus order
        chosen[seed] = extra
    assert chosen[1] != chosen[2]


def test_mix_errors(bitext: Path, registry: Registry, tmp_path: Path) -> None:
    with pytest.raises(StepError, match="ratio must give every input a share; missing: b"):
        mix(tmp_path / "a", registry, {"ratio": {"a": 1}}, a=bitext, b=bitext)
    with pytest.raises(StepError, match="weights names 'c', not an input"):
        mix(tmp_path / "b", registry, {"weights": {"c": 2}}, a=bitext)
    mono = write_corpus(tmp_path / "mono", {"ja": ["x"]})
    with pytest.raises(StepError, match="not \\['en'\\]"):
        mix(tmp_path / "c", registry, {}, a=bitext, b=mono)


# --- slow: a tagged back-translation round, distillation and round 2, as one recipe -----

MICRO = {
    "kind": "train",
    "arch": "mtcore_transformer_micro",
    # enough for non-empty greedy outputs: with fewer updates (or an average of early
    # checkpoints) a micro model's beam search ends every output at once
    "max_update": 120,
    "max_tokens": 1024,
    "lr": 0.005,
    "warmup_updates": 10,
    "dropout": 0.1,
    "save_interval_updates": 120,
    "keep_last": 1,
    "average_last": 1,
    "log_interval": 20,
    "threads": 1,
}


def bt_round_recipe(bitext: dict[str, Path], mono: Path) -> dict[str, Any]:
    """A ja->en system. Round 1: models on the bitext. Augmentation: tagged back-translation of
    English monolingual text with the en->ja model (Caswell et al. 2019), and the training
    English distilled by an ensemble of two en->ja models (Xiaomi §3.2 D3; for ja->en these
    pairs are back-translations too). Round 2: the ja->en model continues from round 1
    (``init``) on the bitext upsampled 1:1:1 with both (NT5 §4.2). Round 3 would repeat round
    2's steps with round 2's models as translators and ``init``."""
    translate = {"kind": "translate", "src": "en", "tgt": "ja", "beam": 1, "threads": 1}
    binarize = {"kind": "binarize", "src": "ja", "tgt": "en"}
    held_out = {"valid": "split.valid", "spm": "spm"}
    return {
        "name": "bt_rounds",
        "directions": ["ja-en"],
        "executor": {"workers": 1},
        "data": {
            "bitext": {"source": "local", "files": {k: str(v) for k, v in bitext.items()}},
            "mono_en": {"source": "local", "files": {"en": str(mono)}},
        },
        "steps": {
            "split": {"kind": "split", "inputs": {"corpus": "bitext"}, "valid_size": 50,
                      "test_size": 0},
            "spm": {"kind": "spm", "inputs": {"corpus": "split.train"}, "vocab_size": 1000,
                    "num_threads": 1, "user_defined_symbols": ["<BT>"]},
            "bin_jaen": {**binarize, "inputs": {"train": "split.train", **held_out}},
            "bin_enja": {**binarize, "src": "en", "tgt": "ja",
                         "inputs": {"train": "split.train", **held_out}},
            "train_jaen_r1": {**MICRO, "inputs": {"data": "bin_jaen"}},
            "train_enja_r1": {**MICRO, "inputs": {"data": "bin_enja"}},
            "train_enja_r1b": {**MICRO, "seed": 2, "inputs": {"data": "bin_enja"}},
            "bt_hyp": {**translate,
                       "inputs": {"model": "train_enja_r1", "corpus": "mono_en", "spm": "spm"}},
            "bt": {"kind": "synthetic", "mode": "back", "tag": "<BT>",
                   "inputs": {"corpus": "mono_en", "hyp": "bt_hyp"}},
            "kd_hyp": {**translate,
                       "inputs": {"model": "train_enja_r1", "model2": "train_enja_r1b",
                                  "corpus": "split.train", "spm": "spm"}},
            "kd": {"kind": "synthetic", "mode": "forward",
                   "inputs": {"corpus": "split.train", "hyp": "kd_hyp"}},
            "mix_r2": {"kind": "mix", "ratio": {"bitext": 1, "bt": 1, "kd": 1},
                       "inputs": {"bitext": "split.train", "bt": "bt", "kd": "kd"}},
            "bin_r2": {**binarize, "inputs": {"train": "mix_r2", **held_out}},
            # the round-2 data has its own dictionary (it holds <BT>): map the init's rows
            "train_jaen_r2": {**MICRO, "init_vocab": "map",
                              "inputs": {"data": "bin_r2", "init": "train_jaen_r1"}},
        },
    }  # fmt: skip


@pytest.mark.slow
def test_tagged_bt_round_distillation_and_round_two(registry: Registry, tmp_path: Path) -> None:
    from mtcore.run.runner import Runner

    bitext = real_slice(tmp_path / "data", "train", 1000)
    mono_lines = [*real_lines("dev", "en", 100), "", *real_lines("dev", "en", 49, start=100)]
    mono = tmp_path / "data" / "mono.en"
    mono.write_text("".join(f"{line}\n" for line in mono_lines), encoding="utf-8")
    recipe = build_recipe(bt_round_recipe(bitext, mono), registry)
    result = Runner(recipe, registry, tmp_path / "work", show_progress=False).run()

    bt = read_corpus(result.path("bt") / "corpus")
    hyp = read_corpus(result.path("bt_hyp") / "hyp")["ja"]
    assert list(bt) == ["ja", "en"]  # the synthetic source first
    assert bt["en"] == mono_lines  # one pair per monolingual line, in order
    assert bt["ja"] == [f"<BT> {h}" if h else "" for h in hyp]  # tag on the synthetic source
    assert hyp[100] == "" and sum(bool(h) for h in hyp) == 149  # an empty line stays empty

    train = read_corpus(result.path("split") / "train")
    kd = read_corpus(result.path("kd") / "corpus")
    assert list(kd) == ["en", "ja"] and kd["en"] == train["en"]  # authentic source, untagged
    assert kd["ja"] == read_corpus(result.path("kd_hyp") / "hyp")["ja"]
    assert not any(line.startswith("<BT>") for line in kd["ja"])

    counts = result.manifest("mix_r2")["counts"]
    assert counts["mix.bitext.out"] == counts["mix.bt.out"] == counts["mix.kd.out"] == 950
    assert counts["mix.bt.in"] == 150 and counts["pairs_out"] == 3 * 950
    # the tag is one token of the round-2 dictionary (a symbol of the spm model: the recipe is
    # refused without it, since the vocabulary would cut what bt writes)
    symbols = (result.path("bin_r2") / "data" / "dict.ja.txt").read_text().split("\n")
    assert any(line.startswith("<BT> ") for line in symbols)
    metrics = result.manifest("train_jaen_r2")["metrics"]
    assert metrics["init_loaded"] is True and metrics["updates"] == 120
