"""The CLI through click's CliRunner: exit codes and messages are interface."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from mtcore.cli.app import with_plugin_commands
from tests.support import ROOT
from tests.support.data import SHARED, clean_split_recipe

WMT22_ENJA = SHARED / "en-ja" / "wmt-conference+wmt22-news-systems" / "txt"
EXAMPLE = ROOT / "examples" / "mtcore-example-plugin"


def invoke(*args: str):
    return CliRunner().invoke(with_plugin_commands(), list(args), obj={})


def small_recipe(tmp_path: Path, files: dict[str, Path]) -> Path:
    filters = [{"name": "length", "max_length": 60}, {"name": "dedup"}]
    doc = clean_split_recipe("cli", files, filters, held_out=10)
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_validate_ok(tmp_path, enja_files):
    result = invoke("validate", str(small_recipe(tmp_path, enja_files)))
    assert result.exit_code == 0, result.output
    assert "valid (3 steps" in result.output


def test_validate_reports_every_problem_and_exits_1(tmp_path, enja_files):
    path = small_recipe(tmp_path, enja_files)
    result = invoke(
        "validate",
        str(path),
        "--set",
        "steps.clean.filters.0.name=lenght",
        "--set",
        "steps.split.valid_size=-3",
    )
    assert result.exit_code == 1
    assert result.output.startswith(f"Error: {path}: 2 problems")
    assert (
        "steps.clean.filters.0.name: Unknown filter 'lenght'. Did you mean 'length'?"
        in result.output
    )
    assert "steps.split.valid_size: Input should be greater than or equal to 0" in result.output
    assert "Traceback" not in result.output


def test_debug_shows_the_traceback(tmp_path, enja_files):
    path = small_recipe(tmp_path, enja_files)
    result = invoke("--debug", "validate", str(path), "--set", "steps.split.kind=nope")
    assert result.exit_code == 1
    assert result.exception is not None and "Unknown step 'nope'" in str(result.exception)


def test_missing_recipe_file(tmp_path):
    result = invoke("validate", str(tmp_path / "nope.yaml"))
    assert result.exit_code == 1
    assert "cannot read recipe" in result.output


def test_run_plan_and_until(tmp_path, enja_files):
    path = small_recipe(tmp_path, enja_files)
    work = tmp_path / "w"
    result = invoke("run", str(path), "-w", str(work), "--until", "clean", "-q")
    assert result.exit_code == 0, result.output
    assert "ran     bitext" in result.output and "split" not in result.output
    plan = invoke("plan", str(path), "-w", str(work))
    assert plan.exit_code == 0
    lines = plan.output.splitlines()
    assert lines[0].startswith("cached  bitext") and lines[2].startswith("to run  split")
    assert (work / "report.md").exists()
    assert list((work / "logs").glob("run-*.log"))


def test_plugins_lists_and_shows(tmp_path):
    result = invoke("plugins", "filters")
    assert result.exit_code == 0
    assert "length_ratio" in result.output
    shown = invoke("plugins", "filters", "--show", "length_ratio")
    assert "max_ratio" in shown.output and "largest longer/shorter ratio kept" in shown.output
    licences = invoke("plugins", "filters", "--show", "langid").output
    assert "licences of the models it runs:" in licences and "heliport: GPL-3.0" in licences
    assert "length_ratio" in shown.output and "licences" not in shown.output  # no model
    bad = invoke("plugins", "filters", "--show", "lenght")
    assert bad.exit_code == 1 and "Did you mean 'length'?" in bad.output
    kind = invoke("plugins", "filtres")
    assert kind.exit_code == 1 and "Did you mean 'filters'?" in kind.output


def test_plugins_and_validate_do_not_import_torch(tmp_path, enja_files):
    path = small_recipe(tmp_path, enja_files)
    code = (
        "import sys; from click.testing import CliRunner; from mtcore.cli.app import cli\n"
        "calls = (['plugins'], ['plugins', 'steps', '--show', 'spm'], ['validate', sys.argv[1]])\n"
        "for args in calls:\n"
        "    r = CliRunner().invoke(cli, args, obj={}); assert r.exit_code == 0, r.output\n"
        "bad = [m for m in ('torch', 'fairseq') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code, str(path)], check=True)


def test_evaluate_reproduces_official_wmt22_nt5_bleu():
    hyp = WMT22_ENJA / "system-outputs" / "generaltest2022.en-ja.hyp.NT5.ja"
    ref = WMT22_ENJA / "references" / "generaltest2022.en-ja.ref.A.ja"
    if not hyp.exists():
        pytest.skip("WMT22 outputs not available")
    result = invoke(
        "evaluate", "--hyp", str(hyp), "--ref", str(ref), "--lang", "ja", "--tokenize", "char"
    )
    assert result.exit_code == 0, result.output
    # The official WMT22 automatic score of NT5 En->Ja (char-tokenized BLEU) is 42.54.
    assert "BLEU = 42.54  (nrefs:1|case:mixed|eff:no|tok:char|smooth:exp" in result.output
    assert "chrF = " in result.output
    default = invoke(
        "evaluate", "--hyp", str(hyp), "--ref", str(ref), "--lang", "ja", "--metric", "bleu"
    )
    assert "tok:ja-mecab" in default.output


@pytest.mark.parametrize(
    ("hyp", "ref", "message"),
    [
        (b"a\nb\n", b"a\n", "has 1 lines but the hypotheses have 2"),  # length mismatch is an error
        (b"a\n\xff\n", b"a\nb\n", "hyp.txt:2: invalid UTF-8"),  # bad bytes name file and line
    ],
)
def test_evaluate_bad_input(tmp_path, hyp, ref, message):
    (tmp_path / "hyp.txt").write_bytes(hyp)
    (tmp_path / "ref.txt").write_bytes(ref)
    result = invoke(
        "evaluate",
        "--hyp",
        str(tmp_path / "hyp.txt"),
        "--ref",
        str(tmp_path / "ref.txt"),
        "--lang",
        "en",
    )
    assert result.exit_code == 1
    assert message in result.output


def test_example_selection_package_installs_and_runs(tmp_path, enja_files):
    """Issue 49 point 7: a separate package adds a step and a selector through pip alone; the
    core's selection step runs its selector under a budget, its step reports on the result, and
    both give what an independent computation over the same files gives."""
    import numpy as np

    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
         "--target", str(target), str(EXAMPLE.parent / "mtcore-example-selection")],
        check=True, capture_output=True,
    )  # fmt: skip
    path = small_recipe(tmp_path, enja_files)
    doc = yaml.safe_load(path.read_text())
    doc["steps"]["pick"] = {
        "kind": "selection",
        "inputs": {"corpus": "split.train", "domain": "split.test"},
        "selector": {"name": "vocab_overlap", "lang": "en"},
        "top_k": 25,
    }
    doc["steps"]["lengths"] = {"kind": "length_report", "inputs": {"corpus": "pick"}}
    path.write_text(yaml.safe_dump(doc))
    env = {**os.environ, "PYTHONPATH": str(target)}
    mtcore = [sys.executable, "-m", "mtcore.cli"]
    shown = subprocess.run(
        [*mtcore, "plugins", "selectors"], env=env, capture_output=True, text=True
    )
    assert "vocab_overlap" in shown.stdout and "mtcore-example-selection 0.1.0" in shown.stdout
    work = tmp_path / "w"
    run = subprocess.run([*mtcore, "run", str(path), "-w", str(work), "-q"], env=env,
                         capture_output=True, text=True)  # fmt: skip
    assert run.returncode == 0, run.stderr
    steps = work / "steps"

    def lines(step: str, output: str) -> list[str]:
        (found,) = steps.glob(f"{step}-*/{output}/*.en")
        return found.read_text(encoding="utf-8").split("\n")[:-1]

    train, domain = lines("split", "train"), lines("split", "test")
    vocabulary = {word for line in domain for word in line.lower().split()}
    scores = [
        sum(w in vocabulary for w in line.lower().split()) / len(line.split())
        if line.split() else float("nan")
        for line in train
    ]  # fmt: skip
    order = sorted(range(len(train)), key=lambda i: (np.isnan(scores[i]), -scores[i], i))
    kept = sorted(order[:25])
    assert lines("pick", "corpus") == [train[i] for i in kept]
    (report,) = steps.glob("lengths-*/report/lengths.json")
    profile = json.loads(report.read_text())["en"]
    assert profile["lines"] == 25
    assert profile["max"] == max(len(train[i]) for i in kept)
    assert profile["mean"] == round(sum(len(train[i]) for i in kept) / 25, 3)


def test_example_plugin_installs_and_plugs_in(tmp_path, enja_files):
    """A separate package adds a filter a recipe can use and a hook, through pip alone."""
    target = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(target),
            str(EXAMPLE),
        ],
        check=True,
        capture_output=True,
    )
    path = small_recipe(tmp_path, enja_files)
    doc = yaml.safe_load(path.read_text())
    doc["steps"]["clean"]["filters"].append({"name": "number_mismatch", "min_digits": 2})
    path.write_text(yaml.safe_dump(doc))
    env = {
        **os.environ,
        "PYTHONPATH": str(target),
        "MTCORE_EXAMPLE_LOG": str(tmp_path / "hook.log"),
    }
    mtcore = [sys.executable, "-m", "mtcore.cli"]
    shown = subprocess.run([*mtcore, "plugins", "filters"], env=env, capture_output=True, text=True)
    assert "number_mismatch        mtcore-example-plugin 0.1.0" in shown.stdout
    hello = subprocess.run([*mtcore, "example-hello"], env=env, capture_output=True, text=True)
    assert hello.stdout.strip() == "hello from mtcore-example-plugin"
    run = subprocess.run(
        [*mtcore, "run", str(path), "-w", str(tmp_path / "w"), "-q"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr
    assert [line.split("\t")[0] for line in (tmp_path / "hook.log").read_text().splitlines()] == [
        "bitext",
        "clean",
        "split",
    ]
    manifest = next((tmp_path / "w" / "steps").glob("clean-*/manifest.json")).read_text()
    assert '"dropped.number_mismatch"' in manifest
    # Without the package on the path, the same recipe names an unknown filter.
    bare = subprocess.run([*mtcore, "validate", str(path)], capture_output=True, text=True)
    assert bare.returncode == 1 and "Unknown filter 'number_mismatch'" in bare.stderr
