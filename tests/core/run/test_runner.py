"""Planner and runner: caching, partial reruns, shared workdirs, resume after kill -9."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mtcore.contracts.hooks import hookimpl
from mtcore.recipe.load import build_recipe
from mtcore.recipe.plan import make_plan
from mtcore.report.hooks import make_plugin_manager
from mtcore.run.runner import Runner
from tests.support.data import clean_split_recipe, real_slice


def recipe_doc(files: dict[str, Path], **split) -> dict:
    filters = [
        {"name": "length", "max_length": 80},
        {"name": "dedup"},
        {"name": "length_ratio", "max_ratio": 3},
    ]
    document = clean_split_recipe("runner", files, filters, held_out=20)
    document["steps"]["clean"]["shard_size"] = 100
    document["steps"]["split"].update(split)
    return document


def outputs(workdir: Path) -> dict[str, bytes]:
    """Every file under the completed step directories except manifests (they hold timings)."""
    steps = workdir / "steps"
    return {
        p.relative_to(steps).as_posix(): p.read_bytes()
        for p in sorted(steps.rglob("*"))
        if p.is_file() and ".partial" not in p.parts and p.name != "manifest.json"
    }


def run(doc: dict, registry, workdir: Path, **kwargs):
    recipe = build_recipe(doc, registry, **kwargs)
    hooks = make_plugin_manager(load_entrypoints=False)  # the report writer, as the CLI's
    return Runner(recipe, registry, workdir, hooks, show_progress=False).run()


def test_second_run_is_all_cached(tmp_path, registry, enja_files):
    doc = recipe_doc(enja_files)
    first = run(doc, registry, tmp_path / "w")
    assert [r.status for r in first.results] == ["ran", "ran", "ran"]
    before = outputs(tmp_path / "w")
    second = run(doc, registry, tmp_path / "w")
    assert [r.status for r in second.results] == ["cached", "cached", "cached"]
    assert outputs(tmp_path / "w") == before
    manifest = first.manifest("clean")
    assert manifest["counts"]["pairs_in"] == 400
    assert (
        manifest["counts"]["pairs_out"]
        + sum(v for k, v in manifest["counts"].items() if k.startswith("dropped."))
        == 400
    )
    report = (tmp_path / "w" / "report.md").read_text()
    assert "| clean | clean | cached |" in report
    assert f"pairs_in=400; pairs_out={manifest['counts']['pairs_out']}; dropped: length" in report


def test_changed_step_reruns_only_itself_and_dependents(tmp_path, registry, enja_files):
    doc = recipe_doc(enja_files)
    run(doc, registry, tmp_path / "w")
    doc["steps"]["clean"]["filters"][0]["max_length"] = 40
    result = run(doc, registry, tmp_path / "w")
    assert [r.status for r in result.results] == ["cached", "ran", "ran"]


def test_workers_do_not_change_the_hash_or_the_output(tmp_path, registry, enja_files):
    one = run(recipe_doc(enja_files), registry, tmp_path / "a")
    doc = recipe_doc(enja_files)
    doc["executor"]["workers"] = 2
    two = run(doc, registry, tmp_path / "b")
    assert [r.planned.hash for r in one.results] == [r.planned.hash for r in two.results]
    assert outputs(tmp_path / "a") == outputs(tmp_path / "b")


def test_a_step_rerun_to_the_same_bytes_leaves_its_dependents_cached(
    tmp_path, registry, enja_files, monkeypatch
):
    """Early cutoff (mtcore.run.cache): a new version of the ``length`` filter changes the clean
    step's identity and so split's plan hash; clean runs again and writes the same bytes, so
    split's content key is unchanged and split reuses its output (hard links, a manifest of its
    own) instead of running. A change that does change clean's output still runs split."""
    doc = recipe_doc(enja_files)
    first = run(doc, registry, tmp_path / "w")
    old = first.path("split")
    old_manifest = (old / "manifest.json").read_bytes()
    real = registry.version
    bumped = {("filters", "length")}
    monkeypatch.setattr(
        registry, "version", lambda k, n: real(k, n) + (".post1" if (k, n) in bumped else "")
    )
    second = run(doc, registry, tmp_path / "w")
    assert [r.status for r in second.results] == ["cached", "ran", "cached"]
    assert second.path("clean") != first.path("clean")
    new = second.path("split")
    assert new != old
    manifest = second.manifest("split")
    assert manifest == json.loads((new / "manifest.json").read_text())
    assert manifest["reused_from"] == old.name
    assert manifest["hash"] == new.name.rsplit("-", 1)[1]
    assert {i["hash"] for i in manifest["inputs"].values()} == {second.path("clean").name[-12:]}
    assert manifest["outputs"] == first.manifest("split")["outputs"]
    assert (old / "manifest.json").read_bytes() == old_manifest  # written anew, not through a link
    files = sorted(p.relative_to(old) for p in old.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(new) for p in new.rglob("*") if p.is_file())
    for rel in files:
        if rel.name != "manifest.json":
            assert (old / rel).samefile(new / rel)
    assert not any((tmp_path / "w" / "steps" / ".partial").iterdir())
    third = run(doc, registry, tmp_path / "w")
    assert [r.status for r in third.results] == ["cached", "cached", "cached"]
    doc["steps"]["clean"]["filters"][0]["max_length"] = 40
    changed = run(doc, registry, tmp_path / "w")
    assert [r.status for r in changed.results] == ["cached", "ran", "ran"]
    assert "reused_from" not in changed.manifest("split")


def test_recipes_sharing_a_workdir_share_identical_steps(tmp_path, registry, enja_files):
    run(recipe_doc(enja_files), registry, tmp_path / "w")
    other = recipe_doc(enja_files, seed=7)
    other["name"] = "other"
    result = run(other, registry, tmp_path / "w")
    assert [r.status for r in result.results] == ["cached", "cached", "ran"]


def test_source_change_invalidates_the_fetch(tmp_path, registry, enja_files):
    doc = recipe_doc(enja_files)
    run(doc, registry, tmp_path / "w")
    with (
        open(enja_files["en"], "a", encoding="utf-8") as a,
        open(enja_files["ja"], "a", encoding="utf-8") as b,
    ):
        a.write("one more line for you\n")  # a pair the clean step keeps: split runs too
        b.write("あなたにもう一行あります\n")
    result = run(doc, registry, tmp_path / "w")
    assert [r.status for r in result.results] == ["ran", "ran", "ran"]
    assert result.manifest("bitext")["counts"]["pairs_out"] == 401


def test_unchanged_input_is_linked_and_a_changed_link_runs_again(tmp_path, registry, enja_files):
    """Clean input files become the fetch step's output without a copy (here a hard link,
    hashed from the file-hash memory). Edited in place, then put back as a new file with the
    old bytes (a checkout), the source has its old fingerprint again while the cached output,
    the same inode as the edited file, changed: the step runs again."""
    doc = recipe_doc(enja_files)
    first = run(doc, registry, tmp_path / "w")
    (fetched,) = (tmp_path / "w" / "steps").glob("bitext-*/corpus/corpus.en")
    original = enja_files["en"].read_bytes()
    assert fetched.read_bytes() == original
    if fetched.stat().st_ino != enja_files["en"].stat().st_ino:
        pytest.skip("the file system cloned the file instead of linking it")
    assert first.manifest("bitext")["linked"]["corpus/corpus.en"][0] == len(original)
    with open(enja_files["en"], "r+b") as handle:
        handle.write(b"X")
    enja_files["en"].unlink()
    enja_files["en"].write_bytes(original)  # a new inode with the old bytes
    result = run(doc, registry, tmp_path / "w")
    assert [r.status for r in result.results] == ["ran", "cached", "cached"]
    (fetched,) = (tmp_path / "w" / "steps").glob("bitext-*/corpus/corpus.en")
    assert fetched.read_bytes() == original


def test_until_stops_early(tmp_path, registry, enja_files):
    recipe = build_recipe(recipe_doc(enja_files), registry)
    assert [p.id for p in make_plan(recipe, registry, until="clean")] == ["bitext", "clean"]
    result = Runner(recipe, registry, tmp_path / "w", show_progress=False).run(until="clean")
    assert [r.planned.id for r in result.results] == ["bitext", "clean"]


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    @hookimpl
    def mtcore_step_started(self, step_id: str, kind: str, step_hash: str) -> None:
        self.events.append(("started", step_id))

    @hookimpl
    def mtcore_step_finished(self, step_id: str, kind: str, manifest: dict) -> None:
        self.events.append(("finished", step_id))


def test_lifecycle_hooks_fire_for_steps_that_run(tmp_path, registry, enja_files):
    pm = make_plugin_manager(load_entrypoints=False)
    recorder = Recorder()
    pm.register(recorder)
    recipe = build_recipe(recipe_doc(enja_files), registry)
    Runner(recipe, registry, tmp_path / "w", hooks=pm, show_progress=False).run(until="clean")
    assert recorder.events == [
        ("started", "bitext"),
        ("finished", "bitext"),
        ("started", "clean"),
        ("finished", "clean"),
    ]
    recorder.events.clear()
    Runner(recipe, registry, tmp_path / "w", hooks=pm, show_progress=False).run()
    assert recorder.events == [
        ("started", "split"),
        ("finished", "split"),
    ]  # cached steps are quiet


class Finished:
    def __init__(self) -> None:
        self.runs: list[tuple[str, list[str], str | None]] = []

    @hookimpl
    def mtcore_run_finished(self, recipe, result, label) -> None:
        self.runs.append((recipe.name, [r.status for r in result.results], label))


def test_the_report_is_written_by_a_hook_on_the_end_of_a_run(tmp_path, registry, enja_files):
    """Issue 49 point 5: the runner returns its result and announces the end of the run; the
    report is the built-in hook's work. Unregistered, the run writes no report; another hook
    sees the same result in plan order."""
    from mtcore.report.hooks import REPORT

    recipe = build_recipe(recipe_doc(enja_files), registry)
    pm = make_plugin_manager(load_entrypoints=False)
    pm.unregister(name=REPORT)
    finished = Finished()
    pm.register(finished)
    work = tmp_path / "w"
    result = Runner(recipe, registry, work, hooks=pm, show_progress=False).run(until="clean")
    assert [r.planned.id for r in result.results] == ["bitext", "clean"]
    assert finished.runs == [(recipe.name, ["ran", "ran"], None)]
    assert not list(work.glob("report*.md"))
    # a runner given no manager announces the end to no one: no report (the run layer
    # imports nothing that presents a run); given the CLI's manager, the report is written
    Runner(recipe, registry, work, show_progress=False, label="v1").run(until="clean")
    assert not list(work.glob("report*"))
    pm = make_plugin_manager(load_entrypoints=False)
    Runner(recipe, registry, work, pm, show_progress=False, label="v2").run(until="clean")
    assert (work / "report.v2.md").exists()
    assert "clean" in (work / "report.v2.md").read_text(encoding="utf-8")


def _write_big_recipe(tmp_path: Path, files: dict[str, Path]) -> Path:
    import yaml

    doc = recipe_doc(files)
    doc["steps"]["clean"]["shard_size"] = 500
    path = tmp_path / "big.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.mark.parametrize("kill_after", [0.8, 1.6, 2.4])
def test_kill_9_then_rerun_gives_identical_outputs(tmp_path, registry, kill_after):
    files = real_slice(tmp_path / "data", "train", 30_000)
    recipe = _write_big_recipe(tmp_path, files)
    mtcore = [sys.executable, "-m", "mtcore.cli"]
    subprocess.run(
        [*mtcore, "run", str(recipe), "-w", str(tmp_path / "ref"), "-q"],
        check=True,
        capture_output=True,
    )
    proc = subprocess.Popen(
        [*mtcore, "run", str(recipe), "-w", str(tmp_path / "w"), "-q"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(kill_after)
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    subprocess.run(
        [*mtcore, "run", str(recipe), "-w", str(tmp_path / "w"), "-q"],
        check=True,
        capture_output=True,
    )
    assert outputs(tmp_path / "w") == outputs(tmp_path / "ref")
    assert not any((tmp_path / "w" / "steps" / ".partial").iterdir())


def test_settings_marked_not_identity_leave_the_hash_alone(registry):
    doc = {
        "name": "ident",
        "data": {
            "web": {
                "source": "url",
                "tsv": {"url": "http://127.0.0.1:1/c.tsv"},
                "columns": {"en": 0, "ja": 1},
            }
        },
    }
    first = make_plan(build_recipe(doc, registry), registry)[0].hash
    doc["data"]["web"].update(cache_dir="/elsewhere", timeout=5, retries=0)
    assert make_plan(build_recipe(doc, registry), registry)[0].hash == first
    doc["data"]["web"]["columns"] = {"en": 1, "ja": 0}
    assert make_plan(build_recipe(doc, registry), registry)[0].hash != first


def test_hash_markers_are_honoured_by_identity_dict_alone():
    """Issue 49 point 3: ``HASHED_WHEN_SET`` (a later setting, hashed only once set) and
    ``ignored_when`` (a setting the output ignores under another's value) are read by
    ``identity_dict`` at every depth; no step pops keys by hand."""
    from pydantic import Field

    from mtcore.contracts.identity import (
        HASHED_WHEN_SET,
        NOT_IDENTITY,
        identity_dict,
        ignored_when,
    )
    from mtcore.contracts.plugin import PluginConfig

    class Inner(PluginConfig):
        late: int | None = Field(None, json_schema_extra=HASHED_WHEN_SET)
        kept: int = 1

    class Outer(PluginConfig):
        backend: str = Field("a", json_schema_extra=HASHED_WHEN_SET)
        precision: str = Field("fp32", json_schema_extra=ignored_when(backend="a"))
        cache: str = Field("/tmp", json_schema_extra=NOT_IDENTITY)
        inner: Inner = Field(default_factory=Inner)

    assert identity_dict(Outer()) == {"inner": {"kept": 1}}
    assert identity_dict(Outer(precision="int8")) == {"inner": {"kept": 1}}
    assert identity_dict(Outer(backend="b")) == {
        "backend": "b",
        "precision": "fp32",
        "inner": {"kept": 1},
    }
    assert identity_dict(Outer(inner=Inner(late=3)))["inner"] == {"late": 3, "kept": 1}


def test_started_processes_wait_passively_unless_told_otherwise(tmp_path, monkeypatch):
    """OpenMP's spinning wait collapses on an oversubscribed machine: processes a step starts
    get OMP_WAIT_POLICY=PASSIVE, and a value the user set is kept."""
    from mtcore.exec.process import run_logged

    show = [sys.executable, "-c", "import os; print(os.environ['OMP_WAIT_POLICY'])"]
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    run_logged(show, tmp_path / "a.log", "show")
    assert (tmp_path / "a.log").read_text().splitlines()[-1] == "PASSIVE"
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    run_logged(show, tmp_path / "b.log", "show")
    assert (tmp_path / "b.log").read_text().splitlines()[-1] == "ACTIVE"


def test_a_data_entry_keeps_its_first_max_pairs(tmp_path, registry, enja_files):
    """``max_pairs: N`` on a data entry keeps the first N pairs, counts the cut, and is part of
    the fetch step's hash; an entry without it hashes as before the setting existed."""
    doc = recipe_doc(enja_files)
    plain = {p.id: p.hash for p in make_plan(build_recipe(doc, registry), registry)}
    doc["data"]["bitext"]["max_pairs"] = 150
    result = run(doc, registry, tmp_path / "w")
    counts = result.manifest("bitext")["counts"]
    assert counts["pairs_out"] == 150 and counts["max_pairs_reached"] == 1
    fetched = result.path("bitext") / "corpus"
    first = enja_files["en"].read_text(encoding="utf-8").splitlines(keepends=True)[:150]
    assert (fetched / "corpus.en").read_text(encoding="utf-8") == "".join(first)
    assert result.manifest("clean")["counts"]["pairs_in"] == 150
    assert result.results[0].planned.hash != plain["bitext"]
    del doc["data"]["bitext"]["max_pairs"]
    assert make_plan(build_recipe(doc, registry), registry)[0].hash == plain["bitext"]


def test_a_live_lock_names_its_pid_and_a_dead_one_is_taken_over(
    tmp_path, registry, enja_files, caplog
):
    from mtcore.contracts.errors import MtcoreError

    work = tmp_path / "w"
    work.mkdir()
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, sys, time\n"
         "h = open(sys.argv[1], 'a+'); fcntl.flock(h, fcntl.LOCK_EX)\n"
         "h.write(str(__import__('os').getpid())); h.flush(); print('locked', flush=True)\n"
         "time.sleep(60)", str(work / ".lock")],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        with pytest.raises(
            MtcoreError, match=f"in use by another mtcore run \\(pid {holder.pid}\\)"
        ):
            run(recipe_doc(enja_files), registry, work)
    finally:
        holder.kill()
        holder.wait()
    caplog.set_level("INFO", logger="mtcore")
    result = run(recipe_doc(enja_files), registry, work)  # the dead holder's pid is still there
    assert [r.status for r in result.results] == ["ran", "ran", "ran"]
    assert f"taking over the lock of run {holder.pid}" in caplog.text
    assert (work / ".lock").read_text() == ""


def test_executor_contract_declares_workers(registry):
    from mtcore.contracts.kinds import Executor

    local = registry.load("executors", "local").from_dict({"workers": 3})
    assert isinstance(local, Executor) and local.workers == 3

    class Serial(Executor):  # an outside executor without a workers setting runs one at a time
        name = "serial"

        def map(self, fn, tasks):
            return map(fn, tasks)

    assert Serial().workers == 1
    assert list(Serial().map(abs, [-1, 2])) == [1, 2]
