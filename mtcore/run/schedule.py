"""Scheduling a plan: step costs, priorities and the list schedule both the runner and
``mtcore plan --slots`` follow.

A step's cost is its measured seconds where the workdir has them (its own manifest, or that of
an earlier run of the same step id with other settings), else an estimate: a training's
target tokens (:meth:`mtcore.contracts.step.Step.work`) over a tokens-per-second figure for where it
runs, any other step a fixed figure. Ready steps start longest remaining path first: the
step's cost plus the costliest chain of steps that wait for it.
"""

from __future__ import annotations

import heapq
import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from mtcore.contracts.errors import MtcoreError
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


@dataclass
class CostModel:
    """Seconds per step. ``gpu_tps``: target tokens/s of one GPU; ``cpu_tps``: of one CPU
    thread; ``data_seconds``: a step that is not a training and has never run."""

    gpu_tps: float = GPU_TOKENS_PER_SECOND["h100"]
    cpu_tps: float = CPU_TOKENS_PER_SECOND
    data_seconds: float = DATA_STEP_SECONDS
    measured: dict[str, float] = field(default_factory=dict)  # step id -> seconds

    @classmethod
    def from_workdir(
        cls, workdir: Path, plan: list[PlannedStep], gpu_tps: float = GPU_TOKENS_PER_SECOND["h100"]
    ) -> CostModel:
        """Measured seconds of the plan's steps from the workdir's manifests: the step's own
        hash first, else the newest manifest of the same step id."""
        model = cls(gpu_tps=gpu_tps)
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
        return self.data_seconds


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


# Data-parallel efficiency per doubling of a training's width (its time at 2w GPUs over half
# its time at w). Megatron-LM (Shoeybi et al. 2019, arXiv:1909.08053, abstract and §5.1)
# sustains 76 % of linear scaling from one V100 to 512 (32 DGX-2H nodes): nine doublings,
# 0.76 ** (1 / 9) = 0.970 each, which is the default within a node (NVLink). Across nodes the
# all-reduce leaves NVLink for the network: NCCL's ring all-reduce moves 2 (n - 1) / n of the
# gradients over the slowest link (nccl-tests doc/PERFORMANCE.md, "bus bandwidth"), so the
# default there is lower, 0.95 a doubling, a conservative reading of the same figure (not a
# measurement). Ott et al. 2018 ("Scaling Neural Machine Translation", WMT, §3-4) train
# fairseq's Transformer-big on 16 machines of 8 V100s (128 GPUs) with gradients all-reduced
# while the backward pass runs, the setup a training here runs in; they report times to a
# BLEU, not throughput, so no per-doubling figure is taken from them.
NODE_EFFICIENCY = 0.97
CLUSTER_EFFICIENCY = 0.95
GPUS_PER_NODE = 8
REFINE = 60  # simulations in choose_widths' second phase
DESCENT_PASSES = 4  # at most, over the classes' caps
CHAIN_ROUNDS = 100  # at most, widening the schedule's last chain


@dataclass(frozen=True)
class Scaling:
    """How a data-parallel training's time falls with its width: ``node`` is the efficiency of
    one doubling of GPUs within a machine, ``cluster`` of one doubling across machines (of
    ``gpus_per_node`` GPUs each)."""

    node: float = NODE_EFFICIENCY
    cluster: float = CLUSTER_EFFICIENCY
    gpus_per_node: int = GPUS_PER_NODE

    @classmethod
    def parse(cls, text: str) -> Scaling:
        """``node=0.95,cluster=0.9,gpus_per_node=8`` (any may be left out)."""
        values: dict[str, Any] = {}
        for part in text.split(","):
            key, sep, value = part.strip().partition("=")
            try:
                if key in ("node", "cluster") and sep and 0 < float(value) <= 1:
                    values[key] = float(value)
                    continue
                if key == "gpus_per_node" and sep and int(value) >= 1:
                    values[key] = int(value)
                    continue
            except ValueError:
                pass
            raise MtcoreError(
                f"--scaling {text!r}: {part.strip()!r} is not node=E, cluster=E (0 < E <= 1) "
                "or gpus_per_node=N (e.g. --scaling node=0.95,cluster=0.9)"
            )
        return cls(**values)

    def efficiency(self, width: int) -> float:
        """Speed at ``width`` GPUs over ``width`` times the speed at one."""
        inside = min(width, self.gpus_per_node)
        across = max(1.0, width / self.gpus_per_node)
        return float(self.node ** math.log2(inside) * self.cluster ** math.log2(across))

    def seconds(self, seconds_at_1: float, width: int) -> float:
        """A training's seconds at ``width`` GPUs from its seconds on one."""
        return seconds_at_1 / (width * self.efficiency(width))


def valid_widths(
    need: Resources, batches: float | None, capacity_gpus: int, scaling: Scaling
) -> list[int]:
    """The widths a moldable training may run at, narrowest first: within its range and the
    GPUs there are, dividing its batches of an update (each rank accumulates the same number),
    and across machines only whole machines. A training without ``batches`` (no
    ``batch_tokens``) or with a fixed width has only its own."""
    if not need.moldable or not batches:
        return [need.gpus]
    per_node = scaling.gpus_per_node
    out = [
        w
        for w in range(need.gpus, min(need.gpus_max, capacity_gpus) + 1)
        if int(batches) % w == 0 and (w <= per_node or w % per_node == 0)
    ]
    return out or [need.gpus]


def _longest(
    plan: list[PlannedStep], children: dict[str, list[str]], cost: dict[str, float]
) -> tuple[float, dict[str, float], dict[str, float]]:
    """The critical path's length, each step's longest path from a start to its own start, and
    from its start to an end."""
    bottom: dict[str, float] = {}
    for planned in reversed(plan):
        bottom[planned.id] = cost[planned.id] + max(
            (bottom[c] for c in children[planned.id]), default=0.0
        )
    top: dict[str, float] = {}
    for planned in plan:
        top[planned.id] = max((top[d] + cost[d] for d in planned.deps if d in top), default=0.0)
    return max(bottom.values(), default=0.0), top, bottom


@dataclass
class Widths:
    """The widths :func:`choose_widths` chose: each step's resources and seconds."""

    needs: dict[str, Resources]
    cost: dict[str, float]


def choose_widths(
    plan: list[PlannedStep],
    cost_at_1: dict[str, float],
    needs: dict[str, Resources],
    capacity: Resources,
    scaling: Scaling | None = None,
) -> dict[str, Resources]:
    """Each step's resources, a moldable training's at the width chosen for it (the others as
    they are). ``cost_at_1``: a moldable training's seconds on one GPU, any other step's
    seconds. See :func:`mold`."""
    return mold(plan, cost_at_1, needs, capacity, scaling).needs


def mold(
    plan: list[PlannedStep],
    cost_at_1: dict[str, float],
    needs: dict[str, Resources],
    capacity: Resources,
    scaling: Scaling | None = None,
) -> Widths:
    """Widths for the moldable trainings by CPA (Radulescu and van Gemund 2001, "A low-cost
    approach towards mixed task and data parallel scheduling", ICPP, §3): every one starts at
    the low end of its range; while the critical path is longer than the GPU area of all steps
    over the GPUs there are (T_CP > T_A), the step on the critical path whose next valid width
    saves most seconds is widened. The list schedule (:func:`simulate`) then places them."""
    scaling = scaling or Scaling()
    children = dependents(plan)
    choices: dict[str, list[int]] = {}
    for planned in plan:
        need = needs[planned.id]
        if need.moldable and capacity.gpus:
            batches = planned.spec.plugin.work().get("batches")
            widths = valid_widths(need, batches, capacity.gpus, scaling)
            if len(widths) > 1:
                choices[planned.id] = widths
    level = {step_id: 0 for step_id in choices}
    # each moldable training's depth: the moldable trainings on its longest chain before it
    depth: dict[str, int] = {}
    for planned in plan:
        before = max((depth[d] + (d in choices) for d in planned.deps if d in depth), default=0)
        depth[planned.id] = before
    levels_width: dict[int, int] = {}
    for step_id in choices:
        levels_width[depth[step_id]] = levels_width.get(depth[step_id], 0) + 1

    def seconds(step_id: str) -> float:
        if step_id in choices:
            return scaling.seconds(cost_at_1[step_id], choices[step_id][level[step_id]])
        return cost_at_1[step_id]

    def gpus(step_id: str) -> int:
        if step_id in choices:
            return choices[step_id][level[step_id]]
        return needs[step_id].gpus

    cost = {p.id: seconds(p.id) for p in plan}
    area = sum(cost[s] * gpus(s) for s in cost)
    gpu_count = max(1, capacity.gpus)
    while choices:
        critical, top, bottom = _longest(plan, children, cost)
        if critical <= area / gpu_count:
            break
        best, gain = None, 0.0
        for step_id in choices:
            if level[step_id] + 1 >= len(choices[step_id]):
                continue
            if top[step_id] + bottom[step_id] < critical * (1 - 1e-9):
                continue  # not on a critical path
            wider = scaling.seconds(cost_at_1[step_id], choices[step_id][level[step_id] + 1])
            if cost[step_id] - wider > gain:
                best, gain = step_id, cost[step_id] - wider
        if best is None:
            break
        area -= cost[best] * gpus(best)
        level[best] += 1
        cost[best] = seconds(best)
        area += cost[best] * gpus(best)

    def placed() -> dict[str, Resources]:
        out = dict(needs)
        for step_id in choices:
            out[step_id] = needs[step_id].at_width(gpus(step_id), scaling.gpus_per_node)
        for step_id, need in needs.items():
            if need.moldable and step_id not in choices:
                out[step_id] = need.at_width(need.gpus, scaling.gpus_per_node)
        return out

    # CPA's T_A counts all the GPU area at once; where the graph narrows (a few trainings
    # that all the others wait for) the list schedule leaves GPUs idle there. So, as a second
    # phase (ours, not the paper's), a critical step is widened further while the simulated
    # makespan does not grow, at most REFINE simulations.
    out = placed()
    best_span = simulate(plan, cost, out, capacity).makespan
    tried: set[str] = set()
    for _ in range(REFINE):
        critical, top, bottom = _longest(plan, children, cost)
        best, gain = None, 0.0
        for step_id in choices:
            if step_id in tried or level[step_id] + 1 >= len(choices[step_id]):
                continue
            if top[step_id] + bottom[step_id] < critical * (1 - 1e-9):
                continue
            wider = scaling.seconds(cost_at_1[step_id], choices[step_id][level[step_id] + 1])
            if cost[step_id] - wider > gain:
                best, gain = step_id, cost[step_id] - wider
        if best is None:
            break
        level[best] += 1
        cost[best] = seconds(best)
        trial = placed()
        span = simulate(plan, cost, trial, capacity).makespan
        if span <= best_span * (1 + 1e-9):  # a plateau too: parallel chains widen in turn
            best_span, out = span, trial
        else:
            level[best] -= 1
            cost[best] = seconds(best)
            tried.add(best)
    best_cost = dict(cost)
    # A third candidate, by precedence levels (MCPA: Bansal, Kumar and Sadayappan, "An
    # improved two-step algorithm for task and data parallel scheduling in distributed memory
    # machines", Parallel Computing 2006, §3): the moldable trainings that wait for the same
    # number of moldable trainings run side by side, so each of a level's k gets at most N / k
    # (or 2 N / k: two waves) GPUs. One greedy widening at a time (above) leaves a level of a
    # few trainings that gate all the others too narrow; this one does not.
    # classes of like trainings: the same level, batches and seconds (NT5's sixteen
    # pre-trainings are one); a class's trainings share one cap on their width
    klass: dict[str, tuple[int, float, float]] = {}
    for planned in plan:
        if planned.id in choices:
            batches = float(planned.spec.plugin.work().get("batches") or 0)
            klass[planned.id] = (depth[planned.id], float(f"{cost_at_1[planned.id]:.3g}"), batches)

    def capped(
        caps: dict[tuple[int, float, float], int],
    ) -> tuple[float, dict[str, Resources], dict[str, float]]:
        """Each moldable training at its widest valid width within its class's cap."""
        for step_id in choices:
            fits = [i for i, w in enumerate(choices[step_id]) if w <= caps[klass[step_id]]]
            level[step_id] = fits[-1] if fits else 0
            cost[step_id] = seconds(step_id)
        trial = placed()
        return simulate(plan, cost, trial, capacity).makespan, trial, dict(cost)

    caps: dict[tuple[int, float, float], int] = {}
    for share in (1, 2):
        trial_caps = {
            k: max(1, gpu_count * share // levels_width[k[0]]) for k in set(klass.values())
        }
        span, trial, trial_cost = capped(trial_caps)
        if not caps:
            caps = trial_caps
        if span < best_span * (1 - 1e-9):
            best_span, out, best_cost, caps = span, trial, trial_cost, trial_caps
    # then each class's cap in turn, over the widths its trainings can take (coordinate
    # descent, two passes: a few simulations a class)
    options: dict[tuple[int, float, float], set[int]] = {}
    for step_id, key in klass.items():
        options.setdefault(key, set()).update(choices[step_id])

    def gpu_time(trial: dict[str, Resources], trial_cost: dict[str, float]) -> float:
        return sum(trial_cost[s] * trial[s].gpus for s in trial_cost)

    best_area = gpu_time(out, best_cost)
    for _ in range(DESCENT_PASSES):
        moved = False
        for key in sorted(options):
            for width in sorted(options[key]):
                if width == caps[key]:
                    continue
                span, trial, trial_cost = capped({**caps, key: width})
                # a shorter schedule, or as short with less GPU time (a narrower training
                # off the critical path leaves GPUs to the others)
                shorter = span < best_span * (1 - 1e-9)
                if shorter or (
                    span <= best_span * (1 + 1e-9) and gpu_time(trial, trial_cost) < best_area
                ):
                    best_span, out, best_cost = span, trial, trial_cost
                    best_area = gpu_time(trial, trial_cost)
                    caps = {**caps, key: width}
                    moved = True
        if not moved:
            break
    return _widen_late_chain(plan, choices, needs, capacity, scaling, cost_at_1, out, best_cost)


def _widen_late_chain(
    plan: list[PlannedStep],
    choices: dict[str, list[int]],
    needs: dict[str, Resources],
    capacity: Resources,
    scaling: Scaling,
    cost_at_1: dict[str, float],
    out: dict[str, Resources],
    cost: dict[str, float],
) -> Widths:
    """A last pass on the schedule itself: the chain of steps that ends last in the simulated
    schedule (each step's dependency that finished last before it started), its moldable
    trainings widened one valid width at a time, the one that shortens the schedule most
    kept, while one does (at most ``CHAIN_ROUNDS``). The static critical path (above) is not
    the schedule's: where the GPUs are busy a step waits for them, not for its inputs."""
    by_id = {p.id: p for p in plan}
    out, cost = dict(out), dict(cost)
    result = simulate(plan, cost, out, capacity)
    for _ in range(CHAIN_ROUNDS):
        end = {k: result.starts[k] + cost[k] for k in result.starts}
        if not end:
            break
        chain: list[str] = []
        step: str | None = max(end, key=end.__getitem__)
        while step is not None:
            chain.append(step)
            deps = [d for d in by_id[step].deps if d in end]
            step = max(deps, key=end.__getitem__) if deps else None
        best: tuple[float, dict[str, Resources], dict[str, float]] | None = None
        for candidate in chain:
            if candidate not in choices:
                continue
            wider = [w for w in choices[candidate] if w > out[candidate].gpus]
            if not wider:
                continue
            # alone, and with its twins (trainings of its size at its width, which end as late
            # side by side: HW-TSC's fine-tunings of four seeds)
            twins = [
                t
                for t in choices
                if out[t].gpus == out[candidate].gpus
                and f"{cost_at_1[t]:.3g}" == f"{cost_at_1[candidate]:.3g}"
                and wider[0] in choices[t]
            ]
            for group in ([candidate], twins) if len(twins) > 1 else ([candidate],):
                trial_out, trial_cost = dict(out), dict(cost)
                for t in group:
                    trial_out[t] = needs[t].at_width(wider[0], scaling.gpus_per_node)
                    trial_cost[t] = scaling.seconds(cost_at_1[t], wider[0])
                span = simulate(plan, trial_cost, trial_out, capacity).makespan
                if span < result.makespan * (1 - 1e-9) and (best is None or span < best[0]):
                    best = (span, trial_out, trial_cost)
        if best is None:
            break
        _, out, cost = best
        result = simulate(plan, cost, out, capacity)
    return Widths(out, cost)


@dataclass
class Bound:
    """A lower bound on any schedule's makespan: the GPU seconds of every step at its most
    efficient width over the GPUs there are, or the critical path with every moldable training
    at its widest valid width, whichever is longer."""

    area: float
    critical_path: float

    @property
    def seconds(self) -> float:
        return max(self.area, self.critical_path)


def lower_bound(
    plan: list[PlannedStep],
    cost_at_1: dict[str, float],
    needs: dict[str, Resources],
    capacity: Resources,
    scaling: Scaling | None = None,
) -> Bound:
    scaling = scaling or Scaling()
    children = dependents(plan)
    widest: dict[str, float] = {}
    area = 0.0
    for planned in plan:
        need, seconds = needs[planned.id], cost_at_1[planned.id]
        if need.moldable and capacity.gpus:
            batches = planned.spec.plugin.work().get("batches")
            widths = valid_widths(need, batches, capacity.gpus, scaling)
            low = widths[0]
            area += scaling.seconds(seconds, low) * low
            widest[planned.id] = scaling.seconds(seconds, widths[-1])
        else:
            area += seconds * need.gpus
            widest[planned.id] = seconds
    critical, _, _ = _longest(plan, children, widest)
    return Bound(area / max(1, capacity.gpus), critical)
