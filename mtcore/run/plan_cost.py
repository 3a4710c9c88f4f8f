"""``mtcore plan --slots``: the runner's schedule simulated on a given number of CPU threads and
GPUs, from per-step cost estimates (:mod:`mtcore.run.schedule`), so a user sees what a graph takes
on a cluster before starting it."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from mtcore.recipe.plan import PlannedStep
from mtcore.run.driver import check_fit, step_needs
from mtcore.run.resources import Resources, parse_slots
from mtcore.run.schedule import CostModel, duration, fitted, simulate

if TYPE_CHECKING:
    from mtcore.run.runner import Runner


def print_schedule(
    runner: Runner, rows: list[tuple[PlannedStep, bool]], slots: str, tps: float, kind: str
) -> None:
    caps = parse_slots(slots)
    # CPUs left out: as many as the steps ask (a cluster's CPUs rarely bound a GPU graph)
    capacity = Resources(cpus=caps.get("cpu", 10**6), gpus=caps.get("gpu", 0))
    plan = [p for p, _ in rows]
    needs = {p.id: step_needs(runner, p) for p in plan}
    check_fit(needs, capacity, capacity, f"--slots {slots}")
    model = CostModel.from_workdir(runner.workdir, plan, gpu_tps=tps)
    cost = {p.id: 0.0 if cached else model.seconds(p, needs[p.id]) for p, cached in rows}
    result = simulate(plan, cost, needs, capacity)
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
    click.echo(f"  critical path: {duration(result.critical_path)}")
    click.echo(f"  all steps one after another: {duration(result.busy)}")
    used = (
        f"; GPUs busy {gpu_seconds / (result.makespan * capacity.gpus):.0%}"
        if (capacity.gpus and result.makespan)
        else ""
    )
    click.echo(f"  makespan on {slots}: {duration(result.makespan)}{used}")
    longest = sorted(plan, key=lambda p: -cost[p.id])[:5]
    for planned in longest:
        if cost[planned.id] <= 0:
            break
        need = fitted(needs[planned.id], capacity)
        click.echo(
            f"    {planned.id}: {duration(cost[planned.id])} on {need.describe()}, starts at "
            f"{duration(result.starts.get(planned.id, 0.0))}"
        )
