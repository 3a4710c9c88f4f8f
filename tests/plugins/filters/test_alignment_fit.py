"""The corpus-level fit of the ``alignment`` filter (issue 21): one model per corpus, so a pair's
score does not depend on the shard it is scored in.

Real pairs: 1,200 small_parallel_enja training pairs, every sixth with its target shifted by
one line. Measured with a fit on all of them (eflomal's schedule halved): genuine pairs'
median 0.033, shifted pairs' 0.0072, 93 % of genuine pairs above that, every shifted pair below
0.1; every bound below leaves a margin.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mtcore.chain.filtering import make_specs
from mtcore.chain.fitting import draw_sample, fit_chain, sample_rows
from mtcore.contracts.errors import DataError
from mtcore.contracts.step import StepContext
from mtcore.recipe.load import build_recipe
from mtcore.run.runner import Runner
from mtcore_plugins.filters.alignment import AlignmentFilter
from tests.support.data import local_data, real_slice

Pairs = list[tuple[str, str]]
FAST = {"rel_iterations": 0.5}  # eflomal's schedule halved: the tests need no better alignment


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Path], Pairs, np.ndarray]:
    """Files, pairs and a shifted-target mask of 1,200 real pairs, every sixth shifted."""
    folder = tmp_path_factory.mktemp("enja")
    files = real_slice(folder / "src", "train", 1201)
    en, ja = (files[lang].read_text(encoding="utf-8").splitlines() for lang in ("en", "ja"))
    shifted = np.arange(1200) % 6 == 5
    pairs = [(en[i], ja[i + 1] if shifted[i] else ja[i]) for i in range(1200)]
    for side, lang in enumerate(("en", "ja")):
        files[lang] = folder / f"corpus.{lang}"
        files[lang].write_text("".join(p[side] + "\n" for p in pairs), encoding="utf-8")
    return files, pairs, shifted


def aligner(registry: Any, **config: Any) -> AlignmentFilter:
    plugin = registry.load("filters", "alignment").from_dict({**FAST, **config})
    plugin.setup(("en", "ja"))
    assert isinstance(plugin, AlignmentFilter)
    return plugin


@pytest.fixture(scope="module")
def fitted(registry, corpus, tmp_path_factory) -> tuple[AlignmentFilter, Path]:
    folder = tmp_path_factory.mktemp("fit")
    plugin = aligner(registry)
    plugin.fit(corpus[1], folder)
    plugin.use_fit(folder)
    return plugin, folder


def test_scores_do_not_depend_on_the_batch(fitted, corpus):
    plugin, _ = fitted
    pairs = corpus[1]
    whole = plugin.score(pairs)
    for size in (1, 7, 500):  # one pair alone, odd splits, the engine's shards
        split = [
            s for start in range(0, len(pairs), size) for s in plugin.score(pairs[start:][:size])
        ]
        assert split == whole, size  # bit for bit: no pair sees another


def test_misaligned_pairs_score_below_genuine_ones(fitted, corpus):
    plugin, _ = fitted
    _, pairs, shifted = corpus
    scores = np.array(plugin.score(pairs))
    real, wrong = scores[~shifted], scores[shifted]
    assert ((scores > 0) & (scores <= 1)).all()
    assert np.median(real) > 2.5 * np.median(wrong)  # measured 0.033 vs 0.0072
    assert (real > np.median(wrong)).mean() >= 0.85  # measured 0.93
    assert (wrong < 0.1).mean() >= 0.95  # measured 1.0: Xiaomi's threshold drops them


@pytest.mark.parametrize(
    ("pair", "why"),
    [
        (("i 'm in the tennis club .", "私 は テニス 部員 で す 。"), "genuine, in the corpus"),
        (("the tennis club is here .", "テニス 部 は ここ で す 。"), "genuine, unseen as a whole"),
        (("i 'm in the tennis club .", "彼 は 昨日 東京 に 行 っ た 。"), "a wrong target"),
        (("zzyzx qwxq", "ゑゐゑゐ"), "no word seen in the sample"),
    ],
)
def test_any_pair_is_scored_from_the_tables_alone(fitted, pair, why):
    plugin, _ = fitted
    (alone,) = plugin.score([pair])
    assert 0 < alone <= 1, why
    assert plugin.score([("a b c", "あ"), pair])[1] == alone, why


def test_a_fit_on_no_alignable_pair_scores_every_pair_zero(registry, tmp_path):
    plugin = aligner(registry)
    plugin.fit([("", "空"), ("word " * 1100, "語")], tmp_path)  # an empty side, too long
    plugin.use_fit(tmp_path)
    assert plugin.score([("i 'm here .", "私 は ここ に い ま す 。")]) == [0.0]


def test_the_fit_is_deterministic_and_seeded(registry, corpus, fitted, tmp_path):
    _, folder = fitted
    again, seeded = tmp_path / "again", tmp_path / "seeded"
    for path, seed in ((again, 1), (seeded, 2)):
        path.mkdir()
        aligner(registry, seed=seed).fit(corpus[1], path)
    assert _contents(again) == _contents(folder)
    assert _contents(seeded) != _contents(folder)  # the seed reaches eflomal's sampler


def test_a_sampled_pair_does_not_vouch_for_itself(registry, corpus, fitted, tmp_path):
    """A pair's own links are left out of the counts: a word seen only in that pair reads as
    unseen, so the pair scores about as it would outside the sample."""
    plugin, _ = fitted
    pair = ("i 'm in the tennis club . xylophonist", "私 は テニス 部員 で す 。 木琴奏者")
    with_it = tmp_path / "with"
    with_it.mkdir()
    aligner(registry).fit([*corpus[1], pair], with_it)
    sampled = aligner(registry)
    sampled.use_fit(with_it)
    outside, inside = plugin.score([pair])[0], sampled.score([pair])[0]
    assert inside < 1.5 * outside  # measured 0.063 vs 0.057
    assert sampled.lexicon is not None
    sampled.lexicon.own.clear()  # what counting its own links would give
    assert sampled.score([pair])[0] > 2 * inside  # measured 0.21


def test_sample_rows_are_evenly_spaced_and_bounded():
    assert sample_rows(5, 10).tolist() == [0, 1, 2, 3, 4]
    assert sample_rows(10, 4).tolist() == [0, 2, 5, 7]
    assert len(set(sample_rows(1_000_003, 1000).tolist())) == 1000


def test_the_sample_is_read_across_blocks(monkeypatch, corpus):
    files, pairs, _ = corpus
    monkeypatch.setattr(
        "mtcore.chain.fitting.READ_LINES", 7
    )  # many blocks, rows on both sides of cuts
    blocks = draw_sample([files["en"], files["ja"]], ("en", "ja"), 100)
    drawn = [p for b in blocks for p in b.decode(("en", "ja")).pairs()]
    assert drawn == [pairs[i] for i in sample_rows(1200, 100)]


def test_a_bad_sampled_line_is_named_with_its_corpus_line(tmp_path):
    files = {}
    for lang, bad in (("en", b"ok\n" * 9 + b"bad \xff\n" + b"ok\n" * 5), ("ja", b"x\n" * 15)):
        files[lang] = tmp_path / f"c.{lang}"
        files[lang].write_bytes(bad)
    with pytest.raises(DataError, match=r"c\.en:10: invalid UTF-8"):
        draw_sample([files["en"], files["ja"]], ("en", "ja"), 15)


class Serial:
    """An executor running tasks in this process."""

    def map(self, fn: Any, tasks: Any) -> Any:
        return map(fn, tasks)


def test_the_fit_is_resume_safe(registry, corpus, tmp_path, monkeypatch):
    files, _, _ = corpus
    specs = tuple(make_specs([{"name": "length", "max_length": 8, "unit": "token"},
                              {"name": "alignment", **FAST}]))  # fmt: skip
    ctx = StepContext("clean", "clean", "h", tmp_path, {}, Serial(), registry)  # type: ignore[arg-type]
    leftover = tmp_path / ".scratch" / "fit" / "001-alignment.tmp"
    leftover.mkdir(parents=True)
    (leftover / "lexicon.npz").write_bytes(b"half a file from a killed run")
    done = fit_chain(ctx, [files["en"], files["ja"]], ("en", "ja"), specs, ())
    folder = Path(str(done[1].fitted))
    assert done[0].fitted is None and folder.name == "001-alignment" and not leftover.exists()
    pairs = json.loads((folder / "fit.json").read_text())["pairs"]
    assert 0 < pairs < 1200  # the length filter before it took its share of the sample
    assert ctx.stats[f"fit.{specs[1].label}.pairs"] == pairs
    before = _contents(folder)

    def refit(*args: Any) -> None:
        raise AssertionError("a completed fit is reused, not redone")

    monkeypatch.setattr(AlignmentFilter, "fit", refit)
    assert fit_chain(ctx, [files["en"], files["ja"]], ("en", "ja"), specs, ()) == done
    assert _contents(folder) == before


def _recipe(files: dict[str, Path], shard_size: int, workers: int) -> dict[str, Any]:
    return {
        "name": "align-shards",
        "directions": ["en-ja"],
        "executor": {"workers": workers},
        "data": local_data(files),
        "steps": {
            "clean": {
                "kind": "clean",
                "inputs": {"corpus": "bitext"},
                "shard_size": shard_size,
                "filters": [{"name": "alignment", "min_probability": 0.03, **FAST}],
            },
            "score": {
                "kind": "score",
                "inputs": {"corpus": "bitext"},
                "shard_size": shard_size,
                "filters": [{"name": "alignment", **FAST}],
            },
        },
    }


def test_steps_give_the_same_result_at_any_shard_size(registry, corpus, tmp_path):
    """The clean and score steps, at 150-pair shards on two workers and at one 2,000-pair
    shard: the same kept pairs and the same score of every pair."""
    files, _, shifted = corpus
    outputs = []
    for shard_size, workers in ((150, 2), (2000, 1)):
        doc = _recipe(files, shard_size, workers)
        work = tmp_path / f"w{shard_size}"
        result = Runner(build_recipe(doc, registry), registry, work, show_progress=False).run()
        kept = (result.path("clean") / "corpus" / "corpus.ja").read_text(encoding="utf-8")
        scores = (result.path("score") / "scores" / "scores.tsv").read_text(encoding="utf-8")
        outputs.append((kept, scores, result.manifest("clean")["counts"]["pairs_out"]))
    assert outputs[0] == outputs[1]
    table = np.loadtxt(outputs[0][1].splitlines()[1:])
    assert np.median(table[~shifted]) > 2.5 * np.median(table[shifted])  # measured 4.6x


def _contents(folder: Path) -> tuple[Any, ...]:
    with np.load(folder / "lexicon.npz") as data:
        arrays = tuple((name, data[name].tobytes()) for name in sorted(data.files))
    return (folder.joinpath("vocab.json").read_text(encoding="utf-8"), arrays)
