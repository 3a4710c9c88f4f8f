"""Steps as Slurm jobs, submitted through submitit: each an ``sbatch`` job with the step's CPUs,
GPUs, memory and wall time, running ``mtcore.run.jobs.run_job`` on the workdir (a file system that
every node shares, at the same path). The driver polls ``squeue`` for its jobs and reads what
each job wrote of itself; a job outlives the driver, and a new driver re-attaches to it by the
id recorded in the step's job folder. submitit's files (the job's stdout and stderr among them)
are in ``logs/steps/<step>-<hash>.slurm/``, beside the step's own log.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field

from mtcore.api import (
    Ended,
    Job,
    PluginConfig,
    PluginError,
    Resources,
    Scheduler,
    StepError,
    job_state,
    largest,
    parse_time,
    run_job,
    total,
)

INSTALL_HINT = "scheduler 'slurm' needs submitit: pip install 'mtcore[slurm]' (or submitit)"
ALIVE = {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "RESIZING"}


class SlurmConfig(PluginConfig):
    partition: str | None = Field(None, max_length=200, description="partition; default: Slurm's")
    account: str | None = Field(None, max_length=200, description="account to charge")
    qos: str | None = Field(None, max_length=200, description="quality of service")
    time: int | str = Field(
        "24:00:00", description="wall time of a step without its own (resources: time)"
    )
    setup: list[str] = Field(
        default_factory=list,
        max_length=50,
        description="shell lines run before each job (module load ..., source venv/bin/activate)",
    )
    poll_seconds: float = Field(2.0, gt=0, le=600, description="how often squeue is asked")
    additional: dict[str, str | int] = Field(
        default_factory=dict,
        max_length=50,
        description="further sbatch options, e.g. {constraint: a100, exclusive: ''}",
    )


class SlurmScheduler(Scheduler[SlurmConfig]):
    """One ``sbatch`` job a step; the cluster's capacity read from ``sinfo``."""

    name = "slurm"
    remote: ClassVar[bool] = True

    def __init__(self, config: SlurmConfig | None = None) -> None:
        super().__init__(config)
        self._watched: dict[str, tuple[str, Path]] = {}  # step id -> (job id, job folder)
        self._workdir = Path(".")
        self._last_poll = 0.0

    def open(self, workdir: Path) -> None:
        try:
            import submitit  # noqa: F401
        except ImportError as exc:
            raise PluginError(INSTALL_HINT) from exc
        if shutil.which("sbatch") is None or shutil.which("squeue") is None:
            raise PluginError("scheduler 'slurm': sbatch and squeue are not on PATH")
        self._workdir = workdir
        self._nodes = self._sinfo()

    def _sinfo(self) -> list[Resources]:
        """CPUs, GPUs and memory of each node of the partition that is up."""
        cmd = ["sinfo", "-h", "-N", "-o", "%N|%c|%m|%G|%T"]
        if self.config.partition:
            cmd += ["-p", self.config.partition]
        found = _call(cmd)
        nodes: dict[str, Resources] = {}
        for line in found.splitlines():
            name, cpus, memory, gres, state = line.split("|")
            if state.rstrip("*").lower() in ("down", "drained", "drain", "fail"):
                continue
            gpus = sum(
                int(part.split(":")[-1].split("(")[0])
                for part in gres.split(",")
                if part.startswith("gpu") and part.split(":")[-1].split("(")[0].isdigit()
            )
            memory_gb = int(memory.rstrip("+")) / 1024 if memory.rstrip("+").isdigit() else 0.0
            nodes[name] = Resources(int(cpus.rstrip("+")), gpus, memory_gb)
        if not nodes:
            raise PluginError(
                f"scheduler 'slurm': no node is up in partition "
                f"{self.config.partition or '(default)'} (sinfo: {found.strip() or 'nothing'})"
            )
        return list(nodes.values())

    def capacity(self) -> Resources:
        return largest(self._nodes)

    def slots(self) -> Resources:
        return total(self._nodes)

    def submit(self, job: Job) -> str:
        import submitit

        folder = job.log.with_suffix(".slurm")
        executor = submitit.SlurmExecutor(folder=folder, python=sys.executable)
        res = job.resources
        params: dict[str, Any] = {
            "job_name": f"mtcore-{job.step_id}",
            "cpus_per_task": res.cpus,
            "ntasks_per_node": 1,
            "nodes": 1,
            "time": res.time or parse_time(self.config.time),
            "setup": list(self.config.setup),
        }
        if res.gpus:
            params["gpus_per_node"] = res.gpus
        if res.memory_gb:
            params["mem"] = f"{int(res.memory_gb * 1024)}M"
        for key in ("partition", "account", "qos"):
            value = getattr(self.config, key)
            if value:
                params[key] = value
        if self.config.additional:
            params["additional_parameters"] = dict(self.config.additional)
        executor.update_parameters(**params)
        submitted = executor.submit(run_job, str(job.folder))
        self._watched[job.step_id] = (str(submitted.job_id), job.folder)
        return str(submitted.job_id)

    def attach(self, job: Job, record: dict[str, Any]) -> bool:
        job_id = str(record.get("id", ""))
        if not job_id or self._states([job_id]).get(job_id) not in ALIVE:
            return False
        self._watched[job.step_id] = (job_id, job.folder)
        return True

    def wait(self, timeout: float) -> list[Ended]:
        deadline = time.monotonic() + timeout
        while True:
            ended = (
                self._poll()
                if time.monotonic() - self._last_poll >= self.config.poll_seconds
                else []
            )
            if ended or time.monotonic() >= deadline:
                return ended
            time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))

    def _poll(self) -> list[Ended]:
        self._last_poll = time.monotonic()
        if not self._watched:
            return []
        states = self._states([job_id for job_id, _ in self._watched.values()])
        out = []
        for step_id, (job_id, folder) in list(self._watched.items()):
            state = job_state(folder)
            if states.get(job_id) in ALIVE and state["state"] not in ("done", "failed"):
                continue
            if states.get(job_id) in ALIVE:  # finished its work, still tearing down
                continue
            del self._watched[step_id]
            error = None
            if state["state"] == "failed":
                error = StepError(
                    f"step {step_id!r} failed in slurm job {job_id}: {state.get('error')}"
                )
            out.append(Ended(step_id, error=error))
        return out

    def _states(self, job_ids: list[str]) -> dict[str, str]:
        """Slurm's state of each job it still lists (a finished job leaves the list)."""
        found = _call(["squeue", "-h", "-j", ",".join(job_ids), "-o", "%i|%T"], check=False)
        out = {}
        for line in found.splitlines():
            job_id, _, state = line.partition("|")
            out[job_id.strip()] = state.strip()
        return out

    def describe(self, job_id: str) -> str:
        return f"slurm job {job_id}"


def _call(cmd: list[str], check: bool = True) -> str:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    if check and done.returncode != 0:
        raise PluginError(f"scheduler 'slurm': {' '.join(cmd)} failed: {done.stderr.strip()}")
    return done.stdout
