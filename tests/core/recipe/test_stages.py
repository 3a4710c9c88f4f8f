"""A recipe's ``submitted:`` and ``stage_notes:`` keys, checked against its stages when it
loads, and the marks listings show (mtcore.recipe.stages)."""

from __future__ import annotations

import copy

import pytest

from mtcore.contracts.errors import RecipeError
from mtcore.recipe.load import build_recipe, read_yaml
from mtcore.recipe.stages import stage_mark
from tests.support import ROOT

NT5 = ROOT / "recipes" / "nt5.yaml"
HWTSC = ROOT / "recipes" / "hwtsc.yaml"
NT5_STAGES = "baseline, bt, ftnews, ft, ensnews, ensemble, ensall, rerank"


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        # a stage that is not one of the direction's, with the valid ones in order
        (
            "submitted",
            {"en-ja": "final"},
            f"submitted.en-ja: 'final' is not a stage of enja; valid (in order): {NT5_STAGES}",
        ),
        # a direction no stage scores
        (
            "submitted",
            {"de-en": "rerank"},
            "submitted.de-en: no stage scores direction 'de-en'; directions with stages: "
            "enja, jaen",
        ),
        # a note on a stage the recipe does not have
        (
            "stage_notes",
            {"rerankk": "x"},
            "stage_notes.rerankk: not a stage. Did you mean 'rerank'",
        ),
    ],
)
def test_a_key_naming_no_stage_is_a_recipe_error(registry, key, value, message):
    document = copy.deepcopy(read_yaml(NT5))
    document[key] = value
    with pytest.raises(RecipeError) as caught:
        build_recipe(document, registry, source=str(NT5))
    assert str(caught.value).startswith(f"{NT5}: 1 problem")
    assert message in str(caught.value)


def test_a_profile_may_name_a_stage_only_its_graph_has(registry):
    """HW-TSC's paper profile adds its other pairs' submissions; the cpu graph has no En->Hr
    and would reject them."""
    document = read_yaml(HWTSC)
    paper = build_recipe(document, registry, "paper", source=str(HWTSC))
    assert paper.head.submitted["en-hr"] == "ensemble"
    cpu = copy.deepcopy(document)
    cpu["submitted"]["en-hr"] = "ensemble"
    with pytest.raises(RecipeError, match="submitted.en-hr: no stage scores direction 'en-hr'"):
        build_recipe(cpu, registry, "cpu", source=str(HWTSC))


def test_marks_name_the_submitted_stage_and_the_notes(registry):
    recipe = build_recipe(read_yaml(HWTSC), registry, source=str(HWTSC))
    head, steps = recipe.head, recipe.steps

    def mark(stage: str, direction: str | None = None) -> str:
        return stage_mark(head.submitted, head.stage_notes, steps, stage, direction)

    assert mark("ensemble") == "submitted"
    assert mark("ensemble", "enuk") == "submitted"
    assert mark("kd").startswith("not submitted: ")
    assert mark("baseline") == ""
    only_one = stage_mark({"en-uk": "ensemble"}, {}, steps, "ensemble")
    assert only_one == "submitted: enuk"  # uk-en's ensemble is there, not submitted
