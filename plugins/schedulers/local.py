"""The default scheduler: steps side by side on this machine, within its cores and GPUs.

A step without GPUs runs in a thread of the driver (its tools are processes of their own:
fairseq-train forked warm, the executor's pool workers), so it shares the warm starts and the
worker pool of the run. A step with GPUs runs as ``job_command`` (``python -m
mtcore.run.jobs``) with its own ``CUDA_VISIBLE_DEVICES``: the devices it was given, and only
those, for every process it starts. ``mtcore run --slots cpu=N,gpu=M`` caps what it uses
(``cpu=1``: one step at a time).
"""

from __future__ import annotations

import os
import queue
import subprocess
import threading
from pathlib import Path

from pydantic import Field

from mtcore.api import PluginConfig, Scheduler, StepError
from mtcore.api.engine import PARENT_ENV, Ended, Job, Resources, cores, job_command, tail


def visible_gpus() -> int:
    """CUDA devices of this machine without importing torch: ``CUDA_VISIBLE_DEVICES`` where set,
    else the NVIDIA driver's device list."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([d for d in visible.split(",") if d.strip() and d.strip() != "-1"])
    gpus = Path("/proc/driver/nvidia/gpus")
    return len(list(gpus.iterdir())) if gpus.is_dir() else 0


def total_memory_gb() -> float:
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) / 1024**2
    except OSError:
        pass
    return 0.0


class LocalSchedulerConfig(PluginConfig):
    cpus: int | None = Field(
        None,
        ge=1,
        le=4096,
        description="CPU threads steps hold at once; default: the cores it may use",
    )
    gpus: int | None = Field(
        None, ge=0, le=256, description="GPUs steps hold at once; default: the visible devices"
    )


class LocalScheduler(Scheduler[LocalSchedulerConfig]):
    """Threads for CPU steps, ``python -m mtcore.run.jobs`` processes for GPU steps."""

    name = "local"

    def __init__(self, config: LocalSchedulerConfig | None = None) -> None:
        super().__init__(config)
        self._ended: queue.Queue[Ended] = queue.Queue()
        self._jobs: queue.Queue[Job | None] = queue.Queue()
        self._threads: list[threading.Thread] = []
        self._idle = 0
        self._lock = threading.Lock()
        self._gpus_free: list[int] = []
        self._processes: dict[str, subprocess.Popen[bytes]] = {}

    def open(self, workdir: Path) -> None:
        self._gpus_free = list(range(self.capacity().gpus))

    def capacity(self) -> Resources:
        c = self.config
        cpus = c.cpus if c.cpus is not None else cores()
        gpus = c.gpus if c.gpus is not None else visible_gpus()
        return Resources(cpus=cpus, gpus=gpus, memory_gb=total_memory_gb())

    def submit(self, job: Job) -> str:
        if job.resources.gpus or job.call is None:
            return self._start_process(job)
        with self._lock:
            if self._idle == 0:  # threads live as long as the run: their pool workers too
                thread = threading.Thread(target=self._serve, name="mtcore-step", daemon=True)
                self._threads.append(thread)
                self._idle += 1
                thread.start()
            self._idle -= 1
        self._jobs.put(job)
        return f"thread:{job.step_id}"

    def _serve(self) -> None:
        while (job := self._jobs.get()) is not None:
            assert job.call is not None
            try:
                self._ended.put(Ended(job.step_id, manifest=job.call()))
            except BaseException as exc:  # reported to the driver, which decides
                self._ended.put(Ended(job.step_id, error=exc))
            finally:
                with self._lock:
                    self._idle += 1

    def _start_process(self, job: Job) -> str:
        devices = [self._gpus_free.pop(0) for _ in range(job.resources.gpus)]
        env = {**os.environ, PARENT_ENV: str(os.getpid())}
        if devices or self.capacity().gpus:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(d) for d in devices)
        job.log.parent.mkdir(parents=True, exist_ok=True)
        with open(job.log, "ab") as log:
            process = subprocess.Popen(
                job_command(job.folder),
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
            )
        self._processes[job.step_id] = process

        def watch() -> None:
            code = process.wait()
            self._gpus_free.extend(devices)
            self._processes.pop(job.step_id, None)
            error = None
            if code != 0:
                error = StepError(
                    f"step {job.step_id!r} failed (exit status {code}); last lines of "
                    f"{job.log}:\n{tail(job.log, 20)}"
                )
            self._ended.put(Ended(job.step_id, error=error))

        threading.Thread(target=watch, name="mtcore-job-watch", daemon=True).start()
        return f"pid:{process.pid}"

    def wait(self, timeout: float) -> list[Ended]:
        out: list[Ended] = []
        try:
            out.append(self._ended.get(timeout=timeout))
        except queue.Empty:
            return out
        while True:
            try:
                out.append(self._ended.get_nowait())
            except queue.Empty:
                return out

    def stop(self) -> None:
        for process in list(self._processes.values()):
            if process.poll() is None:
                process.kill()

    def close(self) -> None:
        for _ in self._threads:
            self._jobs.put(None)
