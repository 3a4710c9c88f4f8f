"""``mtcore translate``'s inference paths, stage choice, errors and input reading, without a run
(the runs' byte-for-byte equivalence is checked in tests/e2e/test_recipes.py)."""

from __future__ import annotations

import copy
import subprocess
import sys

import pytest

from mtcore.contracts.errors import DataError, MtcoreError
from mtcore.contracts.stats import Stats
from mtcore.recipe.load import build_recipe, load_recipe, read_yaml
from mtcore.system.inference import (
    REPAIR,
    STRICT_KEEP,
    Translator,
    choose_stage,
    inference_path,
    read_lines,
    source_language,
    stages,
)
from tests.support import ROOT

RECIPES = ROOT / "recipes"
NT5 = RECIPES / "nt5.yaml"


def load(registry, name: str, document: dict | None = None):
    path = RECIPES / f"{name}.yaml"
    return build_recipe(document or read_yaml(path), registry, source=str(path))


@pytest.mark.parametrize("name", ["nt5", "yishu", "xiaomi", "hwtsc"])
def test_every_stage_of_every_recipe_has_a_path_from_its_test_set(registry, name):
    """The path ends at the evaluated output, starts at a step that reads the test set, and
    holds only steps that keep lines one for one; models and training data are not on it."""
    recipe = load(registry, name)
    found = stages(recipe)
    assert found
    for stage in found:
        path = inference_path(recipe, stage)
        assert path[-1] == stage.hyp[0], stage
        kinds = {recipe.steps[s].kind for s in path}
        assert kinds <= {"translate", "normalize", "truecase", "rerank", "augment",
                         "pool_nbest"}, kinds  # fmt: skip
        first = recipe.steps[path[0]]
        assert stage.test[0] in {ref.split(".")[0] for ref in first.inputs.values()}, stage


def test_nt5_paths_as_the_recipe_builds_them(registry):
    recipe = load(registry, "nt5")
    rerank = choose_stage(recipe, "en-ja", "rerank")
    assert (rerank.name, rerank.evaluate) == ("rerank", "eval_rerank_enja")
    assert inference_path(recipe, rerank) == [
        "tc_test",
        "ens_test_enja",
        "rerank_enja",
        "post_rerank_enja",
    ]
    # Table 5 (l), the submitted system and the default: the news-only ensemble, no reranking
    submitted = choose_stage(recipe, "en-ja", None)
    assert submitted == choose_stage(recipe, "en-ja", "ensnews")
    assert inference_path(recipe, submitted) == [
        "tc_test",
        "ens_news_test_enja",
        "post_ensnews_enja",
    ]
    baseline = choose_stage(recipe, "jaen", "baseline")
    assert inference_path(recipe, baseline) == [
        "tc_test",
        "hyp_baseline_jaen",
        "post_baseline_jaen",
    ]


def test_xiaomi_path_leaves_out_what_the_test_set_only_filters(registry):
    """Xiaomi's cleaning reads the test set (to drop overlapping pairs), so training descends
    from it; the path follows line-aligned inputs only, so no model is retrained."""
    recipe = load(registry, "xiaomi")
    path = inference_path(recipe, choose_stage(recipe, "zhja", None))
    # §3.4: the L2R and R2L ensembles' n-best lists pooled before reranking
    assert path == ["prep_test", "test_ensemble_zhja", "test_ensemble_r2l_zhja",
                    "pool_test_zhja", "rerank_zhja", "post_zhja", "detrue_zhja"]  # fmt: skip


def test_xiaomi_constrained_system_uses_the_organisers_data_only(registry):
    """Table 2's "#" (paper profile): D3's L2R and R2L ensembles' pooled n-best, reranked and
    post-processed; nothing upstream of it reads Common Crawl (the constrained condition)."""
    path = RECIPES / "xiaomi.yaml"
    recipe = build_recipe(read_yaml(path), registry, "paper", source=str(path))
    stage = choose_stage(recipe, "zhja", "constrained")
    assert inference_path(recipe, stage) == [
        "prep_test", "test_d3_ensemble_zhja", "test_d3_ensemble_r2l_zhja", "pool_d3_test_zhja",
        "rerank_constrained_zhja", "post_constrained_zhja", "detrue_constrained_zhja",
    ]  # fmt: skip
    assert choose_stage(recipe, "zhja", None).name == "post"  # "*" stays the served one
    assert recipe.head.stage_notes["constrained"].startswith("Table 2's #")
    seen: set[str] = set()
    todo = [stage.evaluate]
    while todo:
        step = todo.pop()
        if step not in seen:
            seen.add(step)
            todo += [ref.split(".")[0] for ref in recipe.steps[step].inputs.values()]
    assert "commoncrawl_ja" in recipe.steps and "extbt_zhja" in recipe.steps
    assert not {s for s in seen if "commoncrawl" in s or "mono" in s or "d4" in s}, seen
    assert {"members_d3_r2l_zhja", "members_d3_l2r_jazh", "lm_d1_ja"} <= seen


def test_unknown_direction_and_stage_list_the_valid_ones(registry):
    recipe = load(registry, "nt5")
    with pytest.raises(MtcoreError, match="no direction 'de-en'; valid: enja, jaen"):
        choose_stage(recipe, "de-en", None)
    with pytest.raises(
        MtcoreError,
        match=r"no stage 'final'; valid .*: baseline, bt, ftnews, ft, ensnews, ensemble, ensall, "
        r"rerank$",
    ):
        choose_stage(recipe, "enja", "final")
    with pytest.raises(MtcoreError, match="give --direction, one of: enja, jaen"):
        choose_stage(recipe, None, None)


def test_a_step_that_does_not_declare_its_stream_breaks_the_path(registry):
    """A concat between the test set and the model is not known to keep lines one for one."""
    document = copy.deepcopy(read_yaml(NT5))
    document["steps"]["tc_test_copy"] = {"kind": "concat", "inputs": {"a": "tc_test"}}
    document["steps"]["hyp_baseline_enja"]["inputs"]["corpus"] = "tc_test_copy"
    recipe = load(registry, "nt5", document)
    with pytest.raises(MtcoreError, match="does not come line by line from its test set test"):
        inference_path(recipe, choose_stage(recipe, "enja", "baseline"))


def test_an_unfinished_run_names_the_missing_steps_and_the_command(registry, tmp_path):
    recipe = load(registry, "nt5")
    with pytest.raises(MtcoreError) as caught:
        Translator.from_run(
            recipe, registry, tmp_path, "en-ja", "baseline", build_hint="mtcore run X"
        )
    message = str(caught.value)
    assert "needs steps that have not finished" in message
    listed = message.split("finished in ")[1].split(": ", 1)[1].split(";")[0].split(", ")
    assert {"test", "truecaser", "init_enja", "spm", "hyp_baseline_enja"} <= set(listed)
    assert message.endswith("build them with: mtcore run X --until eval_baseline_enja")


def test_the_command_line_says_the_same(tmp_path):
    command = [sys.executable, "-m", "mtcore.cli", "translate", str(NT5), "-w", str(tmp_path)]
    done = subprocess.run([*command, "-d", "ja-en"], input=b"x\n", capture_output=True)
    assert done.returncode == 1
    assert b"Error: stage 'ensnews' (jaen) needs steps that have not finished" in done.stderr
    assert f"mtcore run {NT5} -w {tmp_path} --until eval_ensnews_jaen".encode() in done.stderr
    listed = subprocess.run([*command, "--list-stages"], capture_output=True, text=True)
    assert listed.returncode == 0
    lines = listed.stdout.splitlines()
    assert "enja\tbaseline\t(scored by eval_baseline_enja)" in lines
    assert "jaen\tensnews\t(scored by eval_ensnews_jaen)\tsubmitted" in lines
    assert (
        "enja\trerank\t(scored by eval_rerank_enja)\tTable 5 (o): tried, not submitted (§6)"
        in lines
    )


SUBMITTED = {
    "nt5": {"enja": "ensnews", "jaen": "ensnews"},  # Table 5 (l)
    "yishu": {"zhen": "rerank", "enzh": "rerank"},  # §1: the LM-reranked ensemble
    "xiaomi": {"zhja": "post", "jazh": "post"},  # Table 2 "*": reranked, post-processed
    # Tables 2-8: every pair's ensemble (Uk<->En's, not the KD student after it)
    "hwtsc": dict.fromkeys(
        ["enuk", "uken", "enliv", "liven", "enzh", "zhen", "enru", "ruen", "enhr", "csuk", "ukcs"],
        "ensemble",
    ),
}


@pytest.mark.parametrize("name", sorted(SUBMITTED))
def test_the_paper_graph_serves_the_submitted_stage_of_every_direction(registry, name):
    """The rehearsal profile (the paper graph at toy sizes): each direction's default stage is
    the paper's submission, and the command names it for an unbuilt run."""
    path = RECIPES / f"{name}.yaml"
    recipe = build_recipe(read_yaml(path), registry, "rehearsal", source=str(path))
    directions = {found.direction for found in stages(recipe)}
    assert directions == set(SUBMITTED[name])
    for direction, stage in SUBMITTED[name].items():
        assert choose_stage(recipe, direction, None).name == stage, direction


@pytest.mark.parametrize("name", sorted(SUBMITTED))
def test_the_default_profile_serves_the_submitted_stage(registry, name):
    """Where the cpu graph has the submitted stage it is the default; HW-TSC's En<->Ru stand-in
    for Liv<->En names none and serves its last (only) stage."""
    recipe = load(registry, name)
    for direction in {found.direction for found in stages(recipe)}:
        named = [found.name for found in stages(recipe) if found.direction == direction]
        wanted = SUBMITTED[name][direction]
        expected = wanted if wanted in named else named[-1]
        assert choose_stage(recipe, direction, None).name == expected, direction
        assert (expected == wanted) == (direction != "enru" and direction != "ruen")
    if name == "hwtsc":  # the KD student comes after the submission, labelled
        assert [s.name for s in stages(recipe) if s.direction == "uken"][-1] == "kd"


def test_without_submitted_the_last_stage_is_served(registry):
    document = copy.deepcopy(read_yaml(NT5))
    del document["submitted"]
    recipe = load(registry, "nt5", document)
    assert choose_stage(recipe, "en-ja", None).name == "rerank"


@pytest.mark.parametrize(
    ("langs", "direction", "source"),
    [(("en", "ja"), "enja", "en"), (("en", "ja"), "jaen", "ja"), (("en", "ru"), "enru", "en")],
)
def test_source_language_of_a_direction(langs, direction, source):
    assert source_language(langs, direction) == source


def test_source_language_that_does_not_fit_is_an_error():
    with pytest.raises(MtcoreError, match="does not match the test set's languages"):
        source_language(("en", "ja"), "zhen")


def test_input_lines_keep_their_count_and_bad_bytes_name_the_line(tmp_path):
    """Raw crawled input: Japanese without spaces, a CR LF line end and a U+2028 inside a line
    are repaired and counted; an empty line stays a line; invalid UTF-8 stops at its line (or
    is replaced with --repair), named as the user gave the input."""
    path = tmp_path / "in.txt"
    raw = "東京都は２０２６年に\r\n".encode() + b"\n" + "A\u2028B\n".encode() + b"bad \xff byte\n"
    path.write_bytes(raw)
    with pytest.raises(DataError, match=r"<stdin>:4: invalid UTF-8 at byte 4"):
        read_lines(path, STRICT_KEEP, Stats(), shown="<stdin>")
    stats = Stats()
    lines = read_lines(path, REPAIR, stats)
    assert lines == ["東京都は２０２６年に", "", "A B", "bad \ufffd byte"]
    assert stats.as_dict() == {
        "input.crlf_stripped": 1,
        "input.inner_breaks_replaced": 1,
        "input.invalid_utf8_replaced": 1,
    }


PAPER_SETS = {"yishu": ["vars.ccmt_dir=/nonexistent/ccmt"]}  # registration-only, not read here


@pytest.mark.parametrize("profile", ["paper", "rehearsal"])
@pytest.mark.parametrize("name", ["nt5", "yishu", "xiaomi", "hwtsc"])
def test_translate_serves_the_submitted_stage_of_the_paper_graphs(registry, name, profile):
    """Issue 69: with no --stage, every direction a paper profile (and its rehearsal) submits is
    served from that stage, and its inference path resolves; a direction it does not name is
    served from its last stage."""
    recipe = load_recipe(RECIPES / f"{name}.yaml", registry, profile, PAPER_SETS.get(name, []))
    submitted = {k.replace("-", ""): v for k, v in recipe.head.submitted.items()}
    directions = list(dict.fromkeys(s.direction for s in stages(recipe)))
    assert submitted, f"{name} ({profile}) names no submitted stage"
    for direction in directions:
        chosen = choose_stage(recipe, direction, None)
        named = [s.name for s in stages(recipe) if s.direction == direction]
        assert chosen.name == submitted.get(direction, named[-1]), (direction, named)
        assert inference_path(recipe, chosen)[-1] == chosen.hyp[0]
    assert set(submitted) <= set(directions), (submitted, directions)
