"""A test step plugin for the scheduler tests, installed as a third party installs one: this
module's source and a ``.dist-info`` with its entry point, written into a folder that is put on
``sys.path`` and ``PYTHONPATH`` (so jobs in other processes, Slurm jobs and Ray actors find it).

``probe_wait`` sleeps ``seconds``, writes ``value`` joined with its inputs' values (the output,
whose hash the tests compare) and appends to ``probe.log`` (left out of output hashes) when it
started and ended, in which process and host, and with which ``CUDA_VISIBLE_DEVICES``. A file
named ``fail_flag`` that exists makes it fail once.
"""

from __future__ import annotations

import sys
from pathlib import Path

SOURCE = '''
"""Test step: waits, then writes its value (see tests/support/probe_steps.py)."""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from typing import ClassVar

from pydantic import Field

from mtcore.contracts.errors import StepError
from mtcore.contracts.plugin import PluginConfig
from mtcore.contracts.resources import Resources
from mtcore.contracts.step import Step, write_artifact_meta


class WaitConfig(PluginConfig):
    seconds: float = Field(0.0, ge=0, le=600, description="how long to wait")
    value: str = Field("", max_length=100, description="what to write")
    threads: int = Field(1, ge=1, le=64, description="CPU threads it declares")
    gpus: int = Field(0, ge=0, le=64, description="GPUs it declares")
    fail_flag: str = Field("", description="fail once when this file exists (then remove it)")


class WaitStep(Step):
    name = "probe_wait"
    Config = WaitConfig
    inputs: ClassVar[dict[str, bool]] = {"*": False}
    outputs: ClassVar[tuple[str, ...]] = ("out",)

    def resources(self):
        return Resources(cpus=self.config.threads, gpus=self.config.gpus)

    def run(self, ctx):
        out = ctx.output("out")
        record = {
            "step": ctx.step_id,
            "start": time.time(),
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "cuda": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "slurm_job": os.environ.get("SLURM_JOB_ID"),
        }
        if "ray" in sys.modules:  # in a Ray actor: the node it runs on
            import ray

            if ray.is_initialized():
                record["ray_node"] = ray.get_runtime_context().get_node_id()
        time.sleep(self.config.seconds)
        flag = self.config.fail_flag
        if flag and os.path.exists(flag):
            os.remove(flag)
            raise StepError(f"{ctx.step_id}: failing as asked")
        parts = [self.config.value]
        for role in sorted(ctx.inputs):
            parts.append((ctx.inputs[role].path / "value.txt").read_text())
        (out / "value.txt").write_text("+".join(parts))
        record["end"] = time.time()
        with open(out / "probe.log", "a") as handle:
            handle.write(json.dumps(record) + "\\n")
        write_artifact_meta(out, type="files")


def probe_task(task):
    """One task of probe_shards, in an executor worker: sleeps, says when and where."""
    index, seconds = task
    start = time.time()
    time.sleep(seconds)
    return {"index": index, "pid": os.getpid(), "start": start, "end": time.time()}


class ShardsConfig(PluginConfig):
    tasks: int = Field(4, ge=1, le=100, description="tasks through the executor")
    seconds: float = Field(0.3, ge=0, le=60, description="how long each task waits")
    value: str = Field("", max_length=100, description="what to write")


class ShardsStep(Step):
    """Maps ``tasks`` waits over ``ctx.executor``; records the executor's width and the
    most tasks that ran at once."""

    name = "probe_shards"
    Config = ShardsConfig
    parallel = True
    inputs: ClassVar[dict[str, bool]] = {"*": False}
    outputs: ClassVar[tuple[str, ...]] = ("out",)

    def run(self, ctx):
        out = ctx.output("out")
        started = time.time()
        tasks = [(i, self.config.seconds) for i in range(self.config.tasks)]
        done = list(ctx.executor.map(probe_task, tasks))
        edges = sorted([(d["start"], 1) for d in done] + [(d["end"], -1) for d in done])
        most = now = 0
        for _, step in edges:
            now += step
            most = max(most, now)
        (out / "value.txt").write_text(self.config.value + ":" + ",".join(
            str(d["index"]) for d in done))
        record = {"step": ctx.step_id, "start": started, "end": time.time(),
                  "workers": ctx.executor.workers, "at_once": most}
        with open(out / "probe.log", "a") as handle:
            handle.write(json.dumps(record) + "\\n")
        write_artifact_meta(out, type="files")
'''


def install(root: Path) -> Path:
    """Writes the plugin into ``root`` and puts ``root`` on ``sys.path``; returns ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "mtcore_probe_steps.py").write_text(SOURCE, encoding="utf-8")
    info = root / "mtcore_probe_steps-0.1.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: mtcore-probe-steps\nVersion: 0.1\n"
    )
    (info / "entry_points.txt").write_text(
        "[mtcore.steps]\nprobe_wait = mtcore_probe_steps:WaitStep\n"
        "probe_shards = mtcore_probe_steps:ShardsStep\n"
    )
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    return root


def records(workdir: Path) -> dict[str, dict]:
    """Each probe step's last log record, by step id, from the finished step directories."""
    import json

    out = {}
    for log in sorted(workdir.glob("steps/*/out/probe.log")):
        for line in log.read_text().splitlines():
            record = json.loads(line)
            out[record["step"]] = record
    return out
