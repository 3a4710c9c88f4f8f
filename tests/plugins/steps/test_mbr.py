"""MBR decoding (the ``mbr`` step) against a brute-force implementation written plainly here with
sacrebleu, on candidate lists drawn from the WMT22 systems' real outputs of the same source
lines (raw Japanese and English): duplicates, ties, the candidates / pseudo_references limits,
a separate pseudo_refs input, a lower-is-better utility, resume, errors and settings; and the
step in a recipe after a translate step that samples."""

from __future__ import annotations

import functools
import json
import random
import statistics
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar

import pytest
from sacrebleu.metrics import BLEU, CHRF

from mtcore.api import Metric, PluginConfig, Score
from mtcore.contracts.errors import DataError, StepError
from mtcore.contracts.registry import KINDS, PluginInfo, Registry, load_registry
from mtcore.contracts.step import Artifact, StepContext
from mtcore.data.corpus import Corpus, CorpusWriter
from mtcore_plugins.executors.local import LocalExecutor
from mtcore_plugins.steps import mbr
from mtcore_plugins.steps._nbest import Entry, NBestWriter, read_nbest
from mtcore_plugins.steps.mbr import MbrConfig, MbrStep, choose, expected_utilities
from tests.support.data import ENJA, SHARED

WMT22 = "wmt-conference+wmt22-news-systems/txt"


def need(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"real data not found at {path}")
    return path


@functools.cache
def systems(pair: str, start: int, n: int) -> tuple[list[str], list[list[str]]]:
    """Source lines ``start`` to ``start + n`` of WMT22 ``pair`` and every system's output of
    each (one list per line, systems in name order)."""
    src, tgt = pair.split("-")
    base = need(SHARED / pair / WMT22)
    (source,) = (base / "sources").glob(f"*.{src}")
    sources = source.read_text(encoding="utf-8").splitlines()[start : start + n]
    outputs = [
        f.read_text(encoding="utf-8").splitlines()[start : start + n]
        for f in sorted((base / "system-outputs").glob(f"*.{tgt}"))
    ]
    return sources, [[out[i] for out in outputs] for i in range(n)]


def draw(outputs: list[list[str]], size: int, seed: int) -> list[list[str]]:
    """Per line, ``size`` outputs drawn with replacement (so some repeat), as samples are."""
    rng = random.Random(seed)
    return [[rng.choice(line) for _ in range(size)] for line in outputs]


# --- the brute-force reference ----------------------------------------------------------------


def chrf(hyp: str, ref: str) -> float:
    return CHRF().sentence_score(hyp, [ref]).score


def bleu(lang: str) -> Callable[[str, str], float]:
    tokenize = {"ja": "ja-mecab", "zh": "zh"}.get(lang, "13a")
    metric = BLEU(tokenize=tokenize, effective_order=True)
    return lambda hyp, ref: metric.sentence_score(hyp, [ref]).score


def brute_force(
    utility: Callable[[str, str], float],
    candidates: list[str],
    pseudo_refs: list[str],
    higher_is_better: bool = True,
) -> tuple[int, list[float]]:
    """Every candidate against every pseudo-reference, no shortcut: the first best candidate
    and each candidate's mean utility."""
    means = [statistics.fmean(utility(c, r) for r in pseudo_refs) for c in candidates]
    best = max(means) if higher_is_better else min(means)
    return means.index(best), means


# --- a lower-is-better utility ------------------------------------------------------------------


def char_edits(a: str, b: str) -> int:
    """Levenshtein distance in characters."""
    row = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        previous, row[0] = row[0], i
        for j, y in enumerate(b, 1):
            previous, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, previous + (x != y))
    return row[-1]


class CharEdits(Metric[PluginConfig]):
    """Character edit distance to the closest reference: lower is better, like MetricX."""

    name = "char_edits"
    higher_is_better: ClassVar[bool] = False

    def segment_scores(
        self,
        hyps: Sequence[str],
        refs: Sequence[Sequence[str]],
        lang: str,
        sources: Sequence[str] | None = None,
    ) -> list[float]:
        rows = zip(hyps, *refs, strict=True)
        return [float(min(char_edits(h, r) for r in rs)) for h, *rs in rows]

    def corpus_score(self, hyps: Sequence[str], refs: Sequence[Sequence[str]], lang: str) -> Score:
        scores = self.segment_scores(hyps, refs, lang)
        return Score("edits", statistics.fmean(scores), "char_edits")


def with_char_edits() -> Registry:
    """The installed plugins and :class:`CharEdits` as the metric ``char_edits``."""
    base = load_registry()
    infos = [base.info(kind, name) for kind in KINDS for name in base.names(kind)]
    extra = PluginInfo("metrics", "char_edits", f"{__name__}:CharEdits", "tests", "0")
    return Registry([*infos, extra])


@pytest.mark.parametrize(
    "settings",
    [
        # the plugin's defaults (chrF: char_order 6, beta 2)
        {},
        # chrF++ (word n-grams, punctuation split off)
        {"word_order": 2},
        # case-insensitive, recall and precision weighed alike
        {"lowercase": True, "beta": 1, "char_order": 4},
    ],
)
def test_chrf_segment_scores_are_sacrebleu_sentence_scores(settings: dict[str, Any]) -> None:
    """The chrf plugin counts each text's n-grams once per call; its scores are still
    sacrebleu's ``sentence_score``, with one or two references (None: none in that stream),
    on raw Japanese and on English."""
    metric = load_registry().load("metrics", "chrf").from_dict(settings)
    sacre = CHRF(**settings)
    for pair in ("en-ja", "ja-en"):
        _, outputs = systems(pair, 0, 40)
        hyps = [line[0] for line in outputs] + [line[2] for line in outputs]
        first = [line[1] for line in outputs] * 2
        second = [line[3] if i % 3 else None for i, line in enumerate(outputs)] * 2
        lang = pair.split("-")[1]
        assert metric.segment_scores(hyps, [first], lang) == [
            sacre.sentence_score(h, [r]).score for h, r in zip(hyps, first, strict=True)
        ]
        two = metric.segment_scores(hyps, [first, second], lang, sources=hyps)
        assert two == [
            sacre.sentence_score(h, [r for r in rs if r is not None]).score
            for h, *rs in zip(hyps, first, second, strict=True)
        ]


# --- the step ---------------------------------------------------------------------------------


def context(work: Path, registry: Registry | None = None, **inputs: Path) -> StepContext:
    return StepContext(
        step_id="mbr",
        kind="mbr",
        step_hash="x",
        work=work,
        inputs={role: Artifact.open(path) for role, path in inputs.items()},
        executor=LocalExecutor(LocalExecutor.Config(workers=1)),
        registry=registry or load_registry(),
        show_progress=False,
    )


def write_nbest(path: Path, sources: list[str], lists: list[list[str]], tgt: str) -> Path:
    writer = NBestWriter(path, "en" if tgt != "en" else "ja", tgt)
    for i, (source, texts) in enumerate(zip(sources, lists, strict=True)):
        writer.write(Entry(i, source, [(t, {"fwd": -0.1 * k}) for k, t in enumerate(texts)]))
    writer.close(n=max(len(t) for t in lists), sampling=True)
    return path


def run(tmp_path: Path, settings: dict[str, Any], registry: Registry | None = None, **inputs):
    step = MbrStep.from_dict(settings)
    assert step.check(registry or load_registry()) == []
    ctx = context(tmp_path / "mbr", registry, **inputs)
    step.run(ctx)
    corpus = Corpus.open(tmp_path / "mbr" / "hyp")
    hyp = corpus.file(corpus.langs[0]).read_text(encoding="utf-8").splitlines()
    return ctx, hyp, list(read_nbest(tmp_path / "mbr" / "scores" / "nbest.jsonl"))


@pytest.mark.parametrize(
    ("pair", "utility", "settings", "separate"),
    [
        # the default utility on raw (unsegmented) Japanese, samples as their own references
        ("en-ja", "chrf", {}, False),
        # sentence BLEU (ja-mecab) with the first 5 candidates judged against the first 7
        ("en-ja", "sentence_bleu", {"candidates": 5, "pseudo_references": 7}, False),
        # English output, pseudo-references from a second list (beam candidates vs samples)
        ("ja-en", "chrf", {"pseudo_references": 6}, True),
        # shards of 3 lines (one segment_scores call each)
        ("ja-en", "sentence_bleu", {"shard_size": 3, "candidates": 4}, True),
    ],
)
def test_mbr_step_matches_brute_force(
    pair: str, utility: str, settings: dict[str, Any], separate: bool, tmp_path: Path
) -> None:
    sources, outputs = systems(pair, 200, 10)
    tgt = pair.split("-")[1]
    lists = draw(outputs, 9, seed=1)
    inputs = {"nbest": write_nbest(tmp_path / "nbest", sources, lists, tgt)}
    refs = lists
    if separate:
        refs = draw(outputs, 8, seed=2)
        inputs["pseudo_refs"] = write_nbest(tmp_path / "pseudo", sources, refs, tgt)
    ctx, hyp, scored = run(tmp_path, {"utility": utility, **settings}, **inputs)
    n, m = settings.get("candidates"), settings.get("pseudo_references")
    score = chrf if utility == "chrf" else bleu(tgt)
    changed = 0
    for i, (line, pseudo) in enumerate(zip(lists, refs, strict=True)):
        best, means = brute_force(score, line[:n], pseudo[:m])
        assert hyp[i] == line[best], i
        assert [text for text, _ in scored[i].hyps] == line[:n]
        assert [s["mbr"] for _, s in scored[i].hyps] == means  # exact: sums are exact
        assert [s["fwd"] for _, s in scored[i].hyps] == pytest.approx(
            [-0.1 * k for k in range(len(line[:n]))]
        )
        changed += best != 0
    assert any(len(set(line)) < len(line) for line in lists)  # duplicates were drawn
    assert ctx.stats["mbr.lines"] == 10 and ctx.stats["mbr.changed"] == changed
    pairs = sum(len(set(c[:n])) * len(set(r[:m])) for c, r in zip(lists, refs, strict=True))
    assert ctx.stats["mbr.pairs"] == pairs  # each distinct pair scored once
    meta = Artifact.open(tmp_path / "mbr" / "scores").meta
    assert (
        meta["type"] == "nbest"
        and meta["utility"] == utility
        and meta["features"] == ["fwd", "mbr"]
    )


def test_ties_go_to_the_earliest_candidate(tmp_path: Path) -> None:
    """chrF ignores spaces, so a Japanese output and the same with a space inserted tie with
    any pseudo-references: whichever comes first wins; and a duplicate is the first copy."""
    sources, outputs = systems("en-ja", 300, 4)
    lists = []
    for k, line in enumerate(outputs):
        spaced = line[0][:3] + " " + line[0][3:]
        pair = [line[0], spaced] if k % 2 == 0 else [spaced, line[0]]
        lists.append([*pair, *pair, *line[1:6]])
    _, hyp, scored = run(tmp_path, {}, nbest=write_nbest(tmp_path / "nbest", sources, lists, "ja"))
    for k, line in enumerate(lists):
        values = [s["mbr"] for _, s in scored[k].hyps]
        assert values[0] == values[1] == values[2] == values[3]
        assert max(values) == values[0]  # the most common output is the consensus
        assert hyp[k] == line[0] and hyp[k] != line[1]


def test_lower_is_better_utility_is_minimized(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """A metric whose ``higher_is_better`` is False (MetricX, TER): the candidate with the
    least expected edit distance wins; a tie again goes to the earliest."""
    registry = with_char_edits()
    monkeypatch.setattr(mbr, "load_registry", lambda: registry)  # the worker builds it by name
    sources, outputs = systems("ja-en", 100, 6)
    lists = draw(outputs, 7, seed=3)
    lists[0] = ["abcd", "abXd", "abcd", "abYd"]  # a tie broken by position needs a symmetry:
    lists[1] = ["ab", "ba"]  # d(ab, ba) = d(ba, ab): equal means, the first wins
    _, hyp, scored = run(
        tmp_path, {"utility": "char_edits"}, registry,
        nbest=write_nbest(tmp_path / "nbest", sources, lists, "en"),
    )  # fmt: skip
    for k, line in enumerate(lists):
        best, means = brute_force(char_edits, line, line, higher_is_better=False)
        assert hyp[k] == line[best] and [s["mbr"] for _, s in scored[k].hyps] == means
    assert hyp[:2] == ["abcd", "ab"]
    # the same choice through the functions, without the step
    metric = CharEdits()
    rows = [(s, line, line) for s, line in zip(sources, lists, strict=True)]
    values, _ = expected_utilities(metric, rows, "en")
    assert [line[choose(v, False)] for line, v in zip(lists, values, strict=True)] == hyp


def test_utility_reads_the_source_when_it_needs_it() -> None:
    """A ``needs_source`` metric gets each pair's own source line, in one call for the shard."""
    calls: list[tuple[list[str], list[str]]] = []

    class SourceAware(CharEdits):
        needs_source: ClassVar[bool] = True

        def segment_scores(self, hyps, refs, lang, sources=None):  # type: ignore[no-untyped-def]
            assert sources is not None
            calls.append((list(hyps), list(sources)))
            return super().segment_scores(hyps, refs, lang)

    rows = [("src one", ["a", "b", "a"], ["a", "b"]), ("src two", ["c"], ["c", "d", "c"])]
    values, pairs = expected_utilities(SourceAware(), rows, "en")
    assert len(calls) == 1 and pairs == 2 * 2 + 1 * 2
    assert calls[0][1] == ["src one"] * 4 + ["src two"] * 2
    assert values == [[0.5, 0.5, 0.5], [1 / 3]]  # c vs (c, d, c): 0, 1, 0


def test_resumed_run_reuses_finished_shards(tmp_path: Path) -> None:
    sources, outputs = systems("en-ja", 400, 7)
    lists = draw(outputs, 5, seed=4)
    nbest = write_nbest(tmp_path / "nbest", sources, lists, "ja")
    step = MbrStep.from_dict({"shard_size": 2})
    step.run(context(tmp_path / "mbr", nbest=nbest))
    first = (tmp_path / "mbr" / "hyp" / "hyp.ja").read_text(encoding="utf-8")
    saved = sorted((tmp_path / "mbr" / ".scratch" / "mbr").glob("*.pkl"))
    assert len(saved) == 4
    saved[1].unlink()  # killed before the second shard was saved
    stamps = {p: p.stat().st_mtime_ns for p in saved if p.exists()}
    step.run(context(tmp_path / "mbr", nbest=nbest))
    assert (tmp_path / "mbr" / "hyp" / "hyp.ja").read_text(encoding="utf-8") == first
    assert all(p.stat().st_mtime_ns == stamp for p, stamp in stamps.items())
    assert saved[1].exists()


@pytest.mark.parametrize(
    ("settings", "inputs", "error"),
    [
        # a corpus where an n-best list belongs
        ({}, {"nbest": "corpus"}, "is not an n-best list"),
        # pseudo-references of other lines
        ({}, {"pseudo_refs": "short"}, "pseudo_refs has lines 4, the nbest 5"),
        ({}, {"pseudo_refs": "shifted"}, "line 1 has source"),
        # a column the n-best already has
        ({"feature": "fwd"}, {}, "already has a 'fwd' column"),
        # a corpus metric
        ({"utility": "bleu"}, {}, "'bleu' has no segment scores.*valid: chrf, .*sentence_bleu"),
    ],
)
def test_mbr_errors(
    settings: dict[str, Any], inputs: dict[str, str], error: str, tmp_path: Path
) -> None:
    sources, outputs = systems("en-ja", 0, 5)
    lists = draw(outputs, 3, seed=5)
    paths = {
        "nbest": write_nbest(tmp_path / "nbest", sources, lists, "ja"),
        "short": write_nbest(tmp_path / "short", sources[:4], lists[:4], "ja"),
        "shifted": write_nbest(tmp_path / "shifted", sources[1:] + sources[:1], lists, "ja"),
    }
    with CorpusWriter(tmp_path / "corpus", ("en", "ja")) as writer:
        writer.write_all(zip(sources, [line[0] for line in lists], strict=True))
    paths["corpus"] = tmp_path / "corpus"
    connected = {"nbest": paths["nbest"], **{role: paths[name] for role, name in inputs.items()}}
    with pytest.raises((StepError, DataError), match=error):
        MbrStep.from_dict(settings).run(context(tmp_path / "mbr", **connected))


def test_mbr_settings_are_checked() -> None:
    registry = load_registry()
    where = dict(MbrStep.from_dict({"utility": "bleu"}).check(registry))
    valid = where["utility"].split("valid: ")[1].split(", ")
    assert "chrf" in valid and "sentence_bleu" in valid and "bleu" not in valid
    where = dict(MbrStep.from_dict({"utility": "chrff"}).check(registry))
    assert "Did you mean 'chrf'?" in where["utility.name"]
    where = dict(MbrStep.from_dict({"utility": {"name": "chrf", "beta": 0}}).check(registry))
    assert "greater than or equal to 1" in where["utility.beta"]
    assert MbrStep.from_dict({"utility": {"name": "sentence_bleu"}}).check(registry) == []
    for utility in ("cometkiwi", "metricx_qe"):
        where = dict(
            MbrStep.from_dict({"utility": {"name": utility, "model": "m"}}).check(registry)
        )
        assert "reference-free" in where["utility"], utility
    qe = {"name": "xcomet", "model": "m", "reference": False}
    where = dict(MbrStep.from_dict({"utility": qe}).check(registry))
    assert "ignores references" in where["utility"]
    assert MbrStep.from_dict({"utility": {**qe, "reference": True}}).check(registry) == []
    with pytest.raises(ValueError, match="greater than or equal to 1"):
        MbrConfig.model_validate({"candidates": 0})
    assert MbrConfig.model_validate({}).utility == "chrf"


# --- in a recipe ---------------------------------------------------------------------------


@pytest.mark.slow
def test_mbr_in_a_recipe_after_sampling(tmp_path: Path) -> None:
    """A tiny random Marian model (tests/support/tiny_pretrained.py) samples 6 translations of real
    English lines; the mbr step picks from them through the runner, and evaluate scores the
    pick. The choice is the brute force's on the samples the translate step wrote. Slow:
    building the model imports transformers (11 s)."""
    from mtcore.recipe.load import build_recipe
    from mtcore.run.runner import Runner
    from tests.support.tiny_pretrained import build

    def lines(split: str, lang: str, n: int) -> list[str]:
        return (need(ENJA) / f"{split}.{lang}").read_text(encoding="utf-8").splitlines()[:n]

    model = build("marian", lines("train", "en", 300) + lines("train", "ja", 300), tmp_path / "m")
    (tmp_path / "t.en").write_text("\n".join(lines("test", "en", 8)) + "\n", encoding="utf-8")
    (tmp_path / "t.ja").write_text("\n".join(lines("test", "ja", 8)) + "\n", encoding="utf-8")
    files = {"en": str(tmp_path / "t.en"), "ja": str(tmp_path / "t.ja")}
    doc = {
        "name": "mbr",
        "directions": ["en-ja"],
        "executor": {"workers": 1},
        "data": {"test": {"source": "local", "files": files}},
        "models": {"teacher": {"id": str(model)}},
        "steps": {
            "samples": {"kind": "translate", "src": "en", "tgt": "ja", "sampling": True,
                        "nbest": 6, "beam": 1, "inputs": {"model": "teacher", "corpus": "test"}},
            "pick": {"kind": "mbr", "inputs": {"nbest": "samples.nbest"}},
            "evaluate": {"kind": "evaluate", "inputs": {"hyp": "pick", "ref": "test"},
                         "metrics": ["chrf"]},
        },
    }  # fmt: skip
    registry = load_registry()
    result = Runner(
        build_recipe(doc, registry), registry, tmp_path / "w", show_progress=False
    ).run()
    pick = result.path("pick")
    entries = list(read_nbest(result.path("samples") / "nbest" / "nbest.jsonl"))
    hyp = (pick / "hyp" / "hyp.ja").read_text(encoding="utf-8").splitlines()
    assert len(entries) == len(hyp) == 8
    for entry, chosen in zip(entries, hyp, strict=True):
        texts = [text for text, _ in entry.hyps]
        best, _ = brute_force(chrf, texts, texts)
        assert chosen == texts[best]
    assert result.manifest("pick")["counts"]["mbr.lines"] == 8
    report = result.path("evaluate") / "scores" / "scores.json"
    scores = json.loads(report.read_text(encoding="utf-8"))
    assert scores["scores"][0]["metric"] == "chrF"
