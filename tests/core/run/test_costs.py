"""The cost of a translation whose volume the plan knows (issue 69): a sample's size carried
through the steps that keep lines one for one, decoded at a GPU's or a CPU thread's rate, and
over the width the planner gives a translation of a GPU range."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from mtcore.contracts.registry import load_registry
from mtcore.contracts.resources import Resources, ResourceSpec
from mtcore.run.schedule import (
    CPU_DECODE_LINES_PER_SECOND,
    DATA_STEP_SECONDS,
    GPU_DECODE_LINES_PER_SECOND,
    GPU_TOKENS_PER_SECOND,
    CostModel,
    plan_volumes,
)


@dataclass
class _Spec:
    plugin: Any
    inputs: dict[str, str] = field(default_factory=dict)


@dataclass
class _Planned:
    id: str
    spec: _Spec
    dirname: str = "never-run"  # no manifest in the workdir: nothing measured

    @property
    def deps(self) -> list[str]:
        return [ref.partition(".")[0] for ref in self.spec.inputs.values()]


def step(step_id: str, kind: str, config: dict[str, Any], **inputs: str) -> _Planned:
    plugin = load_registry().load("steps", kind).from_dict(config)
    return _Planned(step_id, _Spec(plugin, inputs))


def graph(size: int) -> list[_Planned]:
    translate = {"src": "en", "tgt": "ja"}
    return [
        step("news", "fetch", {"source": "local"}),
        step("crawl", "fetch", {"source": "local", "max_pairs": 500}),
        step("news_sample", "sample", {"size": size}, corpus="news"),
        step("mono", "concat", {}, a="news_sample", b="crawl"),
        step("tc", "truecase", {"langs": ["en"]}, corpus="mono", model="crawl"),
        step("bt", "translate", translate, corpus="tc", model="crawl"),
        step("unknown", "translate", translate, corpus="news", model="crawl"),
        step("other_output", "translate", translate, corpus="bt.nbest", model="crawl"),
    ]


def test_volumes_flow_through_sample_concat_and_line_keeping_steps():
    found = plan_volumes(graph(1000))  # type: ignore[arg-type]
    assert found["news"] == {} and found["crawl"] == {"lines": 500.0}
    assert found["mono"] == {"lines": 1500.0} and found["tc"] == {"lines": 1500.0}
    assert found["bt"] == {"lines": 1500.0, "decode_lines": 1500.0}
    assert found["unknown"] == {}  # a fetch without max_pairs: not known
    assert found["other_output"] == {}  # a reference to another output: not known


@pytest.mark.parametrize("gpus", [1, 4])
def test_a_translation_of_known_volume_costs_lines_over_decoding_rate(tmp_path, gpus):
    plan = graph(1_400_000)
    model = CostModel.from_workdir(tmp_path, plan, gpu_tps=GPU_TOKENS_PER_SECOND["h200"])  # type: ignore[arg-type]
    bt = next(p for p in plan if p.id == "bt")
    on_gpu = model.seconds(bt, Resources(cpus=2, gpus=gpus))  # type: ignore[arg-type]
    assert on_gpu == pytest.approx(1_400_500 / (GPU_DECODE_LINES_PER_SECOND * gpus))
    on_cpu = model.seconds(bt, Resources(cpus=4))  # type: ignore[arg-type]
    assert on_cpu == pytest.approx(1_400_500 / (CPU_DECODE_LINES_PER_SECOND * 4))
    unknown = next(p for p in plan if p.id == "unknown")
    assert model.seconds(unknown, Resources(cpus=1, gpus=1)) == DATA_STEP_SECONDS  # type: ignore[arg-type]


def test_a_slower_gpu_decodes_slower(tmp_path):
    plan = graph(10_000)
    fast = CostModel.from_workdir(tmp_path, plan, gpu_tps=GPU_TOKENS_PER_SECOND["h200"])  # type: ignore[arg-type]
    slow = CostModel.from_workdir(tmp_path, plan, gpu_tps=GPU_TOKENS_PER_SECOND["v100"])  # type: ignore[arg-type]
    bt = next(p for p in plan if p.id == "bt")
    one = Resources(cpus=1, gpus=1)
    ratio = GPU_TOKENS_PER_SECOND["h200"] / GPU_TOKENS_PER_SECOND["v100"]
    assert slow.seconds(bt, one) == pytest.approx(fast.seconds(bt, one) * ratio)  # type: ignore[arg-type]


def test_the_planner_spreads_a_translation_of_a_gpu_range_over_the_gpus(tmp_path):
    """NT5's back-translation of 1.4B lines, given 1-64 GPUs: at 1.0 a doubling (independent
    shards) its seconds are those on one GPU over the width chosen, and with nothing beside
    it the planner takes every GPU."""
    from mtcore.run.scaling import Scaling
    from mtcore.run.widths import mold

    plan = graph(1_400_000_000)
    model = CostModel.from_workdir(tmp_path, plan, gpu_tps=GPU_TOKENS_PER_SECOND["h200"])  # type: ignore[arg-type]
    needs = {p.id: p.spec.plugin.resources() for p in plan}
    bt = needs["bt"] = needs["bt"].apply(ResourceSpec(gpus=(1, 64)))
    assert (bt.gpus, bt.gpus_max, bt.ranks) == (1, 64, 1)
    at_1 = {
        p.id: model.seconds(p, needs[p.id].at_width(1) if needs[p.id].moldable else needs[p.id])  # type: ignore[arg-type]
        for p in plan
    }
    molded = mold(plan, at_1, needs, Resources(cpus=1000, gpus=64), Scaling())  # type: ignore[arg-type]
    chosen = molded.needs["bt"]
    assert (chosen.gpus, chosen.ranks, chosen.nodes) == (64, 64, 8)
    assert molded.cost["bt"] == pytest.approx(at_1["bt"] / 64)
    assert at_1["bt"] == pytest.approx(1_400_000_500 / GPU_DECODE_LINES_PER_SECOND)
