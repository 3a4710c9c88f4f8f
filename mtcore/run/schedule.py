"""Scheduling a plan: step costs, priorities and the list schedule both the runner and
``mtcore plan --slots`` follow.

A step's cost is its measured seconds where the workdir has them (its own manifest, or that of
an earlier run of the same step id with other settings), else an estimate: a training's
target tokens (:meth:`mtcore.contracts.step.Step.work`) over a tokens-per-second figure for where it
runs, a translation's source lines, where the plan knows them (:func:`plan_volumes`: a sample's
size carried through the steps that keep lines one for one), over a decoding rate, any other
step a fixed figure. Ready steps start longest remaining path first: the
step's cost plus the costliest chain of steps that wait for it.
"""

from __future__ import annotations

import heapq
import json
from dataclasses import dataclass, field, replace
from pathlib import Path

from mtcore.contracts.resources import Resources
from mtcore.recipe.plan import PlannedStep, step_dir
from mtcore.run.cache import MANIFEST

# Target tokens per second of one GPU, for plans before anything has run. Only the H200's is
# measured: docs/results.md's bf16 vanilla Transformer-big width (d 1024, FFN 4096) through
# bench/gpu_speed.py, 130,755 tokens/s. The others are that figure scaled by the cards' dense
# 16-bit tensor throughput (A100 312 and V100 125 TFLOPS against 989), the H100 at 0.9 for its
# lower memory bandwidth: estimates, which --tokens-per-second replaces with a user's own.
GPU_TOKENS_PER_SECOND = {"h200": 130_000.0, "h100": 117_000.0, "a100": 41_000.0, "v100": 16_500.0}
# One fairseq process on this machine's CPU with the cpu profiles' tiny models: the NT5 cpu
# profile's init_enja trains 1,400 updates of 2,048 tokens in about 100 s (docs/results.md).
CPU_TOKENS_PER_SECOND = 28_000.0
DATA_STEP_SECONDS = 5.0
# Decoding, for a step that declares the source lines it translates (Step.volume's
# decode_lines): docs/results.md "On one GPU", fairseq's beam search (beam 5, fp16) on the
# H200, 330.9 sentences/s of 30 source and 40 output tokens; other GPUs scaled as training is.
# One CPU thread: docs/scale.md "Measured overhead", 21 sentences/s per core (a tiny model,
# beam 5, scaled to reference length). Estimates of a vanilla Transformer-big's speed.
GPU_DECODE_LINES_PER_SECOND = 330.0
CPU_DECODE_LINES_PER_SECOND = 21.0


@dataclass
class CostModel:
    """Seconds per step. ``gpu_tps``: target tokens/s of one GPU; ``cpu_tps``: of one CPU
    thread; ``data_seconds``: a step that is not a training and has never run."""

    gpu_tps: float = GPU_TOKENS_PER_SECOND["h100"]
    cpu_tps: float = CPU_TOKENS_PER_SECOND
    data_seconds: float = DATA_STEP_SECONDS
    measured: dict[str, float] = field(default_factory=dict)  # step id -> seconds
    decode_lines: dict[str, float] = field(default_factory=dict)  # step id -> source lines

    @classmethod
    def from_workdir(
        cls, workdir: Path, plan: list[PlannedStep], gpu_tps: float = GPU_TOKENS_PER_SECOND["h100"]
    ) -> CostModel:
        """Measured seconds of the plan's steps from the workdir's manifests: the step's own
        hash first, else the newest manifest of the same step id."""
        model = cls(gpu_tps=gpu_tps)
        model.decode_lines = {
            step: found["decode_lines"]
            for step, found in plan_volumes(plan).items()
            if "decode_lines" in found
        }
        steps = workdir / "steps"
        for planned in plan:
            own = step_dir(workdir, planned) / MANIFEST
            found = [own] if own.exists() else []
            if not found and steps.is_dir():
                found = sorted(
                    steps.glob(f"{planned.id}-*/{MANIFEST}"), key=lambda p: p.stat().st_mtime
                )[-1:]
            for manifest in found:
                try:
                    data = json.loads(manifest.read_text())
                except (OSError, ValueError):
                    continue
                if data.get("id") == planned.id and "reused_from" not in data:
                    model.measured[planned.id] = float(data.get("seconds", 0.0))
        return model

    def seconds(self, planned: PlannedStep, resources: Resources) -> float:
        if planned.id in self.measured:
            return self.measured[planned.id]
        tokens = planned.spec.plugin.work().get("tokens")
        if tokens:
            if resources.gpus:
                return tokens / (self.gpu_tps * resources.gpus)
            return tokens / self.cpu_tps
        lines = self.decode_lines.get(planned.id)
        if lines:
            if resources.gpus:
                rate = GPU_DECODE_LINES_PER_SECOND * self.gpu_tps / GPU_TOKENS_PER_SECOND["h200"]
                return lines / (rate * resources.gpus)
            return lines / (CPU_DECODE_LINES_PER_SECOND * max(1, resources.cpus))
        return self.data_seconds


def plan_volumes(plan: list[PlannedStep]) -> dict[str, dict[str, float]]:
    """Each step's :meth:`~mtcore.contracts.step.Step.volume`, in plan order, from the lines
    its inputs' default outputs are known to hold (a reference to another output: not known)."""
    by_id = {p.id: p for p in plan}
    found: dict[str, dict[str, float]] = {}
    for planned in plan:
        lines_in: dict[str, float | None] = {}
        for role, ref in planned.spec.inputs.items():
            step, _, output = ref.partition(".")
            source = by_id.get(step)
            default = source is not None and output in ("", source.spec.plugin.outputs[0])
            lines_in[role] = found.get(step, {}).get("lines") if default else None
        found[planned.id] = planned.spec.plugin.volume(lines_in)
    return found


def dependents(plan: list[PlannedStep]) -> dict[str, list[str]]:
    """Each step's steps that wait for it (dependencies outside ``plan`` left out)."""
    children: dict[str, list[str]] = {p.id: [] for p in plan}
    for planned in plan:
        for dep in planned.deps:
            if dep in children:
                children[dep].append(planned.id)
    return children


def remaining_paths(plan: list[PlannedStep], cost: dict[str, float]) -> dict[str, float]:
    """Each step's cost plus the longest chain of costs of the steps that depend on it."""
    children = dependents(plan)
    out: dict[str, float] = {}
    for planned in reversed(plan):  # the plan is in dependency order
        tail = max((out[c] for c in children[planned.id]), default=0.0)
        out[planned.id] = cost[planned.id] + tail
    return out


@dataclass
class Simulated:
    makespan: float
    critical_path: float
    busy: float  # the sum of all step seconds
    starts: dict[str, float]


def simulate(
    plan: list[PlannedStep],
    cost: dict[str, float],
    needs: dict[str, Resources],
    capacity: Resources,
) -> Simulated:
    """The runner's list schedule on ``capacity``, in simulated time: every step whose
    dependencies are done is ready; ready steps start, longest remaining path first, while
    their resources fit in what is free (a step asking more CPUs than there are runs alone)."""
    priority = remaining_paths(plan, cost)
    order = {p.id: i for i, p in enumerate(plan)}
    waiting = {p.id: {d for d in p.deps if d in order} for p in plan}
    children = dependents(plan)
    # what each step holds, as plain numbers (this loop runs thousands of times in a plan)
    held_by = {}
    for step_id in order:
        need = fitted(needs[step_id], capacity)
        held_by[step_id] = (need.cpus, need.gpus, need.memory_gb)
    ready = [(-priority[i], order[i], i) for i, deps in waiting.items() if not deps]
    heapq.heapify(ready)
    running: list[tuple[float, str]] = []
    cpus, gpus, memory = capacity.cpus, capacity.gpus, capacity.memory_gb
    now, starts = 0.0, {}
    while ready or running:
        held = []
        while ready:
            item = heapq.heappop(ready)
            c, g, m = held_by[item[2]]
            if c <= cpus and g <= gpus and (not m or not memory or m <= memory):
                cpus, gpus = cpus - c, gpus - g
                memory = memory - m if memory else 0.0
                starts[item[2]] = now
                heapq.heappush(running, (now + cost[item[2]], item[2]))
            else:
                held.append(item)
        for item in held:
            heapq.heappush(ready, item)
        if not running:
            break
        now, done = heapq.heappop(running)
        c, g, m = held_by[done]
        cpus, gpus = cpus + c, gpus + g
        memory = memory + m if memory else 0.0
        for child in children[done]:
            waiting[child].discard(done)
            if not waiting[child]:
                heapq.heappush(ready, (-priority[child], order[child], child))
    critical = max(priority.values(), default=0.0)
    return Simulated(now, critical, sum(cost.values()), starts)


def fitted(need: Resources, capacity: Resources) -> Resources:
    """``need`` with its CPUs capped at ``capacity``'s: a step asking more threads than there
    are cores still runs, alone (GPUs and memory are never capped: validation refuses)."""
    if need.cpus <= capacity.cpus:
        return need
    if need.narrowable and need.cpus_min <= capacity.cpus:
        return need.with_cpus(capacity.cpus)
    return replace(need, cpus=capacity.cpus, cpus_min=capacity.cpus if need.cpus_min else 0)


def duration(seconds: float) -> str:
    """``3 d 4 h``, ``2 h 05 min``, ``4 min 10 s``, ``12 s``."""
    seconds = max(0.0, seconds)
    if seconds >= 86400:
        return f"{int(seconds // 86400)} d {int(seconds % 86400 // 3600)} h"
    if seconds >= 3600:
        return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60):02d} min"
    if seconds >= 60:
        return f"{int(seconds // 60)} min {int(seconds % 60):02d} s"
    return f"{seconds:.0f} s"
