"""The cost of a translation whose volume the plan knows (issue 69): a sample's size carried
through the steps that keep lines one for one, decoded at a GPU's or a CPU thread's rate."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from mtcore.contracts.registry import load_registry
from mtcore.contracts.resources import Resources
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
