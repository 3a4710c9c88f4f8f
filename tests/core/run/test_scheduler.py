"""The runner's schedule on the local scheduler: ready steps side by side within the slots,
longest remaining path first, outputs independent of what ran beside them, failures stopping
new starts (or not, with keep_going), GPU steps on devices of their own; resources and their
validation; the list schedule that ``mtcore plan --slots`` simulates; the live display."""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from mtcore.cli.app import cli
from mtcore.contracts.errors import MtcoreError, RecipeError, StepError
from mtcore.contracts.registry import load_registry
from mtcore.contracts.resources import (
    Resources,
    ResourceSpec,
    parse_slots,
    parse_time,
    step_resources,
)
from mtcore.recipe.load import build_recipe
from mtcore.report.display import Display
from mtcore.run.runner import Runner
from mtcore.run.schedule import remaining_paths, simulate
from tests.support import probe_steps

pytestmark = pytest.mark.usefixtures("uncapped")  # these runs set their own slots, or none


@pytest.fixture(scope="module")
def probe_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = probe_steps.install(tmp_path_factory.mktemp("probe"))
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(root), old) if p)
    yield root
    if old is None:
        os.environ.pop("PYTHONPATH", None)
    else:
        os.environ["PYTHONPATH"] = old


@pytest.fixture
def registry(probe_root: Path) -> Any:
    registry = load_registry()
    assert registry.has("steps", "probe_wait")
    return registry


def wait(seconds: float, value: str, **more: Any) -> dict[str, Any]:
    return {"kind": "probe_wait", "seconds": seconds, "value": value, **more}


def recipe(steps: dict[str, Any], **head: Any) -> dict[str, Any]:
    return {"name": "sched", "executor": {"workers": 1}, "steps": steps, **head}


def run(registry: Any, doc: dict[str, Any], work: Path, **options: Any) -> Any:
    return Runner(build_recipe(doc, registry), registry, work, show_progress=False, **options).run()


def overlap(a: dict[str, float], b: dict[str, float]) -> bool:
    return a["start"] < b["end"] and b["start"] < a["end"]


DIAMOND = {
    "a": wait(0.1, "a"),
    "b": {**wait(1.5, "b"), "inputs": {"x": "a"}},
    "c": {**wait(1.5, "c"), "inputs": {"x": "a"}},
    "d": {**wait(0.1, "d"), "inputs": {"x": "b", "y": "c"}},
}


def test_ready_steps_run_side_by_side_to_the_same_outputs(registry, tmp_path):
    """b and c wait only for a: on 2 slots they overlap, on 1 they do not; the manifests'
    output hashes are the same either way."""
    two = run(registry, recipe(DIAMOND), tmp_path / "two", slots={"cpu": 2})
    one = run(registry, recipe(DIAMOND), tmp_path / "one", slots={"cpu": 1})
    found2 = probe_steps.records(tmp_path / "two")
    found1 = probe_steps.records(tmp_path / "one")
    assert overlap(found2["b"], found2["c"])
    assert not overlap(found1["b"], found1["c"])
    for step in DIAMOND:
        assert two.manifest(step)["outputs"] == one.manifest(step)["outputs"], step
    assert (two.path("d") / "out" / "value.txt").read_text() == "d+b+a+c+a"
    assert [r.planned.id for r in two.results] == ["a", "b", "c", "d"]  # plan order
    for step in DIAMOND:  # each step keeps its own log
        logs = list((tmp_path / "two" / "logs" / "steps").glob(f"{step}-*.log"))
        assert len(logs) == 1 and "done in" in logs[0].read_text(), step


def shards(value: str, **more: Any) -> dict[str, Any]:
    return {"kind": "probe_shards", "value": value, "tasks": 4, "seconds": 0.4, **more}


def test_a_step_holds_the_cpus_its_executor_tasks_use(registry, tmp_path):
    """A step that spreads tasks over the executor's 2 workers holds 2 CPUs alone and runs 2
    tasks at once; two such steps ready together on 2 CPUs are given one each and run one task
    at a time each, side by side (never 4 workers' tasks on 2 cores); ``steps=1`` runs one
    step at a time at full width. The outputs are the same every way."""
    two_ready = {"a": shards("a"), "b": shards("b")}
    doc = {**recipe(two_ready), "executor": {"workers": 2}}
    side = run(registry, doc, tmp_path / "side", slots={"cpu": 2})
    found = probe_steps.records(tmp_path / "side")
    assert overlap(found["a"], found["b"])
    assert [found[s]["workers"] for s in "ab"] == [1, 1]
    assert [found[s]["at_once"] for s in "ab"] == [1, 1]
    one = run(registry, doc, tmp_path / "one", slots={"cpu": 2, "steps": 1})
    found = probe_steps.records(tmp_path / "one")
    assert not overlap(found["a"], found["b"])
    assert [found[s]["workers"] for s in "ab"] == [2, 2]
    assert [found[s]["at_once"] for s in "ab"] == [2, 2]
    chain = {"a": shards("a"), "b": {**shards("b"), "inputs": {"x": "a"}}}
    run(registry, {**doc, "steps": chain}, tmp_path / "chain", slots={"cpu": 2})
    assert probe_steps.records(tmp_path / "chain")["a"]["at_once"] == 2  # alone: both workers
    narrow = run(registry, doc, tmp_path / "narrow", slots={"cpu": 1})
    found = probe_steps.records(tmp_path / "narrow")
    assert not overlap(found["a"], found["b"])
    assert [found[s]["at_once"] for s in "ab"] == [1, 1]
    fixed = {**doc, "resources": {"probe_shards": {"cpus": 1}}}  # the recipe's cpus hold
    run(registry, fixed, tmp_path / "fixed", slots={"cpu": 2})
    assert probe_steps.records(tmp_path / "fixed")["a"]["workers"] == 2
    for step in "ab":
        assert side.manifest(step)["outputs"] == one.manifest(step)["outputs"], step
        assert side.manifest(step)["outputs"] == narrow.manifest(step)["outputs"], step


def test_longest_remaining_path_starts_first(registry, tmp_path):
    """One slot, two ready steps: the one with a chain of work behind it goes first, though
    it comes first in neither the recipe nor the alphabet."""
    steps = {
        "a_short": wait(0.1, "s"),
        "long": wait(0.1, "l"),
        "long2": {**wait(0.1, "l2"), "inputs": {"x": "long"}},
        "long3": {**wait(0.1, "l3"), "inputs": {"x": "long2"}},
    }
    run(registry, recipe(steps), tmp_path / "w", slots={"cpu": 1})
    found = probe_steps.records(tmp_path / "w")
    assert found["long"]["start"] < found["a_short"]["start"]


def test_a_failure_stops_new_starts_and_keep_going_runs_the_rest(registry, tmp_path):
    flag = tmp_path / "fail"
    steps = {
        "bad": wait(0.2, "bad", fail_flag=str(flag)),
        "slow": wait(1.5, "slow"),
        "after_bad": {**wait(0.1, "ab"), "inputs": {"x": "bad"}},
        "late": {**wait(0.1, "late"), "inputs": {"x": "slow"}},
    }
    flag.touch()
    with pytest.raises(StepError, match="failing as asked"):
        run(registry, recipe(steps), tmp_path / "w", slots={"cpu": 2})
    found = probe_steps.records(tmp_path / "w")
    assert "slow" in found  # running when bad failed: it finished
    assert "late" not in found and "after_bad" not in found  # nothing new started
    flag.touch()
    with pytest.raises(StepError) as caught:
        run(registry, recipe(steps), tmp_path / "k", slots={"cpu": 2}, keep_going=True)
    found = probe_steps.records(tmp_path / "k")
    assert "late" in found and "after_bad" not in found
    assert "not run because they need a failed one: after_bad" in str(caught.value)
    # the flag is gone: a rerun resumes and runs what is left
    result = run(registry, recipe(steps), tmp_path / "k", slots={"cpu": 2})
    assert {r.planned.id: r.status for r in result.results} == {
        "bad": "ran",
        "slow": "cached",
        "after_bad": "ran",
        "late": "cached",
    }


def test_gpu_steps_get_devices_of_their_own(registry, tmp_path):
    """Declared GPUs (the local scheduler told it has 2): each GPU step runs as its own
    process with CUDA_VISIBLE_DEVICES naming the devices it holds; a third waits."""
    steps = {f"g{i}": wait(1.0, f"g{i}", gpus=1) for i in range(3)}
    doc = recipe(steps, scheduler={"name": "local", "gpus": 2})
    run(registry, doc, tmp_path / "w")
    found = probe_steps.records(tmp_path / "w")
    assert sorted(r["cuda"] for r in found.values()) == ["0", "0", "1"] or sorted(
        r["cuda"] for r in found.values()
    ) == ["0", "1", "1"]
    assert all(r["pid"] != os.getpid() for r in found.values())
    first, second, third = sorted(found.values(), key=lambda r: r["start"])
    assert overlap(first, second) and first["cuda"] != second["cuda"]
    assert third["start"] >= min(first["end"], second["end"]) - 0.05


def test_resources_that_fit_nowhere_are_refused_before_anything_runs(registry, tmp_path):
    doc = recipe({"g": wait(0, "g", gpus=3)}, scheduler={"name": "local", "gpus": 2})
    with pytest.raises(RecipeError, match=r"resources.g: asks 3 GPUs; local scheduler gives a "):
        run(registry, doc, tmp_path / "w")
    assert not (tmp_path / "w" / "steps").exists() or not any(
        (tmp_path / "w" / "steps").glob("g-*")
    )
    with pytest.raises(RecipeError, match=r"resources.probe_wiat: .*Did you mean 'probe_wait'"):
        build_recipe(recipe({"g": wait(0, "g")}, resources={"probe_wiat": {"gpus": 1}}), registry)
    with pytest.raises(RecipeError, match=r"resources.default.time"):
        build_recipe(
            recipe({"g": wait(0, "g")}, resources={"default": {"time": "3 days"}}), registry
        )


@pytest.mark.parametrize(
    ("table", "expected"),
    [
        ({}, Resources(2, 0)),  # what the step declares
        ({"default": {"time": "1-00:00:00"}}, Resources(2, 0, 0.0, 1440)),  # fills the time
        ({"train": {"gpus": 4}}, Resources(2, 4)),  # by kind
        ({"train": {"gpus": 4}, "init": {"gpus": 1}}, Resources(2, 1)),  # the step id wins
        ({"default": {"cpus": 8}, "train": {"cpus": 4}}, Resources(4, 0)),  # kind over default
    ],
)
def test_resource_overrides_by_default_kind_and_step(table, expected):
    specs = {key: ResourceSpec(**value) for key, value in table.items()}
    assert step_resources(Resources(2, 0), "init", "train", specs) == expected


@pytest.mark.parametrize(
    ("text", "minutes"), [("72:00:00", 4320), ("2-00:00:00", 2880), ("1:30", 90), (45, 45)]
)
def test_wall_times(text, minutes):
    assert parse_time(text) == minutes


def test_mtcore_slots_caps_runs_that_pass_none(registry, tmp_path, monkeypatch):
    """MTCORE_SLOTS is the default of --slots: cpu=1 runs b and c of the diamond one after the
    other; a bad value is an error naming the variable."""
    monkeypatch.setenv("MTCORE_SLOTS", "cpu=1")
    run(registry, recipe(DIAMOND), tmp_path / "one")
    found = probe_steps.records(tmp_path / "one")
    assert not overlap(found["b"], found["c"])
    monkeypatch.setenv("MTCORE_SLOTS", "cores=1")
    with pytest.raises(MtcoreError, match="MTCORE_SLOTS='cores=1'"):
        run(registry, recipe(DIAMOND), tmp_path / "bad")


def test_slots_are_parsed_and_bad_ones_named():
    assert parse_slots("cpu=4,gpu=2") == {"cpu": 4, "gpu": 2}
    assert parse_slots("steps=1") == {"steps": 1}
    with pytest.raises(MtcoreError, match="steps must be at least 1"):
        parse_slots("cpu=2,steps=0")
    with pytest.raises(MtcoreError, match=r"'tpu=2' is not cpu=N, gpu=N or steps=N"):
        parse_slots("cpu=4,tpu=2")


def test_the_list_schedule_and_its_makespan(registry):
    """The simulation the runner's loop follows: a -> (b 10 s, c 4 s, e 3 s) -> d; on 2 slots
    b and c start first (longest paths), e after c: makespan 1 + 10 + 1."""
    doc = recipe(
        {
            "a": wait(0, "a"),
            "b": {**wait(0, "b"), "inputs": {"x": "a"}},
            "c": {**wait(0, "c"), "inputs": {"x": "a"}},
            "e": {**wait(0, "e"), "inputs": {"x": "a"}},
            "d": {**wait(0, "d"), "inputs": {"x": "b", "y": "c", "z": "e"}},
        }
    )
    from mtcore.recipe.plan import make_plan

    plan = make_plan(build_recipe(doc, registry), registry)
    cost = {"a": 1.0, "b": 10.0, "c": 4.0, "e": 3.0, "d": 1.0}
    needs = {p.id: Resources() for p in plan}
    assert remaining_paths(plan, cost)["a"] == 12.0
    two = simulate(plan, cost, needs, Resources(cpus=2))
    assert two.makespan == 12.0 and two.starts["e"] == 5.0
    assert simulate(plan, cost, needs, Resources(cpus=1)).makespan == 19.0
    # a step asking more CPUs than there are runs alone instead of never
    big = {**needs, "b": Resources(cpus=8)}  # b alone 1-11, c and e 11-15, d 15-16
    assert simulate(plan, cost, big, Resources(cpus=2)).makespan == 16.0


def test_plan_slots_prints_the_makespan(tmp_path):
    result = CliRunner().invoke(
        cli,
        ["plan", "recipes/xiaomi.yaml", "-p", "paper", "--slots", "gpu=8", "-w", str(tmp_path)],
        obj={},
    )
    assert result.exit_code == 0, result.output
    assert "138 trainings" in result.output
    assert "makespan on gpu=8:" in result.output
    few = CliRunner().invoke(
        cli,
        ["plan", "recipes/xiaomi.yaml", "-p", "paper", "--slots", "gpu=64", "-w", str(tmp_path)],
        obj={},
    )
    assert few.exit_code == 0, few.output
    days = [line for line in (result.output + few.output).splitlines() if "makespan" in line]
    assert days[0] != days[1]


def test_the_display_shows_the_run_and_each_running_step(tmp_path):
    log = tmp_path / "train.log"
    log.write_text(
        '2026 | INFO | train_inner | {"epoch": "1", "loss": "7.5", "num_updates": "350", '
        '"ups": "3.2"}\n'
    )
    from mtcore_plugins.steps._train_log import live_line

    assert live_line(log, 1400) == "update 350/1400 loss 7.50 3.2 upd/s"
    out = io.StringIO()
    display = Display(3, lambda: 125.0, stream=out, tty=False, every=0.0)
    display.started("init", "train", "thread:init", lambda: live_line(log, 1400))
    display.finished("fetch", "ran", 2.0)
    display.refresh()
    text = out.getvalue()
    assert "[0/3]: started init (train)" in text
    assert "[1/3]: ran fetch in 2 s" in text
    assert "init (train)" in text and "update 350/1400 loss 7.50" in text
    bar = display.sink("init", 100, "clean")
    bar.update(40)
    assert "clean 40/100 seg" in bar.text()
