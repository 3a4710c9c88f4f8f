"""A translation as wide as its resources: each of its ranks translates every ``ranks``-th shard
(rank r: shards r, r + N, r + 2N ...) into the step's shard store (``map_shards``' ``part``),
and the step then assembles the store as at width 1: the same shards in the same order.

On the ``local`` scheduler the step starts its ranks itself, each pinned to one of the step's
GPUs (``CUDA_VISIBLE_DEVICES``: one of those it was given) or, on CPU, with its share of the
threads. Where the scheduler places each rank as a task of its own (Slurm, Ray), rank 0 leads:
it publishes the rank command (:func:`~mtcore.api.engine.publish_ranks`), runs its own share
and waits until every shard is saved; a follower that fails (its failure marker, or the exit
status its task records) fails the step, naming the rank. A rerun translates only the shards
that are not saved.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from mtcore.api import (
    Artifact,
    Corpus,
    Executor,
    PluginConfig,
    StepContext,
    StepError,
    map_shards,
)
from mtcore.api.engine import (
    PARENT_ENV,
    cores,
    current_task,
    die_with_parent,
    publish_ranks,
    rank_exits,
    run_logged,
    shard_saved,
    tail,
)
from mtcore_plugins.common.decoding.translator import DecodeJob
from mtcore_plugins.steps._translate_shards import Shard, read_shards, translate_shard

POLL = 1.0  # seconds between the leader's looks at the shard store


@dataclass(frozen=True)
class RankJob:
    """What a rank needs to translate its share: the step's settings (JSON), the converted model
    (empty: fairseq), its model inputs by role, the corpus and its source column, the shard size
    and the shard store."""

    step_id: str
    settings: str
    ct2: str
    models: dict[str, str]
    corpus: str
    column: int
    chunk_lines: int
    store: str


def run_ranks(ctx: StepContext, job: RankJob, lines: int, threads: int) -> list[list[int]]:
    """Runs the step's ``ctx.ranks`` ranks until every shard of the ``lines`` source lines is
    saved; returns the shards each rank translated (none where a rerun found them saved)."""
    folder = ctx.scratch("ranks")
    for old in folder.glob("rank-*"):  # an earlier attempt's markers
        old.unlink()
    spec = folder / "job.json"
    spec.write_text(json.dumps({**asdict(job), "threads": threads}), encoding="utf-8")
    cmd = [sys.executable, "-m", __name__, str(spec)]
    task = current_task()
    if task is None:
        if ctx.nodes > 1:
            raise StepError(
                f"{ctx.step_id}: {ctx.ranks} ranks on {ctx.nodes} nodes need a scheduler that "
                "places ranks on other machines (slurm, ray); the local one runs them on this "
                "machine (resources: nodes: 1)"
            )
        _run_here(ctx, cmd, folder, threads)
    else:
        if task.world != ctx.ranks:
            raise StepError(
                f"{ctx.step_id}: the scheduler started {task.world} ranks for a width of "
                f"{ctx.ranks}"
            )
        env = publish_ranks(task, cmd, {}, Path.cwd())
        run_logged(cmd, folder / "rank-0.log", f"{ctx.step_id} rank 0", env=env)
        _wait_for_shards(ctx, task, folder, Path(job.store), -(-lines // job.chunk_lines))
    return [_translated(folder, rank) for rank in range(ctx.ranks)]


def _run_here(ctx: StepContext, cmd: list[str], folder: Path, threads: int) -> None:
    """The local scheduler's ranks: one process each, a GPU each where the step has GPUs."""
    ranks = ctx.ranks
    devices = [d for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    per_rank = threads or max(1, cores() // ranks)
    children = []
    for rank in range(ranks):
        env = {
            **os.environ,
            "RANK": str(rank),
            "WORLD_SIZE": str(ranks),
            "LOCAL_RANK": str(rank),
            "OMP_NUM_THREADS": str(per_rank),
            "MKL_NUM_THREADS": str(per_rank),
            PARENT_ENV: str(os.getpid()),
        }
        if devices:
            env["CUDA_VISIBLE_DEVICES"] = devices[rank % len(devices)]
        with open(folder / f"rank-{rank}.log", "ab") as log:
            children.append(subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT))
    try:
        codes = [child.wait() for child in children]
    finally:
        for child in children:  # interrupted: none outlives the step
            if child.poll() is None:
                child.kill()
                child.wait()
    failed = [rank for rank, code in enumerate(codes) if code]
    if failed:
        rank = failed[0]
        raise StepError(
            f"{ctx.step_id}: rank {rank} of {ranks} failed (exit status {codes[rank]}"
            + (f"; ranks {', '.join(map(str, failed[1:]))} too" if failed[1:] else "")
            + f"); rerun to translate its shards. Its log {folder / f'rank-{rank}.log'} ends:\n"
            + tail(folder / f"rank-{rank}.log", 20)
        )


def _wait_for_shards(ctx: StepContext, task: Any, folder: Path, store: Path, shards: int) -> None:
    """The leader's wait for its followers: until every shard is saved, or a follower failed
    (its marker, or a nonzero exit status) or ended leaving shards of its share unsaved."""
    missing = list(range(shards))
    while True:
        ended = rank_exits(task)  # read before the store: a rank that ended saved its shards
        missing = [n for n in missing if not shard_saved(store, n)]
        if not missing:
            return
        for marker in sorted(folder.glob("rank-*.failed")):
            raise StepError(
                f"{ctx.step_id}: rank {marker.stem.split('-')[1]} of {task.world} failed: "
                f"{marker.read_text(encoding='utf-8').strip()}; rerun to translate its shards"
            )
        for rank, (code, log) in sorted(ended.items()):
            left = [n for n in missing if n % task.world == rank]
            if code or left:
                raise StepError(
                    f"{ctx.step_id}: rank {rank} of {task.world} ended (exit status {code}) "
                    f"with {len(left)} of its shards not translated; rerun to translate them "
                    f"(its log: {log})"
                )
        time.sleep(POLL)


def _translated(folder: Path, rank: int) -> list[int]:
    try:
        done = json.loads((folder / f"rank-{rank}.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    return [int(n) for n in done.get("translated", [])]


class _InProcess(Executor[PluginConfig]):
    """A rank translates its share in its own process, one shard after another."""

    name = "in_process"

    def map(self, fn: Any, tasks: Any) -> Any:
        return (fn(task) for task in tasks)


def translate_share(job: RankJob, threads: int, rank: int, ranks: int) -> list[int]:
    """Rank ``rank`` of ``ranks``: translates the shards of its share not yet saved, saving
    each; returns their numbers."""
    corpus = Corpus.open(Path(job.corpus))
    decode = DecodeJob(job.step_id, {r: Artifact.open(Path(p)) for r, p in job.models.items()})
    done: list[int] = []

    def task(shard: Shard) -> tuple[Any, ...]:
        done.append(shard[0])
        return (job.settings, threads, job.ct2, decode, shard)

    shards = read_shards(corpus, job.column, job.chunk_lines)
    for _ in map_shards(_InProcess(), translate_shard, shards, task, Path(job.store),
                        part=(rank, ranks)):  # fmt: skip
        pass
    return done


def main(argv: list[str]) -> int:
    """One rank: ``RANK`` and ``WORLD_SIZE`` from the environment; ``LOCAL_RANK`` picks its GPU
    among several visible (a task that sees its node's GPUs). Writes ``rank-<r>.json`` (the
    shards it translated) or, failing, ``rank-<r>.failed`` (the error) beside the job file."""
    die_with_parent()
    spec = Path(argv[0])
    rank, ranks = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    devices = [d for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    if len(devices) > 1:  # before torch starts
        local = int(os.environ.get("LOCAL_RANK", "0"))
        os.environ["CUDA_VISIBLE_DEVICES"] = devices[local % len(devices)]
    values = json.loads(spec.read_text(encoding="utf-8"))
    threads = int(values.pop("threads"))
    try:
        done = translate_share(RankJob(**values), threads, rank, ranks)
    except BaseException as exc:
        (spec.parent / f"rank-{rank}.failed").write_text(
            f"{type(exc).__name__}: {exc}\n", encoding="utf-8"
        )
        raise
    (spec.parent / f"rank-{rank}.json").write_text(
        json.dumps({"translated": done}), encoding="utf-8"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
