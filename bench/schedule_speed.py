"""The scheduler against the sequential runner on the README's main job: the NT5 recipe at its
default profile, run twice from empty workdirs in one bench run, once with ``--slots steps=1``
(one step at a time, each with every core its settings use: what the runner did before issue
42) and once as ``make nt5`` runs it (slots from the machine's cores). Printed: each run's wall
seconds, the ratio, the load average while each ran, and whether every step's output hashes
(the manifests' ``outputs``) are the same in both.

    .venv/bin/python bench/schedule_speed.py [--recipe recipes/nt5.yaml] [--profile cpu]
        [--work DIR] [--order sequential,scheduled]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def steal() -> tuple[int, int]:
    """The machine's (steal, total) jiffies so far, from the first line of /proc/stat."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (fields[7] if len(fields) > 7 else 0), sum(fields)


def run(
    recipe: str, profile: str | None, work: Path, slots: str | None
) -> tuple[float, float, float, float]:
    """Wall seconds of one ``mtcore run``, the mean 1-minute load average while it ran, the CPU
    seconds its processes used (user + system), and the share of the machine lost to steal."""
    command = [str(ROOT / ".venv" / "bin" / "mtcore"), "run", recipe, "-w", str(work), "-q"]
    if profile:
        command += ["-p", profile]
    if slots:
        command += ["--slots", slots]
    loads: list[float] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(10):
            loads.append(os.getloadavg()[0])

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    before, stolen = resource.getrusage(resource.RUSAGE_CHILDREN), steal()
    started = time.monotonic()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    seconds = time.monotonic() - started
    after, stolen_after = resource.getrusage(resource.RUSAGE_CHILDREN), steal()
    stop.set()
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    lost = (stolen_after[0] - stolen[0]) / max(1, stolen_after[1] - stolen[1])
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)} failed:\n{done.stderr[-3000:]}")
    return seconds, sum(loads) / max(1, len(loads)), cpu, lost


def outputs(work: Path) -> dict[str, dict[str, str]]:
    found = {}
    for manifest in sorted(work.glob("steps/*/manifest.json")):
        data = json.loads(manifest.read_text())
        found[data["id"]] = data["outputs"]
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipe", default="recipes/nt5.yaml")
    parser.add_argument("--profile", default=None)
    parser.add_argument("--work", type=Path, default=None)
    parser.add_argument("--order", default="sequential,scheduled")
    args = parser.parse_args()
    base = args.work or Path(tempfile.mkdtemp(prefix="mtcore-schedule-"))
    results = {}
    for name in args.order.split(","):
        work = base / name
        shutil.rmtree(work, ignore_errors=True)
        slots = "steps=1" if name == "sequential" else None
        seconds, load, cpu, lost = run(args.recipe, args.profile, work, slots)
        results[name] = (seconds, load, outputs(work))
        how = f"--slots {slots}" if slots else f"{len(os.sched_getaffinity(0))} cores"
        print(
            f"{name:10} {seconds:8.1f} s   load average {load:.2f}   CPU {cpu:.0f} s"
            f" ({cpu / seconds:.2f} cores busy)   steal {lost:.0%}   ({how})",
            flush=True,
        )
    if {"sequential", "scheduled"} <= results.keys():  # one run only: nothing to compare
        seq, sched = results["sequential"], results["scheduled"]
        same = seq[2] == sched[2]
        differing = sorted(k for k in seq[2] if seq[2][k] != sched[2].get(k))
        print(f"speed-up   {seq[0] / sched[0]:.2f}x  (sequential / scheduled, same commit)")
        print(f"outputs    {len(seq[2])} steps, output hashes identical: {same}"
              + (f" (differ: {', '.join(differing)})" if differing else ""))  # fmt: skip
    if args.work is None:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
