"""The local Slurm cluster of tests/support/slurm_cluster.py runs real jobs: submitit's, side by
side, and sbatch's, which squeue lists while they run and no longer once they end."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import submitit

from tests.support.slurm_cluster import SlurmCluster, slurm_cluster  # noqa: F401

JOB_SECONDS = 6  # long enough for two jobs started in the same scheduling pass to overlap
DEADLINE_S = 45  # a job's wait, from submission to its result


def _result(job: submitit.Job[Any], deadline: float) -> Any:
    """The job's result, or the test fails with its logs once ``deadline`` (monotonic) passes.

    Without accounting (no slurmdbd) submitit's sacct calls fail and it learns of the end of a
    job only from its result file: job.result() alone would wait forever for a job that died."""
    while not job.done():
        if time.monotonic() > deadline:
            job.cancel(check=False)
            pytest.fail(
                f"submitit job {job.job_id} not done in time\n"
                f"stdout:\n{job.stdout()}\nstderr:\n{job.stderr()}"
            )
        time.sleep(0.5)
    return job.result()


def test_submitit_runs_two_one_cpu_jobs_side_by_side(
    slurm_cluster: SlurmCluster,  # noqa: F811
    tmp_path: Path,
) -> None:
    assert slurm_cluster.cpus >= 2, "two 1-CPU jobs side by side need a node with 2 CPUs"

    # Local, so that cloudpickle ships it by value: the job's Python need not import this module.
    def timed_sleep(seconds: float) -> tuple[str, float, float]:
        start = time.time()
        time.sleep(seconds)
        return os.environ["SLURM_JOB_ID"], start, time.time()

    executor = submitit.SlurmExecutor(folder=tmp_path / "%j")
    executor.update_parameters(
        partition=slurm_cluster.partition, cpus_per_task=1, ntasks_per_node=1, time=5
    )
    jobs = [executor.submit(timed_sleep, JOB_SECONDS) for _ in range(2)]
    deadline = time.monotonic() + DEADLINE_S
    (first_id, first_start, first_end), (second_id, second_start, second_end) = (
        _result(job, deadline) for job in jobs
    )

    assert [first_id, second_id] == [job.job_id for job in jobs]
    assert first_id != second_id
    assert max(first_start, second_start) < min(first_end, second_end), "ran one after the other"


def _queue() -> dict[str, str]:
    """squeue's jobs (pending, running, completing): job id -> state."""
    listed = subprocess.run(
        ["squeue", "-h", "-o", "%i %T"], capture_output=True, text=True, check=True, timeout=30
    )
    return dict(line.split() for line in listed.stdout.splitlines())


def _wait_until(condition: Callable[[], bool], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"{what} not seen within {seconds} s; squeue: {_queue()}")
        time.sleep(0.2)


def test_squeue_lists_a_job_while_it_runs_and_not_after(
    slurm_cluster: SlurmCluster,  # noqa: F811
    tmp_path: Path,
) -> None:
    sbatch = ["sbatch", "--parsable", f"--partition={slurm_cluster.partition}"]
    submitted = subprocess.run(
        [*sbatch, "--cpus-per-task=1", f"--output={tmp_path}/%j.out", "--wrap", "sleep 3"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    job_id = submitted.stdout.strip().split(";")[0]

    _wait_until(lambda: _queue().get(job_id) == "RUNNING", 30, f"job {job_id} running")
    _wait_until(lambda: job_id not in _queue(), 30, f"job {job_id} gone from squeue")
    shown = subprocess.run(
        ["scontrol", "show", "job", job_id], capture_output=True, text=True, check=True, timeout=30
    )
    assert "JobState=COMPLETED" in shown.stdout  # it ended; it was not lost or cancelled
