"""The select_models step on real en-ja slices with micro models trained for different numbers
of updates and in both reading directions: its choice is the top of the scores each candidate
gets when the translate and evaluate steps are run on it one by one; its outputs are the chosen
models, usable by translate; settings and inputs that cannot work are clear errors, in the
recipe's validation where possible; a killed selection resumes without decoding again."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mtcore.contracts.errors import DataError, RecipeError
from mtcore.contracts.registry import load_registry
from mtcore.data.corpus import Corpus
from mtcore.recipe.load import build_recipe
from mtcore.system.metrics import build_metrics
from mtcore_plugins.steps import select_models
from mtcore_plugins.steps.select_models import SelectModelsStep
from tests.plugins.steps.test_decoding import MICRO, train, translate
from tests.plugins.steps.test_fairseq_steps import DATA
from tests.support.data import local_data
from tests.support.steps import make_ctx

pytestmark = pytest.mark.skipif(not DATA.is_dir(), reason=f"real data not found at {DATA}")

METRIC = {"name": "chrf"}
DECODE: dict[str, Any] = {"beam": 2}


@pytest.fixture(scope="module")
def setup(
    micro_setup: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Path]:
    """The decoding tests' data and 5-update model, plus a 100-update model and a 40-update
    right-to-left one: three candidates that translate the dev set differently (chrF about 0,
    2.6 and 8.4)."""
    root = tmp_path_factory.mktemp("select_models")
    found = dict(micro_setup)
    for name, updates, direction in (("model100", 100, "l2r"), ("r2l40", 40, "r2l")):
        settings = {**MICRO, "max_update": updates, "save_interval_updates": updates}
        found[name] = train(root / name, {**settings, "direction": direction}, found["data_enja"])
    return found


def select(
    setup: dict[str, Path], work: Path, candidates: dict[str, str], **settings: Any
) -> dict[str, Any]:
    models = {role: setup[name] for role, name in candidates.items()}
    ctx = make_ctx(work, "select_models", dev=setup["valid"], spm=setup["spm"], **models)
    step = SelectModelsStep.from_dict(
        {"src": "en", "tgt": "ja", "metric": METRIC, "threads": 1, **DECODE, **settings}
    )
    step.run(ctx)
    return json.loads((work / "ranking" / "ranking.json").read_text(encoding="utf-8"))


def test_the_choice_is_the_top_of_each_candidates_own_translate_and_evaluate(
    setup: dict[str, Path], tmp_path: Path
) -> None:
    candidates = {"model": "model", "model2": "model100", "model3": "r2l40"}
    found = select(setup, tmp_path / "sel", candidates, top=2)
    # each candidate alone through the translate step on dev, scored by the metric plugin
    metric = build_metrics(load_registry(), [METRIC])[0]
    refs = [pair[1] for pair in Corpus.open(setup["valid"])]
    expected = {}
    for role, name in candidates.items():
        dev = {**setup, "test": setup["valid"]}
        _, hyps, _ = translate(dev, tmp_path / role, models={"model": setup[name]}, **DECODE)
        expected[role] = metric.corpus_score(hyps, [refs], "ja").score
    assert len(set(expected.values())) == 3, expected  # three different scores: a real choice
    scores = {row["role"]: row["score"] for row in found["ranking"]}
    assert scores == pytest.approx(expected)
    best = sorted(expected, key=lambda role: -expected[role])
    assert [row["role"] for row in found["ranking"]] == best
    assert [row["selected"] for row in found["ranking"]] == [True, True, False]
    # the outputs are the chosen candidates' artifacts, file for file
    for out_role, role in zip(("model", "model2"), best, strict=False):
        source = setup[candidates[role]]
        out = tmp_path / "sel" / out_role
        names = sorted(p.name for p in source.iterdir() if not p.name.startswith("."))
        assert sorted(p.name for p in out.iterdir()) == names
        for name in names:
            assert (out / name).read_bytes() == (source / name).read_bytes()
    assert not (tmp_path / "sel" / "model3").exists()
    assert found["dev_lines"] == len(refs)


def test_the_chosen_models_translate_as_an_ensemble(setup: dict[str, Path], tmp_path: Path) -> None:
    select(setup, tmp_path / "sel", {"model": "model", "model2": "model100"}, top=2)
    chosen = {"model": tmp_path / "sel" / "model", "model2": tmp_path / "sel" / "model2"}
    _, ensembled, _ = translate(setup, tmp_path / "ens", models=chosen, **DECODE)
    direct = {"model": setup["model"], "model2": setup["model100"]}
    _, expected, _ = translate(setup, tmp_path / "direct", models=direct, **DECODE)
    assert ensembled == expected


def test_a_killed_selection_resumes_with_the_candidates_not_yet_scored(
    setup: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    work = tmp_path / "sel"
    real = select_models.translate_dev
    calls: list[str] = []

    def killed_after_one(ctx: Any, config: Any, artifact: Any, sources: list[str]) -> list[str]:
        if calls:
            raise KeyboardInterrupt
        calls.append(str(artifact.path))
        return real(ctx, config, artifact, sources)

    monkeypatch.setattr(select_models, "translate_dev", killed_after_one)
    with pytest.raises(KeyboardInterrupt):
        select(setup, work, {"model": "model", "model2": "model100"}, top=1)
    calls.clear()
    monkeypatch.setattr(
        select_models, "translate_dev", lambda *a: calls.append(str(a[2].path)) or real(*a)
    )
    resumed = select(setup, work, {"model": "model", "model2": "model100"}, top=1)
    assert calls == [str(setup["model100"])]  # the first candidate's score was kept
    fresh = select(setup, tmp_path / "fresh", {"model": "model", "model2": "model100"}, top=1)
    assert resumed["ranking"] == fresh["ranking"]


@pytest.mark.parametrize(
    ("candidates", "settings", "message"),
    [
        # there is nothing to choose from two models for an ensemble of three
        ({"model": "model", "model2": "model100"}, {"top": 3}, "top 3 but 2 candidate(s)"),
        # a candidate for the other direction cannot be scored on this one
        ({"model": "model"}, {"top": 1, "src": "ja", "tgt": "en"}, "translates en->ja"),
    ],
)
def test_a_selection_that_cannot_work_is_a_clear_error(
    setup: dict[str, Path],
    tmp_path: Path,
    candidates: dict[str, str],
    settings: dict[str, Any],
    message: str,
) -> None:
    with pytest.raises(DataError, match=message.replace("(", r"\(").replace(")", r"\)")):
        select(setup, tmp_path / "sel", candidates, **settings)


def test_a_reference_to_a_member_the_selection_does_not_choose_fails_validation(
    registry: Any,
) -> None:
    document = {
        "name": "sel",
        "data": local_data({"en": "a.en", "ja": "a.ja"}),
        "steps": {
            "spm": {"kind": "spm", "inputs": {"corpus": "bitext"}},
            "pick": {
                "kind": "select_models",
                "inputs": {"model": "spm", "model2": "spm", "dev": "bitext", "spm": "spm"},
                "src": "en",
                "tgt": "ja",
                "top": 2,
            },
            "use": {
                "kind": "translate",
                "inputs": {"model": "pick", "model2": "pick.model3", "corpus": "bitext",
                           "spm": "spm"},
                "src": "en",
                "tgt": "ja",
            },
        },
    }  # fmt: skip
    with pytest.raises(RecipeError) as info:
        build_recipe(document, registry)
    assert info.value.problems == [
        "steps.use.inputs.model2: step 'pick' does not write output 'model3' with its "
        "settings (it writes: model, model2, ranking)"
    ]
