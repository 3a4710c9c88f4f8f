"""``mtcore plan --slots``: the runner's schedule simulated on a given number of CPU threads and
GPUs, from per-step cost estimates (:mod:`mtcore.run.schedule`), so a user sees what a graph takes
on a cluster before starting it."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from mtcore.contracts.resources import Resources, parse_slots
from mtcore.recipe.plan import PlannedStep
from mtcore.run.driver import check_fit, step_needs
from mtcore.run.scaling import Scaling
from mtcore.run.schedule import (
    CPU_DECODE_LINES_PER_SECOND,
    GPU_DECODE_LINES_PER_SECOND,
    CostModel,
    duration,
    fitted,
    simulate,
)
from mtcore.run.widths import lower_bound, mold

if TYPE_CHECKING:
    from mtcore.run.runner import Runner


def print_schedule(
    runner: Runner,
    rows: list[tuple[PlannedStep, bool]],
    slots: str,
    tps: float,
    kind: str,
    scaling: Scaling | None = None,
) -> None:
    """Prints the makespan of the list schedule on ``slots``, moldable steps at the widths
    :func:`mtcore.run.widths.choose_widths` picks, beside a lower bound on any schedule's."""
    scaling = scaling or Scaling()
    caps = parse_slots(slots)
    # CPUs left out: as many as the steps ask (a cluster's CPUs rarely bound a GPU graph)
    capacity = Resources(cpus=caps.get("cpu", 10**6), gpus=caps.get("gpu", 0))
    plan = [p for p, _ in rows]
    asked = {p.id: step_needs(runner, p) for p in plan}
    check_fit(asked, capacity, capacity, f"--slots {slots}")
    model = CostModel.from_workdir(runner.workdir, plan, gpu_tps=tps)
    # a moldable step's seconds on one GPU; any other step's at what it asks
    cost_at_1 = {
        p.id: 0.0
        if cached
        else model.seconds(p, asked[p.id].at_width(1) if asked[p.id].moldable else asked[p.id])
        for p, cached in rows
    }
    molded = mold(plan, cost_at_1, asked, capacity, scaling)
    needs, cost = molded.needs, molded.cost
    result = simulate(plan, cost, needs, capacity)
    bound = lower_bound(plan, cost_at_1, asked, capacity, scaling)
    trainings = [p for p in plan if p.spec.plugin.work().get("tokens")]
    tokens = sum(p.spec.plugin.work()["tokens"] for p in trainings)
    gpu_seconds = sum(cost[p.id] * fitted(needs[p.id], capacity).gpus for p in plan)
    recipe = runner.recipe
    click.echo(
        f"{recipe.name} (profile {recipe.profile or '-'}): {len(plan)} steps "
        f"({sum(c for _, c in rows)} cached), {len(trainings)} trainings, "
        f"{tokens:,.0f} target tokens"
    )
    click.echo(
        f"  cost model: trainings at {tps:,.0f} target tokens/s per GPU ({kind}) or "
        f"{model.cpu_tps:,.0f} on CPU; other steps {model.data_seconds:g} s; measured "
        f"seconds for {len(model.measured)} steps of the workdir"
    )
    _echo_translations(model)
    click.echo(f"  critical path: {duration(result.critical_path)}")
    click.echo(
        f"  all steps one after another (at their lowest width): "
        f"{duration(sum(cost_at_1.values()))}"
    )
    used = (
        f"; GPUs busy {gpu_seconds / (result.makespan * capacity.gpus):.0%}"
        if (capacity.gpus and result.makespan)
        else ""
    )
    click.echo(f"  makespan on {slots}: {duration(result.makespan)}{used}")
    moldable = [p for p in plan if asked[p.id].moldable]
    if moldable and capacity.gpus:
        click.echo(
            f"  widths: {len(moldable)} steps with a GPU range, chosen by CPA and MCPA "
            f"(scaling per doubling {scaling.node:g} within a node, {scaling.cluster:g} "
            f"across nodes of {scaling.gpus_per_node} GPUs, {scaling.shards:g} for a step of "
            "independent shards)"
        )
    ratio = f" (makespan / bound {result.makespan / bound.seconds:.2f})" if bound.seconds else ""
    click.echo(
        f"  lower bound: {duration(bound.seconds)}{ratio}: GPU time at width 1 over "
        f"{capacity.gpus or '-'} GPUs {duration(bound.area)}, critical path at the widest "
        f"widths {duration(bound.critical_path)}"
    )
    longest = sorted(plan, key=lambda p: -cost_at_1[p.id] * max(1, asked[p.id].gpus))[:5]
    for planned in longest:
        if cost[planned.id] <= 0:
            break
        need = fitted(needs[planned.id], capacity)
        chosen = f" (of {asked[planned.id].describe()})" if asked[planned.id].moldable else ""
        click.echo(
            f"    {planned.id}: {duration(cost[planned.id])} on {need.describe()}{chosen}, "
            f"starts at {duration(result.starts.get(planned.id, 0.0))}"
        )


def _echo_translations(model: CostModel) -> None:
    """The translations costed by their source lines (not measured), marked as estimates."""
    decoded = {step: n for step, n in model.decode_lines.items() if step not in model.measured}
    if decoded:
        click.echo(
            f"  translations (estimated): {len(decoded)} steps decode {sum(decoded.values()):,.0f}"
            f" source lines known from the plan at {GPU_DECODE_LINES_PER_SECOND:g} lines/s per "
            f"H200 (scaled by the GPU's training figure) or {CPU_DECODE_LINES_PER_SECOND:g} per "
            "CPU thread"
        )
