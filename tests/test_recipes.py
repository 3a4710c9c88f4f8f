"""Every shipped recipe validates at every profile, without network or ../shared; the default
profile of each runs end to end (slow: minutes each on 2 CPU cores)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from mtcore.recipe import build_recipe, read_yaml

RECIPES = sorted((Path(__file__).resolve().parents[1] / "recipes").glob("*.yaml"))
CASES = [
    (path, profile)
    for path in RECIPES
    for profile in [None, *(read_yaml(path).get("profiles") or {})]
]
SENTINEL = "/data-root-sentinel"
EVAL_ID = re.compile(r"^eval_(?P<stage>[a-z0-9]+)_(?P<direction>[a-z]+)$")


@pytest.mark.parametrize(("path", "profile"), CASES, ids=[f"{p.stem}-{prof}" for p, prof in CASES])
def test_recipe_validates(registry, path, profile):
    recipe = build_recipe(read_yaml(path), registry, profile=profile, source=str(path))
    assert recipe.steps
    evals = [step_id for step_id, spec in recipe.steps.items() if spec.kind == "evaluate"]
    assert evals and all(EVAL_ID.match(step_id) for step_id in evals), evals
    stages = {EVAL_ID.match(step_id)["stage"] for step_id in evals}
    assert {"baseline", "ensemble"} <= stages, stages


@pytest.mark.parametrize("path", RECIPES, ids=[p.stem for p in RECIPES])
def test_only_the_small_profile_reads_shared_data(registry, path):
    """The data root is a variable of the small profile; no other profile reads ../shared."""
    document = read_yaml(path)
    for profile in [None, *(document.get("profiles") or {})]:
        sets = [f"vars.data_root={SENTINEL}"] if profile == "small" else []
        recipe = build_recipe(document, registry, profile=profile, sets=sets, source=str(path))
        configs = " ".join(str(spec.plugin.config) for spec in recipe.steps.values())
        assert "shared/data" not in configs, profile
        assert (SENTINEL in configs) == (profile == "small"), profile


@pytest.mark.parametrize("path", RECIPES, ids=[p.stem for p in RECIPES])
def test_default_profile_is_offline(registry, path):
    recipe = build_recipe(read_yaml(path), registry, source=str(path))
    sources = {spec.plugin.config.source for spec in recipe.steps.values() if spec.kind == "fetch"}
    assert sources <= {"gettext", "local"} and "gettext" in sources


@pytest.mark.slow
@pytest.mark.parametrize("path", RECIPES, ids=[p.stem for p in RECIPES])
def test_default_profile_runs_end_to_end(registry, path, tmp_path):
    """``mtcore run recipes/<name>.yaml`` as a user runs it: every step completes, every stage
    is scored with BLEU and chrF, and the test-set translations are mostly non-empty."""
    work = tmp_path / "work"
    done = subprocess.run(
        [sys.executable, "-m", "mtcore.cli_entry", "run", str(path), "-w", str(work), "-q"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    recipe = build_recipe(read_yaml(path), registry, source=str(path))
    evals = sorted(step_id for step_id, spec in recipe.steps.items() if spec.kind == "evaluate")
    for step_id in evals:
        (manifest_path,) = work.glob(f"steps/{step_id}-*/manifest.json")
        metrics = json.loads(manifest_path.read_text())["metrics"]
        assert {"BLEU", "chrF"} <= set(metrics), (step_id, sorted(metrics))
        hyp_step = recipe.steps[step_id].inputs["hyp"].split(".")[0]
        hyp_dir = next(work.glob(f"steps/{hyp_step}-*"))
        lines = [
            line
            for corpus in hyp_dir.rglob("*")
            if corpus.is_file() and corpus.suffix == "." + step_id.rsplit("_", 1)[1][2:]
            for line in corpus.read_text(encoding="utf-8").splitlines()
        ]
        assert lines and sum(bool(line.strip()) for line in lines) > 0.8 * len(lines), step_id
    report = (work / "report.md").read_text(encoding="utf-8")
    assert "## Scores by stage" in report
