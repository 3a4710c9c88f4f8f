"""Recipe validation: every problem at once, with its location and a useful message."""

from __future__ import annotations

from pathlib import Path

import pytest

from mtcore.contracts.errors import RecipeError
from mtcore.recipe.load import build_recipe, load_recipe, read_yaml
from mtcore.recipe.overrides import apply_set, deep_merge, parse_set
from tests.support.data import clean_split_recipe


def base_recipe(files: dict[str, Path] | None = None) -> dict:
    files = files or {"en": "a.en", "ja": "a.ja"}
    filters = [{"name": "length", "max_length": 100}, {"name": "length_ratio", "max_ratio": 3}]
    document = clean_split_recipe("t", files, filters, held_out=10)
    del document["executor"]
    return document


def problems_of(document: dict, registry, **kwargs) -> list[str]:
    with pytest.raises(RecipeError) as info:
        build_recipe(document, registry, **kwargs)
    return info.value.problems


def test_valid_recipe_builds_data_and_steps(registry):
    recipe = build_recipe(base_recipe(), registry)
    assert list(recipe.steps) == ["bitext", "clean", "split"]
    assert recipe.steps["bitext"].kind == "fetch"
    assert recipe.steps["split"].inputs == {"corpus": "clean"}


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        # a nested filter setting out of range: the location names the list index
        (
            lambda d: d["steps"]["clean"]["filters"][1].update(max_ratio=0.5),
            "steps.clean.filters.1.max_ratio: Input should be greater than 1",
        ),
        # a misspelt filter name gets a did-you-mean
        (
            lambda d: d["steps"]["clean"]["filters"][0].update(name="lenght"),
            "Did you mean 'length'?",
        ),
        # a misspelt step kind gets a did-you-mean
        (
            lambda d: d["steps"]["split"].update(kind="splti"),
            "steps.split.kind: Unknown step 'splti'. Did you mean 'split'?",
        ),
        # an unknown step setting is named, not silently ignored
        (
            lambda d: d["steps"]["split"].update(valid_sise=3),
            "steps.split.valid_sise: unknown setting",
        ),
        # a reference to a step that does not exist
        (lambda d: d["steps"]["split"]["inputs"].update(corpus="claen"), "Did you mean 'clean'?"),
        # an input role the step kind does not have
        (lambda d: d["steps"]["split"]["inputs"].update(extra="clean"), "has no input 'extra'"),
        # a required input missing
        (lambda d: d["steps"]["clean"].pop("inputs"), "steps.clean.inputs.corpus: Field required"),
        # a source setting of the wrong type, located under data
        (lambda d: d["data"]["bitext"].update(files=["a.en"]), "data.bitext.files"),
        # an unknown top-level key
        (lambda d: d.update(stpes={}), "stpes: unknown setting"),
        # a malformed direction
        (lambda d: d.update(directions=["english-japanese"]), "directions.0"),
        # reading an output the step does not have
        (
            lambda d: d["steps"]["split"]["inputs"].update(corpus="clean.kept"),
            "has no output 'kept'",
        ),
        # reading an output the step's settings leave unwritten (no n-best without nbest)
        (
            lambda d: d["steps"].update(
                hyp={
                    "kind": "translate",
                    "inputs": {"model": "split", "corpus": "split.test", "spm": "split"},
                    "src": "en",
                    "tgt": "ja",
                },
                pool={"kind": "concat", "inputs": {"n": "hyp.nbest"}},
            ),
            "step 'hyp' does not write output 'nbest' with its settings (it writes: hyp)",
        ),
    ],
)
def test_problem_is_reported_with_location(registry, mutate, expected):
    document = base_recipe()
    mutate(document)
    problems = problems_of(document, registry)
    assert any(expected in p for p in problems), problems


def test_every_problem_is_reported_at_once(registry):
    document = base_recipe()
    document["steps"]["clean"]["filters"][1]["max_ratio"] = 0
    document["steps"]["split"]["valid_size"] = -1
    document["steps"]["split"]["kind"] = "split"
    problems = problems_of(document, registry)
    assert len(problems) == 2
    assert problems[0].startswith("steps.clean.filters.1.max_ratio")
    assert problems[1].startswith("steps.split.valid_size")


def test_cycle_is_reported(registry):
    document = base_recipe()
    document["steps"]["clean"]["inputs"]["corpus"] = "split.train"
    problems = problems_of(document, registry)
    assert any("dependency cycle" in p for p in problems)


def test_profiles_deep_merge_and_set_overrides(registry):
    document = base_recipe()
    document["default_profile"] = "cpu"
    document["profiles"] = {
        "cpu": {"steps": {"split": {"valid_size": 5}}},
        "big": {"steps": {"split": {"valid_size": 50, "test_size": 50}}},
    }
    cpu = build_recipe(document, registry)
    assert cpu.profile == "cpu"
    assert cpu.steps["split"].plugin.config.valid_size == 5
    assert cpu.steps["split"].plugin.config.test_size == 10  # untouched keys survive the merge
    big = build_recipe(document, registry, profile="big", sets=["steps.split.test_size=7"])
    assert (
        big.steps["split"].plugin.config.valid_size,
        big.steps["split"].plugin.config.test_size,
    ) == (50, 7)
    assert "Did you mean 'big'?" in problems_of(document, registry, profile="bgi")[0]


def test_a_profile_extends_another(registry):
    """``extends: B`` is profile B with the profile's own keys merged on top, at any depth of
    the chain; a missing base or a cycle is a located error."""
    document = base_recipe()
    document["profiles"] = {
        "cpu": {"steps": {"split": {"valid_size": 5, "test_size": 6}, "clean": {"shard_size": 9}}},
        "smoke": {"extends": "cpu", "steps": {"split": {"valid_size": 2}}},
        "tiny": {"extends": "smoke", "steps": {"split": {"test_size": 1}}},
    }
    tiny = build_recipe(document, registry, profile="tiny")
    split = tiny.steps["split"].plugin.config
    assert (split.valid_size, split.test_size) == (2, 1)
    assert tiny.steps["clean"].plugin.config.shard_size == 9
    assert "extends" not in tiny.resolved
    document["profiles"]["smoke"]["extends"] = "cpo"
    (problem,) = problems_of(document, registry, profile="tiny")
    assert "profile 'smoke' extends unknown profile 'cpo'" in problem and "'cpu'" in problem
    document["profiles"]["cpu"]["extends"] = "tiny"
    document["profiles"]["smoke"]["extends"] = "cpu"
    (problem,) = problems_of(document, registry, profile="tiny")
    assert "cycle: tiny -> smoke -> cpu -> tiny" in problem


def plan_hash(document: dict, registry, step: str) -> str:
    from mtcore.recipe.plan import make_plan

    plan = make_plan(build_recipe(document, registry), registry)
    return next(p.hash for p in plan if p.id == step)


def test_not_identity_settings_of_components_stay_out_of_the_hash(registry, enja_files):
    """A thread count or batch size inside a filter chain cannot change outputs, so it cannot
    change the step's hash; a real setting next to it does."""
    document = base_recipe(enja_files)
    chain = document["steps"]["clean"]["filters"]
    chain.append({"name": "embedding", "min_similarity": 0.1})
    before = plan_hash(document, registry, "clean")
    chain[-1].update(threads=2, batch_size=16)
    assert plan_hash(document, registry, "clean") == before
    chain[-1]["min_similarity"] = 0.3
    assert plan_hash(document, registry, "clean") != before
    document["steps"]["score"] = {"kind": "score", "inputs": {"corpus": "clean"},
                                  "filters": [{"name": "embedding", "threads": 1}]}  # fmt: skip
    before = plan_hash(document, registry, "score")
    document["steps"]["score"]["filters"][0]["threads"] = 4
    assert plan_hash(document, registry, "score") == before


def test_set_null_removes_a_step(registry):
    document = base_recipe()
    recipe = build_recipe(document, registry, sets=["steps.split=null"])
    assert "split" not in recipe.steps


def test_vars_are_interpolated(registry):
    document = base_recipe({"en": "${root}/a.en", "ja": "${root}/a.ja"})
    document["vars"] = {"root": "/data"}
    recipe = build_recipe(document, registry)
    assert recipe.steps["bitext"].plugin.config.config["files"]["en"] == "/data/a.en"
    document["data"]["bitext"]["files"]["en"] = "${nope}/a.en"
    assert "unknown variable ${nope}" in problems_of(document, registry)[0]


def test_yaml_syntax_error_names_line(tmp_path, registry):
    path = tmp_path / "bad.yaml"
    path.write_text("name: x\nsteps:\n  a: [1, 2\n")
    with pytest.raises(RecipeError) as info:
        load_recipe(path, registry)
    assert str(path) in str(info.value)
    assert "line 4" in str(info.value) or "line 3" in str(info.value)


def test_custom_yaml_tags_are_refused(tmp_path, registry):
    path = tmp_path / "tag.yaml"
    path.write_text("name: !!python/object:os.system x\n")
    with pytest.raises(RecipeError):
        load_recipe(path, registry)


@pytest.mark.parametrize(
    ("base", "override", "expected"),
    [
        ({"a": {"b": 1, "c": 2}}, {"a": {"b": 3}}, {"a": {"b": 3, "c": 2}}),  # nested merge
        ({"a": [1, 2]}, {"a": [3]}, {"a": [3]}),  # lists replace, never concatenate
        ({"a": 1, "b": 2}, {"b": None}, {"a": 1}),  # null deletes
    ],
)
def test_deep_merge(base, override, expected):
    assert deep_merge(base, override) == expected


def test_set_paths_reach_list_items():
    doc = {"steps": {"clean": {"filters": [{"name": "a"}, {"name": "b", "x": 1}]}}}
    path, value = parse_set("steps.clean.filters.1.x=2.5")
    assert apply_set(doc, path, value)["steps"]["clean"]["filters"][1]["x"] == 2.5
    with pytest.raises(RecipeError, match="not an index"):
        apply_set(doc, *parse_set("steps.clean.filters.7.x=1"))


def test_unknown_component_plugin_of_a_step_is_reported(registry):
    document = base_recipe()
    document["steps"]["train"] = {
        "kind": "train",
        "inputs": {"data": "split"},
        "models": ["transformr_presets"],
    }
    problems = problems_of(document, registry)
    # the step's component setting locates it (issue 49: `models` is declared a components
    # field once, and checked as every component setting is)
    assert problems == [
        "steps.train.models.0.name: Unknown model 'transformr_presets'. Did you mean "
        "'transformer_presets'?"
    ], problems


def test_metric_settings_are_located(registry):
    document = base_recipe()
    document["steps"]["score"] = {
        "kind": "evaluate",
        "inputs": {"hyp": "split.test", "ref": "split.test"},
        "metrics": [{"name": "bleu", "tokenize": "chr"}, "blue"],
    }
    problems = problems_of(document, registry)
    assert any(p.startswith("steps.score.metrics.0.tokenize: Input should be") for p in problems)
    assert "steps.score.metrics.1.name: Unknown metric 'blue'. Did you mean 'bleu'?" in problems


def test_dangling_inputs_of_a_step_with_an_unknown_kind_are_reported(registry):
    document = base_recipe()
    document["steps"]["split"]["kind"] = "splt"
    document["steps"]["split"]["inputs"] = {"corpus": "claen"}
    problems = problems_of(document, registry)
    assert any("steps.split.kind" in p and "splt" in p for p in problems), problems
    assert any(
        "steps.split.inputs.corpus: unknown data or step 'claen'" in p and "'clean'" in p
        for p in problems
    ), problems


def test_a_recipe_that_is_not_utf8_is_a_recipe_error_naming_its_line(tmp_path):
    """A damaged multi-byte character (the trust fuzz found one in Yishu's recipe) is a clean
    RecipeError with the line and byte, not a UnicodeDecodeError."""
    path = tmp_path / "broken.yaml"
    path.write_bytes("name: x\n# §2.1\n# \u00a72.2\n".encode().replace(b"\xc2\xa72.2", b"\xc2x2.2"))
    with pytest.raises(RecipeError, match=r"line 3, byte 3: not UTF-8 \(byte 0xc2\)"):
        read_yaml(path)
