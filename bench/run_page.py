"""What the run page and tracking cost, against what a run already pays for its report.

On a finished workdir (a recipe's smoke or default run), in one process:

- ``report.md`` (tables and the scores plot): the baseline;
- ``report.html`` built for the first time (its paired bootstrap tests included) and again
  (the tests cached in ``.page/significance.json``);
- logging every step of the run to MLflow as the tracker does for a run found complete in the
  cache (a SQLite store in a temporary folder: one nested run per step with its settings,
  counts, metrics and curves), against an untracked rerun's report.

    .venv/bin/python bench/run_page.py recipes/nt5.yaml -p smoke -w work/nt5-smoke
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

from mtcore.contracts.registry import load_registry
from mtcore.recipe.load import load_recipe
from mtcore.recipe.plan import make_plan, step_dir
from mtcore.report.markdown import write_report
from mtcore.report.page import write_page
from mtcore.report.tracking import MlflowTracker
from mtcore.run.cache import is_complete, read_manifest
from mtcore.run.runner import RunResult, StepResult


def timed(call) -> float:  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("recipe", type=Path)
    parser.add_argument("-p", "--profile", default=None)
    parser.add_argument("-w", "--workdir", type=Path, required=True)
    args = parser.parse_args()
    registry = load_registry()
    recipe = load_recipe(args.recipe, registry, args.profile)
    plan = make_plan(recipe, registry)
    result = RunResult(args.workdir)
    for planned in plan:
        folder = step_dir(args.workdir, planned)
        if not is_complete(folder):
            raise SystemExit(f"{planned.id} is not complete in {args.workdir}: run the recipe")
        result.results.append(StepResult(planned, "cached", read_manifest(folder), folder))
    shutil.rmtree(args.workdir / ".page", ignore_errors=True)
    markdown = timed(lambda: write_report(recipe, result))
    first = timed(lambda: write_page(args.workdir, registry, result=result, running=False))
    again = timed(lambda: write_page(args.workdir, registry, result=result, running=False))
    size = (args.workdir / "report.html").stat().st_size
    with tempfile.TemporaryDirectory() as folder:
        tracker = MlflowTracker(f"sqlite:///{folder}/mlflow.db", "bench", registry=registry)

        def track() -> None:
            tracker.mtcore_run_started(recipe, args.workdir, plan, None)
            tracker.mtcore_run_finished(recipe, result, None)

        tracked = timed(track)
    print(f"{recipe.name} ({args.profile or 'default'}): {len(plan)} steps")
    print(f"report.md:                   {markdown:6.2f} s (baseline)")
    print(
        f"report.html, first build:    {first:6.2f} s  {first / markdown:5.1f}x  ({size:,} bytes)"
    )
    print(f"report.html, rebuilt:        {again:6.2f} s  {again / markdown:5.1f}x")
    print(f"MLflow, every step (SQLite): {tracked:6.2f} s  {tracked / markdown:5.1f}x")


if __name__ == "__main__":
    main()
