"""Steps as Slurm jobs, submitted through submitit: each an ``sbatch`` job with the step's CPUs,
GPUs, memory and wall time, running ``mtcore.run.jobs.run_job`` on the workdir (a file system that
every node shares, at the same path). The driver polls ``squeue`` for its jobs and reads what
each job wrote of itself; a job outlives the driver, and a new driver re-attaches to it by the
id recorded in the step's job folder. submitit's files (the job's stdout and stderr among them)
are in ``logs/steps/<step>-<hash>.slurm/``, beside the step's own log.

A training of N ranks (``resources: {ranks: N, nodes: M}``, or N GPUs) is one job of ``M``
nodes x ``N / M`` tasks; submitit runs :class:`SlurmTask` in every task: task 0 runs the step,
the others follow it as ranks (:func:`mtcore.run.jobs.run_task`).

A job signalled before its time limit (``--signal``, submitit's ``signal_delay_s``) or preempted
(submitit's signal) has its training save where it is (fairseq's checkpoint_last.pt, mid-epoch)
and is queued again with the same step and hash (:meth:`SlurmTask.checkpoint`), at most
``requeues`` times; ``state.json`` counts the requeues and the driver keeps waiting for it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field, field_validator

from mtcore.api import PluginConfig, PluginError, Scheduler, StepError
from mtcore.api.engine import Ended, Job, Resources, job_state, largest, parse_time, total

log = logging.getLogger("mtcore")
CONTROL = re.compile(r"[\x00-\x1f\x7f]")
OPTION = re.compile(r"^[a-z][a-z0-9_-]{0,63}$")
INSTALL_HINT = "scheduler 'slurm' needs submitit: pip install 'mtcore[slurm]' (or submitit)"
ALIVE = {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "RESIZING"}
ALIVE |= {"REQUEUE_FED", "REQUEUE_HOLD", "PREEMPTED"}  # on their way back to the queue
SIGNAL_DELAY = 90  # seconds between the signal and the time limit (submitit's signal_delay_s)
SAVE_SIGNAL_ENV = "MTCORE_SAVE_SIGNAL"  # fairseq_entry saves and exits on this signal
SAVERS = ("fairseq_entry",)  # commands that save on SAVE_SIGNAL_ENV's signal: waited for


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
    requeues: int = Field(
        20,
        ge=0,
        le=1000,
        description="times a step's job signalled before its time limit or preempted is queued "
        "again (its training resumes where it saved); 0: never",
    )

    @field_validator("partition", "account", "qos", "time")
    @classmethod
    def _one_word(cls, value: Any) -> Any:
        if isinstance(value, str) and CONTROL.search(value):
            raise ValueError(f"{value!r} holds a control character (a newline would start a "
                             "line of its own in the job script)")  # fmt: skip
        return value

    @field_validator("additional")
    @classmethod
    def _options(cls, value: dict[str, str | int]) -> dict[str, str | int]:
        for key, setting in value.items():
            if not OPTION.match(key):
                raise ValueError(f"{key!r} is not an sbatch option name (e.g. constraint, gres)")
            if isinstance(setting, str) and CONTROL.search(setting):
                raise ValueError(f"{key}: {setting!r} holds a control character (a newline "
                                 "would start a line of its own in the job script)")  # fmt: skip
        return value


class SlurmScheduler(Scheduler[SlurmConfig]):
    """One ``sbatch`` job a step; the cluster's capacity read from ``sinfo``."""

    name = "slurm"
    remote: ClassVar[bool] = True

    def __init__(self, config: SlurmConfig | None = None) -> None:
        super().__init__(config)
        self._watched: dict[str, tuple[str, Path]] = {}  # step id -> (job id, job folder)
        self._workdir = Path(".")
        self._last_poll = 0.0
        self._requeues: dict[str, int] = {}

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
        if CONTROL.search(str(folder)) or CONTROL.search(str(job.folder)):
            raise StepError(
                f"{job.step_id}: the workdir path {str(job.folder)!r} holds a control character; "
                "a Slurm job script cannot name it safely (use a path without one)"
            )
        executor = submitit.SlurmExecutor(
            folder=folder, python=sys.executable, max_num_timeout=self.config.requeues
        )
        res = job.resources
        params: dict[str, Any] = {
            "job_name": f"mtcore-{job.step_id}",
            "time": res.time or parse_time(self.config.time),
            "setup": list(self.config.setup),
            "signal_delay_s": signal_delay(res.time or parse_time(self.config.time)),
            **task_layout(res),
        }
        if res.memory_gb:
            params["mem"] = f"{int(res.memory_gb * 1024)}M"
        for key in ("partition", "account", "qos"):
            value = getattr(self.config, key)
            if value:
                params[key] = value
        if self.config.additional:
            params["additional_parameters"] = dict(self.config.additional)
        executor.update_parameters(**params)
        submitted = executor.submit(SlurmTask(str(job.folder), self.config.requeues, str(folder)))
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
            self._note_requeues(step_id, job_id, int(state.get("requeues", 0)))
            if state["state"] == "preempted" and states.get(job_id) not in ALIVE:
                states[job_id] = _scontrol_state(job_id)  # squeue may miss it while requeued
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

    def _note_requeues(self, step_id: str, job_id: str, requeues: int) -> None:
        if requeues > self._requeues.get(step_id, 0):
            log.info(
                "step %s: slurm job %s stopped and queued again (%d of at most %d requeues)",
                step_id, job_id, requeues, self.config.requeues,
            )  # fmt: skip
            self._requeues[step_id] = requeues

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


def task_layout(res: Resources) -> dict[str, int]:
    """sbatch's shape of a step: one task, or one task a rank over ``res.nodes`` nodes."""
    if res.ranks <= 1:
        out = {"nodes": 1, "ntasks_per_node": 1, "cpus_per_task": res.cpus}
        if res.gpus:
            out["gpus_per_node"] = res.gpus
        return out
    nodes = max(1, res.nodes)
    if res.ranks % nodes:
        raise PluginError(
            f"scheduler 'slurm': {res.ranks} ranks cannot spread evenly over {nodes} nodes"
        )
    out = {
        "nodes": nodes,
        "ntasks_per_node": res.ranks // nodes,
        "cpus_per_task": max(1, res.cpus // res.ranks),
    }
    if res.gpus:
        out["gpus_per_node"] = max(1, res.gpus // nodes)
    return out


class SlurmTask:
    """What submitit runs in each task of a step's job (pickled, so module-level). Task 0 runs
    the step; the others are its further ranks. On submitit's signal (the time limit near, or
    a preemption) :meth:`checkpoint` has the running training save and the job queued again."""

    def __init__(self, folder: str, requeues: int, logs: str) -> None:
        self.folder = folder
        self.requeues = requeues  # the most times the job is queued again
        self.logs = logs  # submitit's folder: a further rank's output goes beside its own

    def __call__(self) -> str:
        from mtcore.api.engine import run_task

        env = os.environ
        token = f"{env.get('SLURM_JOB_ID', '0')}-{env.get('SLURM_RESTART_COUNT', '0')}"
        env[SAVE_SIGNAL_ENV] = _save_signal().name
        # a warm start's zygote would die of the signal and take the training with it
        env["MTCORE_WARM_START"] = "0"
        rank = int(env.get("SLURM_PROCID", "0"))
        status = run_task(
            self.folder,
            rank,
            int(env.get("SLURM_NTASKS", "1")),
            int(env.get("SLURM_LOCALID", "0")),
            token,
            Path(self.logs) / f"rank-{rank}.log",
        )
        if status:
            sys.exit(status)
        return "done"

    def checkpoint(self) -> Any:
        """Called by submitit's signal handler on task 0 (the job's main thread, while the step
        waits for its training): forwards the signal to the training, waits until it has saved
        and exited, records the requeue; submitit then requeues the job and exits."""
        from submitit.helpers import DelayedSubmission

        from mtcore.api.engine import record_requeue, requeue_count

        folder = Path(self.folder)
        stop_savers(_save_signal(), time.monotonic() + SIGNAL_DELAY - 15)
        if requeue_count(folder) >= self.requeues:
            raise StepError(
                f"job {folder.name}: signalled (time limit or preemption) after "
                f"{self.requeues} requeues, the most the recipe allows (slurm requeues)"
            )
        record_requeue(folder, "signalled by Slurm: time limit near or preempted")
        return DelayedSubmission(self)


def signal_delay(minutes: int) -> int:
    """Seconds before the time limit that the job is signalled: ``SIGNAL_DELAY``, or a quarter
    of a short limit (at least 30 s), so that a job of a few minutes still trains most of its
    time between requeues (Slurm may signal up to a minute before the asked time)."""
    return max(30, min(SIGNAL_DELAY, minutes * 60 // 4))


def _save_signal() -> signal.Signals:
    """The signal submitit handles (``SUBMITIT_PREEMPT_SIGNAL``, USR2 by default)."""
    name = os.environ.get("SUBMITIT_PREEMPT_SIGNAL", "USR2")
    return signal.Signals[name if name.startswith("SIG") else "SIG" + name]


def stop_savers(signum: signal.Signals, deadline: float) -> None:
    """Sends ``signum`` to this process's descendants that save on it (:data:`SAVERS`) and
    waits, until ``deadline``, for them to exit; they stay unreaped for their parent's wait."""
    savers = [pid for pid in _descendants(os.getpid()) if _is_saver(pid)]
    for pid in savers:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)
    while any(_alive(pid) for pid in savers) and time.monotonic() < deadline:
        time.sleep(0.2)


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _is_saver(pid: int) -> bool:
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False
    return any(name in command for name in SAVERS)


def _alive(pid: int) -> bool:
    """Running, not a zombie (exited, not yet waited for)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2 :].split()[0] != "Z"


def _scontrol_state(job_id: str) -> str:
    """The job's state as ``scontrol`` tells it ("PENDING" for one queued again); "" when
    Slurm no longer knows the job."""
    found = _call(["scontrol", "-o", "show", "job", job_id], check=False)
    for field in found.split():
        if field.startswith("JobState="):
            return field.split("=", 1)[1]
    return ""


def _call(cmd: list[str], check: bool = True) -> str:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    if check and done.returncode != 0:
        raise PluginError(f"scheduler 'slurm': {' '.join(cmd)} failed: {done.stderr.strip()}")
    return done.stdout
