"""The kenlm step with the ``lm`` filter, and the eflomal ``alignment`` filter, on real lines.

A 3-gram KenLM model is trained through a recipe on 3,000 small_parallel_enja training pairs;
the corpus it then cleans mixes 300 real dev pairs, 100 dev pairs with their words shuffled and
100 pairs of other languages (Czech WMT23 references on the English side, IWSLT20 Chinese on
the Japanese side). Rates asserted below were measured on these slices; each bound leaves a
margin: real dev pairs kept 97 %, shuffled and foreign pairs 0 %; per side, every real sentence
has a lower perplexity than its shuffled version. Alignment (1,000 training pairs, the last
sixth with targets shifted by one line): real pairs average 0.043, shifted ones 0.010, and 94 %
of real pairs score above the shifted pairs' median.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError

from mtcore.contracts.errors import PluginError
from mtcore.recipe.load import build_recipe
from mtcore.recipe.plan import make_plan
from mtcore.run.runner import Runner
from mtcore_plugins.common.lm.ngram import lm_line
from mtcore_plugins.steps.kenlm import kenlm_binary
from tests.support.data import ENJA, SHARED

CHINESE = SHARED / "zh-ja" / "didi+iwslt2020_open_domain_translation" / "eval" / "data" / "ref.zh"
CZECH = (
    SHARED / "en-cs" / "wmt-conference+wmt23-news-systems" / "txt" / "references"
    / "generaltest2023.en-cs.ref.refA.cs"
)  # fmt: skip
Pairs = list[tuple[str, str]]


def _require(path: Path) -> None:
    """Skip (fail on CI) when real data is missing, as ``real_slice`` does."""
    if not path.exists():
        if os.environ.get("CI"):
            pytest.fail(f"real data not found at {path}")
        pytest.skip(f"real data not found at {path}")


def _lines(path: Path, n: int | None = None) -> list[str]:
    _require(path)
    lines = path.read_text(encoding="utf-8").splitlines()
    return lines if n is None else lines[:n]


def _pairs(split: str, n: int) -> Pairs:
    return list(zip(_lines(ENJA / f"{split}.en", n), _lines(ENJA / f"{split}.ja", n), strict=True))


def _shuffled(text: str, rng: random.Random) -> str:
    words = text.split()
    rng.shuffle(words)
    return " ".join(words)


def _write(folder: Path, name: str, pairs: Pairs) -> dict[str, Any]:
    """A recipe ``data`` entry reading ``pairs`` from local files."""
    folder.mkdir(parents=True, exist_ok=True)
    files = {}
    for side, lang in enumerate(("en", "ja")):
        files[lang] = str(folder / f"{name}.{lang}")
        Path(files[lang]).write_text("".join(p[side] + "\n" for p in pairs), encoding="utf-8")
    return {"source": "local", "files": files}


def _run(doc: dict[str, Any], registry: Any, workdir: Path) -> Any:
    return Runner(build_recipe(doc, registry), registry, workdir, show_progress=False).run()


# --- KenLM ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def noisy() -> dict[str, Pairs]:
    """What the clean step sees: real dev pairs, shuffled dev pairs, other languages."""
    rng = random.Random(0)
    dev = _pairs("dev", 400)
    czech = [line for line in _lines(CZECH) if 0 < len(line.split()) <= 16]
    return {
        "real": dev[:300],
        "shuffled": [(_shuffled(en, rng), _shuffled(ja, rng)) for en, ja in dev[300:]],
        "foreign": list(zip(czech[:100], _lines(CHINESE, 100), strict=True)),
    }


def lm_recipe(folder: Path, noisy: dict[str, Pairs], **lm_step: Any) -> dict[str, Any]:
    mixed = noisy["real"] + noisy["shuffled"] + noisy["foreign"]
    return {
        "name": "lm",
        "directions": ["en-ja"],
        "executor": {"workers": 1},
        "data": {
            "train": _write(folder, "train", _pairs("train", 3000)),
            "mixed": _write(folder, "mixed", mixed),
        },
        "steps": {
            "lm": {
                "kind": "kenlm",
                "inputs": {"corpus": "train", "normalize": "mixed"},
                "order": 3,
                "memory": "64M",
                **lm_step,
            },
            "clean": {
                "kind": "clean",
                "inputs": {"corpus": "mixed", "lm": "lm"},
                # Xiaomi §2.2.2's Japanese threshold; English has none in the paper, so it
                # borrows the Chinese one.
                "filters": [{"name": "lm", "thresholds": {"ja": 0.53}, "default_threshold": 0.45}],
            },
        },
    }


@pytest.fixture(scope="module")
def lm_run(tmp_path_factory, registry, noisy) -> Any:
    folder = tmp_path_factory.mktemp("lm")
    return _run(lm_recipe(folder / "data", noisy), registry, folder / "w")


@pytest.fixture(scope="module")
def model_dir(lm_run) -> Path:
    return Path(lm_run.path("lm")) / "model"


def lm_filter(registry, model_dir: Path, langs=("en", "ja"), **config: Any) -> Any:
    plugin = registry.load("filters", "lm").from_dict(config)
    plugin.setup(langs, {"lm": model_dir})
    return plugin


def test_kenlm_step_writes_a_binary_per_language(model_dir):
    meta = json.loads((model_dir / "artifact.json").read_text())
    assert meta["type"] == "kenlm" and meta["order"] == 3 and meta["langs"] == ["en", "ja"]
    assert meta["log10_ppl_over"] == "normalize"
    for lang in ("en", "ja"):
        assert (model_dir / meta["files"][lang]).stat().st_size > 10_000
        bounds = meta["log10_ppl"][lang]
        assert 0 < bounds["min"] < bounds["median"] < bounds["max"]
    assert not list(model_dir.glob("*.arpa"))  # the ARPA text stays out of the artifact


def test_real_sentences_have_lower_perplexity_than_shuffled_and_foreign(registry, model_dir, noisy):
    plugin = lm_filter(registry, model_dir, default_threshold=0.5)
    real = plugin.log10_perplexities(noisy["real"][:100])
    shuffled = plugin.log10_perplexities(noisy["shuffled"])
    # The shuffled lines are other dev sentences: shuffle these very ones for a paired test.
    rng = random.Random(1)
    same = [(_shuffled(en, rng), _shuffled(ja, rng)) for en, ja in noisy["real"][:100]]
    paired = plugin.log10_perplexities(same)
    foreign = plugin.log10_perplexities(noisy["foreign"])
    unchanged = np.array(
        [
            [a == b for a, b in zip(p, q, strict=True)]
            for p, q in zip(noisy["real"][:100], same, strict=True)
        ]
    )
    assert ((real < paired) | unchanged).mean(axis=0).min() >= 0.95  # measured 1.0 per side
    assert (real.mean(axis=0) + 0.5 < shuffled.mean(axis=0)).all()  # 1.7/1.4 vs 2.6/2.6
    assert (real.mean(axis=0) + 1.0 < foreign.mean(axis=0)).all()  # vs 3.7/3.0


def test_clean_step_keeps_real_pairs_and_drops_shuffled_and_foreign(lm_run, noisy):
    counts = lm_run.manifest("clean")["counts"]
    assert counts["pairs_in"] == 500
    kept_dir = Path(lm_run.path("clean")) / "corpus"
    kept = set(
        zip(
            (kept_dir / "corpus.en").read_text(encoding="utf-8").splitlines(),
            (kept_dir / "corpus.ja").read_text(encoding="utf-8").splitlines(),
            strict=True,
        )
    )
    assert sum(p in kept for p in noisy["real"]) >= 0.9 * len(noisy["real"])  # measured 97 %
    assert sum(p in kept for p in noisy["shuffled"]) <= 0.05 * len(noisy["shuffled"])  # 0 %
    assert not any(p in kept for p in noisy["foreign"])
    assert counts["dropped.lm"] == counts["pairs_in"] - counts["pairs_out"]


def _arpa(path: Path) -> tuple[dict[tuple[str, ...], float], dict[tuple[str, ...], float]]:
    """log10 probabilities and backoffs of an ARPA file."""
    probs: dict[tuple[str, ...], float] = {}
    backoffs: dict[tuple[str, ...], float] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        fields = line.split("\t")
        if len(fields) < 2 or line.startswith("\\"):
            continue
        words = tuple(fields[1].split(" "))
        probs[words] = float(fields[0])
        if len(fields) == 3:
            backoffs[words] = float(fields[2])
    return probs, backoffs


def _reference_score(probs, backoffs, order: int, line: str) -> float:
    """log10 p(line </s> | <s>) by the ARPA back-off rule, independent of KenLM's code."""
    vocabulary = {k[0] for k in probs if len(k) == 1}
    history = ["<s>"]
    total = 0.0
    for word in [w if w in vocabulary else "<unk>" for w in line.split()] + ["</s>"]:
        context = tuple(history[-(order - 1) :])
        penalty = 0.0
        while (*context, word) not in probs:
            penalty += backoffs.get(context, 0.0)
            context = context[1:]
        total += penalty + probs[(*context, word)]
        history.append(word)
    return total


def test_python_module_and_binaries_agree(tmp_path, model_dir, noisy):
    """lmplz's ARPA read by hand, the ARPA and the step's build_binary output read by the
    kenlm module: the same log10 probability for real sentences, OOV words included."""
    import kenlm

    text = tmp_path / "train.en.txt"
    lines = [lm_line(en, "en") for en, _ in _pairs("train", 3000)]
    text.write_text("".join(line + "\n" for line in lines if line), encoding="utf-8")
    arpa = tmp_path / "en.arpa"
    lmplz = [kenlm_binary("lmplz"), "-o", "3", "-S", "64M", "-T", str(tmp_path)]
    subprocess.run(
        [*lmplz, "--text", str(text), "--arpa", str(arpa)], check=True, capture_output=True
    )
    probs, backoffs = _arpa(arpa)
    from_arpa = kenlm.Model(str(arpa))
    from_step = kenlm.Model(str(model_dir / "en.binary"))
    sentences = [lm_line(en, "en") for en, _ in noisy["real"][:20] + noisy["foreign"][:5]]
    assert any(w not in from_step for s in sentences for w in s.split())  # OOV words covered
    for sentence in sentences:
        reference = _reference_score(probs, backoffs, 3, sentence)
        assert from_arpa.score(sentence) == pytest.approx(reference, abs=1e-4)
        assert from_step.score(sentence) == pytest.approx(reference, abs=1e-4)


def test_combined_mode_weighs_source_and_target_perplexity(registry, model_dir, noisy):
    """Yishu §2.1.1 Eq. 2: lambda * PPL_src + (1 - lambda) * PPL_tgt, lower is better."""
    batch = noisy["real"][:5] + noisy["shuffled"][:5]
    x = lm_filter(registry, model_dir, default_threshold=0.5).log10_perplexities(batch)
    ppl = 10**x
    plugin = lm_filter(registry, model_dir, mode="combined", lambda_=0.7, max_perplexity=200)
    scores = np.array(plugin.score(batch))
    np.testing.assert_allclose(scores, 0.7 * ppl[:, 0] + 0.3 * ppl[:, 1])
    swapped = lm_filter(registry, model_dir, mode="combined", lambda_=0.7, source="ja")
    np.testing.assert_allclose(swapped.score(batch), 0.3 * ppl[:, 0] + 0.7 * ppl[:, 1])
    np.testing.assert_allclose(plugin.rank_key(scores), -scores)  # top_fraction keeps low PPL
    assert [plugin.accept(s) for s in scores] == [bool(s <= 200) for s in scores]
    assert scores[:5].max() < scores[5:].min()  # real pairs before shuffled ones


def test_one_language_model_ranged_over_its_training_text(tmp_path, registry, noisy):
    """Without ``normalize`` the range comes from the training sentences; a side without a
    model is not scored, and combined mode refuses to run on one model."""
    doc = lm_recipe(tmp_path / "data", noisy, langs=["ja"])
    del doc["steps"]["lm"]["inputs"]["normalize"]
    del doc["steps"]["clean"]
    model = Path(_run(doc, registry, tmp_path / "w").path("lm")) / "model"
    meta = json.loads((model / "artifact.json").read_text())
    assert meta["langs"] == ["ja"] and meta["log10_ppl_over"] == "training"
    plugin = lm_filter(registry, model)  # en has no model, so it needs no threshold
    scores = np.array(plugin.score(noisy["real"][:20] + noisy["shuffled"][:20]))
    assert np.isnan(scores[:, 0]).all() and (scores[:, 1] >= 0).all()
    # Unseen real sentences are far from the training range: most score near 0 (why the
    # `normalize` input exists), yet still above their shuffled versions on average.
    assert scores[:20, 1].mean() > scores[20:, 1].mean()
    with pytest.raises(PluginError, match="needs a model for both sides"):
        lm_filter(registry, model, mode="combined")


@pytest.mark.parametrize(
    ("langs", "resources", "config", "message"),
    [
        # the recipe did not connect the role the filter names
        (("en", "ja"), {}, {}, "needs the step input 'lm'"),
        # a renamed role must be connected under that name
        (("en", "ja"), {"lm": "MODEL"}, {"lm": "news_lm"}, "needs the step input 'news_lm'"),
        # a role connected to something that is not a kenlm model
        (("en", "ja"), {"lm": "DATA"}, {}, "is not the output of a kenlm step"),
        # English is modelled but neither thresholds nor default_threshold cover it
        (("en", "ja"), {"lm": "MODEL"}, {}, "no threshold for language 'en'"),
        # no corpus language has a model
        (("de", "fr"), {"lm": "MODEL"}, {"default_threshold": 0.5}, "none of the corpus"),
        # combined mode needs exactly a source and a target side
        (("en", "ja", "zh"), {"lm": "MODEL"}, {"mode": "combined"}, "weighs a source"),
        # combined mode's source must be a corpus language
        (("en", "ja"), {"lm": "MODEL"}, {"mode": "combined", "source": "zh"}, "source 'zh'"),
    ],
)
def test_lm_filter_setup_errors(registry, model_dir, tmp_path, langs, resources, config, message):
    paths = {"MODEL": model_dir, "DATA": tmp_path}
    plugin = registry.load("filters", "lm").from_dict(config)
    with pytest.raises(PluginError, match=message):
        plugin.setup(langs, {role: paths[v] for role, v in resources.items()})


def test_unconnected_lm_role_fails_the_recipe_run(tmp_path, registry, noisy):
    doc = lm_recipe(tmp_path / "data", noisy)
    del doc["steps"]["clean"]["inputs"]["lm"]
    with pytest.raises(PluginError, match="needs the step input 'lm'"):
        _run(doc, registry, tmp_path / "w")


def test_memory_is_not_part_of_the_kenlm_step_identity(tmp_path, registry, noisy):
    doc = lm_recipe(tmp_path / "data", noisy)

    def lm_hash(document: dict[str, Any]) -> str:
        plan = make_plan(build_recipe(document, registry), registry)
        return next(p.hash for p in plan if p.id == "lm")

    first = lm_hash(doc)
    doc["steps"]["lm"]["memory"] = "2G"
    assert lm_hash(doc) == first
    doc["steps"]["lm"]["order"] = 4
    assert lm_hash(doc) != first


@pytest.mark.parametrize(
    ("kind", "config"),
    [
        ("steps", {"order": 7}),  # KenLM is built with KENLM_MAX_ORDER=6
        ("steps", {"prune": [1, 1]}),  # lmplz cannot prune unigrams
        ("steps", {"prune": [0, 2, 1]}),  # thresholds must not decrease
        ("steps", {"order": 2, "prune": [0, 1, 1]}),  # more values than orders
        ("steps", {"memory": "lots"}),  # not a size lmplz -S understands
        ("filters", {"thresholds": {"ja": 1.5}}),  # normalized scores lie in [0, 1]
        ("filters", {"lambda_": 1.2}),  # a weight in [0, 1]
        ("filters", {"mode": "ppl"}),  # unknown mode
    ],
)
def test_invalid_settings_are_rejected(registry, kind, config):
    name = "kenlm" if kind == "steps" else "lm"
    with pytest.raises(ValidationError):
        registry.load(kind, name).from_dict(config)


# --- alignment ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def aligned() -> tuple[Pairs, int]:
    """1,000 real training pairs whose last sixth have targets shifted by one line."""
    pairs = _pairs("train", 1001)
    real = pairs[:834]
    shifted = [(pairs[i][0], pairs[i + 1][1]) for i in range(834, 1000)]
    return real + shifted, len(real)


def align_filter(registry, **config: Any) -> Any:
    plugin = registry.load("filters", "alignment").from_dict({"rel_iterations": 0.5, **config})
    plugin.setup(("en", "ja"))
    return plugin


@pytest.fixture(scope="module")
def align_scores(registry, aligned) -> np.ndarray:
    return np.array(align_filter(registry).score(aligned[0]))


def test_real_pairs_align_better_than_shifted(align_scores, aligned):
    real, shifted = align_scores[: aligned[1]], align_scores[aligned[1] :]
    assert ((align_scores > 0) & (align_scores <= 1)).all()
    assert real.mean() > 2.5 * shifted.mean()  # measured 0.043 vs 0.010
    assert (real > np.median(shifted)).mean() >= 0.85  # measured 0.94


def test_alignment_is_deterministic_and_seeded(registry, aligned, align_scores):
    batch = aligned[0]
    assert np.array_equal(np.array(align_filter(registry).score(batch)), align_scores)
    other = np.array(align_filter(registry, seed=2).score(batch))
    assert not np.array_equal(other, align_scores)  # the seed reaches eflomal's sampler


@pytest.mark.parametrize(
    ("pair", "expect"),
    [
        (("", "私 は テニス 部員 で す 。"), 0.0),  # an empty side cannot be aligned
        (("i 'm in the tennis club .", "   "), 0.0),  # whitespace only is empty too
        (("word " * 1100, "語"), 0.0),  # beyond eflomal's 1,023-token limit
    ],
)
def test_unalignable_pairs_score_zero(registry, aligned, pair, expect):
    batch = aligned[0][:50] + [pair]
    plugin = align_filter(registry)
    scores = plugin.score(batch)
    assert scores[-1] == expect
    assert not plugin.accept(scores[-1])
    assert all(s > 0 for s in scores[:-1])


def test_top_fraction_keeps_the_best_aligned_pairs(tmp_path, registry, aligned):
    """Yishu §2.1.1 keeps the top 80 % by alignment score, through the clean step's ranking."""
    pairs, n_real = aligned
    doc = {
        "name": "align",
        "directions": ["en-ja"],
        "executor": {"workers": 1},
        "data": {"bitext": _write(tmp_path / "data", "c", pairs)},
        "steps": {
            "clean": {
                "kind": "clean",
                "inputs": {"corpus": "bitext"},
                "filters": [
                    {"name": "alignment", "rel_iterations": 0.5, "keep": {"top_fraction": 0.8}}
                ],
            }
        },
    }
    result = _run(doc, registry, tmp_path / "w")
    assert result.manifest("clean")["counts"]["pairs_out"] == 800
    kept_dir = Path(result.path("clean")) / "corpus"
    kept = set((kept_dir / "corpus.ja").read_text(encoding="utf-8").splitlines())
    real_kept = np.mean([p[1] in kept for p in pairs[:n_real]])
    shifted_kept = np.mean([p[1] in kept for p in pairs[n_real:]])
    assert real_kept >= 0.85  # measured 0.89 (at most 800 / 834 = 0.96)
    assert shifted_kept <= 0.5  # measured 0.36 (all 166 would be 1.0; at random 0.8)
