"""Widths chosen by the planner (issue 67): the scaling model, the valid widths of a training
that states its batch in tokens, CPA's choices on a synthetic graph against the lower bound,
and NT5's paper profile planned on 64 GPUs."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import pytest
from click.testing import CliRunner

from mtcore.cli.app import cli
from mtcore.contracts.errors import MtcoreError
from mtcore.contracts.resources import Resources, ResourceSpec
from mtcore.run.scaling import Scaling, valid_widths
from mtcore.run.schedule import simulate
from mtcore.run.widths import choose_widths, lower_bound, mold
from tests.support import ROOT

REPO = ROOT


@dataclass
class _Plugin:
    batches: float | None = None

    def work(self) -> dict[str, float]:
        return {"tokens": 1.0, "batches": self.batches} if self.batches else {}


@dataclass
class _Spec:
    id: str
    plugin: _Plugin


@dataclass
class _Step:
    """What the planner reads of a planned step: its id, dependencies and work."""

    spec: _Spec
    deps: list[str] = field(default_factory=list)

    @property
    def id(self) -> str:
        return self.spec.id


def step(step_id: str, deps: list[str] | None = None, batches: float | None = None) -> _Step:
    return _Step(_Spec(step_id, _Plugin(batches)), deps or [])


def moldable(high: int) -> Resources:
    return Resources(cpus=1, gpus=1, ranks=1, distributed=True).apply(ResourceSpec(gpus=(1, high)))


def test_scaling_efficiency_per_doubling_within_and_across_nodes():
    scaling = Scaling(node=0.9, cluster=0.8, gpus_per_node=8)
    assert scaling.efficiency(1) == 1.0
    assert scaling.efficiency(8) == pytest.approx(0.9**3)
    assert scaling.efficiency(32) == pytest.approx(0.9**3 * 0.8**2)
    assert scaling.seconds(800.0, 8) == pytest.approx(100.0 / 0.9**3)
    assert Scaling.parse("node=0.95,cluster=0.9") == Scaling(0.95, 0.9, 8)
    with pytest.raises(MtcoreError, match="'cluster=1.5' is not"):
        Scaling.parse("node=0.95,cluster=1.5")


def test_a_step_of_independent_shards_scales_linearly_at_any_width():
    scaling = Scaling(gpus_per_node=8)
    assert scaling.efficiency(64, sharded=True) == 1.0
    assert scaling.seconds(6400.0, 64, sharded=True) == pytest.approx(100.0)
    assert Scaling(shards=0.9).efficiency(4, sharded=True) == pytest.approx(0.81)
    assert Scaling.parse("shards=0.98").shards == 0.98
    # any width in its range, across machines whole machines only; no batches to divide
    assert valid_widths(moldable(12), None, 32, scaling, sharded=True) == list(range(1, 9))
    assert valid_widths(moldable(64), None, 24, scaling, sharded=True)[-3:] == [8, 16, 24]


def test_only_valid_widths_divisors_of_the_batches_and_whole_nodes():
    scaling = Scaling(gpus_per_node=8)
    assert valid_widths(moldable(16), 12, 32, scaling) == [1, 2, 3, 4, 6]  # 12 spans 1.5 nodes
    assert valid_widths(moldable(64), 80, 64, scaling) == [1, 2, 4, 5, 8, 16, 40]
    assert valid_widths(moldable(64), 80, 20, scaling) == [1, 2, 4, 5, 8, 16]
    assert valid_widths(moldable(16), None, 32, scaling) == [1]  # no batch_tokens: fixed
    fixed = Resources(cpus=8, gpus=8, ranks=8, distributed=True)
    assert valid_widths(fixed, 80, 64, scaling) == [8]


def _graph() -> tuple[list[_Step], dict[str, float], dict[str, Resources]]:
    """A chain prep -> a -> b -> end (a and b trainings of 16 and 12 batches) beside four
    wide independent trainings of 16 batches."""
    plan = [
        step("prep"),
        step("a", ["prep"], batches=16),
        step("b", ["a"], batches=12),
        step("end", ["b"]),
    ] + [step(f"w{i}", batches=16) for i in range(4)]
    cost = {"prep": 10.0, "a": 4000.0, "b": 3000.0, "end": 10.0}
    cost.update({f"w{i}": 2000.0 for i in range(4)})
    needs = {s.id: Resources() for s in plan}
    needs.update({s.id: moldable(16) for s in plan if s.spec.plugin.batches})
    return plan, cost, needs


def test_cpa_on_a_chain_and_wide_trainings_nears_the_bound():
    plan, at_1, needs = _graph()
    capacity = Resources(cpus=64, gpus=16)
    scaling = Scaling()
    chosen = mold(plan, at_1, needs, capacity, scaling)  # type: ignore[arg-type]
    makespan = simulate(plan, chosen.cost, chosen.needs, capacity).makespan  # type: ignore[arg-type]
    bound = lower_bound(plan, at_1, needs, capacity, scaling).seconds  # type: ignore[arg-type]
    narrow = {s: n.at_width(1) if n.moldable else n for s, n in needs.items()}
    at_width_1 = simulate(plan, at_1, narrow, capacity).makespan  # type: ignore[arg-type]
    assert makespan <= 1.25 * bound, (makespan, bound, chosen.needs)
    assert makespan < at_width_1
    # the chain's trainings are widened, and only to widths that share their batches evenly
    assert chosen.needs["a"].gpus > 1 and chosen.needs["b"].gpus > 1
    for s in plan:
        if s.spec.plugin.batches:
            width = chosen.needs[s.id].gpus
            assert s.spec.plugin.batches % width == 0 and width <= 16
            assert chosen.needs[s.id].ranks == width and not chosen.needs[s.id].moldable


def test_choose_widths_keeps_fixed_steps_and_fits_the_gpus():
    plan, at_1, needs = _graph()
    out = choose_widths(plan, at_1, needs, Resources(cpus=64, gpus=4))  # type: ignore[arg-type]
    assert out["prep"] == needs["prep"]
    assert all(out[s.id].gpus in (1, 2, 4) for s in plan if s.spec.plugin.batches)


def _seconds(text: str) -> float:
    """``3 d 4 h``, ``2 h 05 min``, ``4 min 10 s``, ``12 s`` as seconds."""
    units = {"d": 86400, "h": 3600, "min": 60, "s": 1}
    return float(sum(int(n) * units[u] for n, u in re.findall(r"(\d+) (d|h|min|s)\b", text)))


@pytest.mark.parametrize("name", ["nt5", "yishu", "xiaomi", "hwtsc"])
def test_paper_graphs_on_64_gpus_plan_within_their_bound(name, tmp_path):
    """Issue 67's target: each paper graph on 64 H100s within 1.25x of its lower bound. Its
    other target, NT5 in at most four days, was planned with back-translation at 5 s; at
    §3.2's 1.4B English sentences (issue 69) the GPU time alone is 4 d 12 h over 64 GPUs, so
    with back-translation as wide as the planner makes it NT5 plans within five days (4 d 20 h
    today, 56 d with it on one GPU)."""
    extra = []
    if name == "yishu":  # its CCMT corpus is registered for: empty files suffice to plan
        ccmt = tmp_path / "ccmt"
        ccmt.mkdir()
        (ccmt / "ccmt.en").touch()
        (ccmt / "ccmt.zh").touch()
        extra = ["--set", f"vars.ccmt_dir={ccmt}"]
    work = tmp_path / "work"
    args = ["plan", str(REPO / f"recipes/{name}.yaml"), "-p", "paper", *extra]
    result = CliRunner().invoke(cli, [*args, "--slots", "gpu=64", "-w", str(work)], obj={})
    assert result.exit_code == 0, result.output
    makespan = re.search(r"makespan on gpu=64: ([^;\n]+)", result.output)
    ratio = re.search(r"makespan / bound (\d+\.\d+)", result.output)
    assert makespan and ratio, result.output
    assert float(ratio.group(1)) <= 1.25, result.output
    assert "chosen by CPA and MCPA" in result.output
    if name == "nt5":  # 1.4B lines at the H100's decoding estimate, 297 lines/s, over its width
        bt = re.search(r"bt_hyp_jaen: ([^\n]+?) on cpu=\d+,gpu=(\d+),", result.output)
        assert bt and int(bt.group(2)) >= 8, result.output
        width = int(bt.group(2))
        # printed to the hour: "1 d 16 h"
        assert _seconds(bt.group(1)) == pytest.approx(1.4e9 / 297 / width, abs=3600)
        assert _seconds(makespan.group(1)) <= 5 * 86400, result.output


def _needs(settings: dict[str, Any], spec: dict[str, Any], kind: str = "train") -> Resources:
    from types import SimpleNamespace

    from mtcore.contracts.registry import load_registry
    from mtcore.run.driver import step_needs

    step_id = f"{kind}_a"
    table = {step_id: ResourceSpec.model_validate(spec)}
    runner = SimpleNamespace(recipe=SimpleNamespace(head=SimpleNamespace(resources=table)))
    plugin = load_registry().load("steps", kind).from_dict(settings)
    planned = SimpleNamespace(id=step_id, spec=SimpleNamespace(kind=kind, plugin=plugin))
    return step_needs(runner, planned)  # type: ignore[arg-type]


def test_a_width_for_a_training_that_cannot_take_one_is_a_recipe_error():
    from mtcore.contracts.errors import RecipeError

    stated = {"max_tokens": 1024, "batch_tokens": 4096, "threads": 2}
    assert _needs(stated, {"ranks": 2}) == Resources(
        cpus=4, ranks=2, distributed=True
    )  # its threads a rank
    moldable_need = _needs(stated, {"gpus": "1-4"})
    assert (moldable_need.gpus, moldable_need.gpus_max, moldable_need.moldable) == (1, 4, True)
    with pytest.raises(RecipeError, match=r"resources.train_a: gives 2 ranks .* batch_tokens"):
        _needs({"max_tokens": 1024, "update_freq": 4}, {"ranks": 2})
    with pytest.raises(RecipeError, match="gives a GPU range"):
        _needs({"max_tokens": 1024}, {"gpus": "1-8"})
    with pytest.raises(ValueError, match="not a count"):
        ResourceSpec.model_validate({"gpus": "eight"})


def test_a_translation_takes_a_width_and_a_step_that_cannot_widen_is_refused():
    translate = {"src": "en", "tgt": "ja", "threads": 2}
    ranged = _needs(translate, {"gpus": "1-64"}, "translate")
    assert (ranged.gpus, ranged.gpus_max, ranged.ranks, ranged.moldable) == (1, 64, 1, True)
    fixed = _needs(translate, {"gpus": 8}, "translate")  # a rank a GPU, its threads each
    assert (fixed.gpus, fixed.ranks, fixed.cpus) == (8, 8, 16)
    assert _needs(translate, {"ranks": 2}, "translate").ranks == 2  # CPU ranks
    assert _needs(translate, {"gpus": 1}, "translate").ranks == 1
    from mtcore.contracts.errors import RecipeError

    with pytest.raises(RecipeError, match=r"resources.spm_a: gives a GPU range.*widens by shards"):
        _needs({}, {"gpus": "1-8"}, "spm")
    with pytest.raises(RecipeError, match=r"resources.spm_a: gives 2 ranks"):
        _needs({}, {"ranks": 2}, "spm")
