"""What a step needs to run (CPU threads, GPUs, memory, wall time) and what a place offers.

A step kind declares its needs from its own settings (:meth:`mtcore.contracts.step.Step.resources`:
a
training's threads and ``distributed_world_size``); a recipe or profile overrides them under
``resources:``, by step id, by step kind, or for every step (``default``):

    resources:
      default: {time: "4:00:00"}
      train: {gpus: 8, time: "72:00:00"}     # every step of kind train
      init_enja: {gpus: 4}                   # one step

A training may be given a width: ``gpus: 8`` (one torch.distributed rank a GPU, NCCL),
``ranks: 2`` on CPU (gloo processes, each with the step's threads), ``nodes: 2`` to spread them
over two machines, or a range (``gpus: 1-16``) from which ``mtcore plan`` and the scheduler choose
the width that shortens the whole graph (:func:`mtcore.run.widths.choose_widths`). A training
whose recipe states its batch as tokens per update (``batch_tokens``) computes the same updates at
any width; its ``update_freq`` follows from the width. A step that widens by independent shards
(:attr:`mtcore.contracts.step.Step.widens_by_shards`: a translation) takes a width the same way,
each rank translating its share of the shards.

Resources say where and beside what a step runs, never what it computes: they are part of no
step's hash.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, replace
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from mtcore.contracts.errors import MtcoreError

_TIME = re.compile(r"^(?:(\d+)-)?(\d+):(\d{1,2})(?::(\d{1,2}))?$")


def parse_time(value: str | int) -> int:
    """Minutes of a Slurm-style wall time (``D-HH:MM:SS``, ``HH:MM:SS``, ``HH:MM``) or a plain
    number of minutes."""
    if isinstance(value, int):
        return value
    match = _TIME.match(value.strip())
    if not match:
        raise ValueError(f"{value!r} is not a wall time like '72:00:00', '2-00:00:00' or 90")
    days, hours, minutes, seconds = (int(g) if g else 0 for g in match.groups())
    return days * 1440 + hours * 60 + minutes + (1 if seconds else 0)


_RANGE = re.compile(r"^\s*(\d+)\s*-\s*(\d+)\s*$")


def parse_range(value: Any) -> Any:
    """``"1-16"`` as ``(1, 16)``; anything else unchanged (pydantic checks it)."""
    if isinstance(value, str):
        match = _RANGE.match(value)
        if not match:
            if value.strip().isdigit():
                return int(value)
            raise ValueError(f"{value!r} is not a count (8) or a range of counts (1-16)")
        low, high = int(match.group(1)), int(match.group(2))
        if not 1 <= low <= high:
            raise ValueError(f"{value!r}: a range is LOW-HIGH with 1 <= LOW <= HIGH")
        return (low, high)
    return value


class ResourceSpec(BaseModel):
    """One ``resources:`` entry; unset fields keep what the step declared."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    cpus: int | None = Field(None, ge=1, le=4096, description="CPU threads (of all its ranks)")
    gpus: int | tuple[int, int] | None = Field(
        None,
        description="GPUs, one torch.distributed rank each (NCCL); a range 'LOW-HIGH' lets the "
        "planner choose the width (a training that states batch_tokens)",
    )
    ranks: int | None = Field(
        None, ge=1, le=4096, description="torch.distributed processes of a CPU training (gloo)"
    )
    nodes: int | None = Field(
        None, ge=1, le=1024, description="machines the step's ranks spread over (evenly)"
    )
    memory_gb: float | None = Field(None, gt=0, le=65536, description="memory in GiB")
    time: int | None = Field(None, ge=1, description="wall-time limit in minutes (or D-HH:MM:SS)")

    @field_validator("time", mode="before")
    @classmethod
    def _time(cls, value: Any) -> Any:
        return parse_time(value) if isinstance(value, str) else value

    @field_validator("gpus", mode="before")
    @classmethod
    def _gpus(cls, value: Any) -> Any:
        return parse_range(value)

    @field_validator("gpus")
    @classmethod
    def _gpu_bounds(cls, value: Any) -> Any:
        for count in value if isinstance(value, tuple) else (value,):
            if count is not None and not 0 <= count <= 1024:
                raise ValueError(f"{count} GPUs: give 0 to 1024")
        return value


@dataclass(frozen=True)
class Resources:
    """What one step holds while it runs."""

    cpus: int = 1
    gpus: int = 0
    memory_gb: float = 0.0  # 0: not declared (no limit asked for)
    time: int = 0  # minutes; 0: no limit asked for
    ranks: int = 1  # torch.distributed processes: one a GPU where gpus, else CPU (gloo) ones
    nodes: int = 1  # machines the ranks spread over, evenly
    gpus_max: int = 0  # the top of a range (gpus: 1-16) the planner chooses in; 0: fixed
    distributed: bool = False  # runs as ranks, a rank a GPU (a training, a sharded translation)
    cpus_min: int = 0  # a step of executor tasks: given any multiple of this up to cpus; 0: fixed

    @property
    def width(self) -> int:
        """The ranks of a distributed step (1 for any other)."""
        return self.ranks

    @property
    def moldable(self) -> bool:
        """A width the planner may choose (a range of GPUs)."""
        return self.gpus_max > self.gpus

    @property
    def narrowable(self) -> bool:
        """CPUs the scheduler may cut to a multiple of ``cpus_min`` (a step's executor tasks)."""
        return 0 < self.cpus_min < self.cpus

    def with_cpus(self, cpus: int) -> Resources:
        """A narrowable step at ``cpus`` CPUs: the largest multiple of its tasks' threads that
        fits, at least one task's."""
        if not self.narrowable:
            return self
        unit = self.cpus_min
        return replace(self, cpus=max(unit, min(self.cpus, cpus) // unit * unit))

    def apply(self, spec: ResourceSpec | None) -> Resources:
        """These resources with ``spec``'s set fields. A CPU training given ``ranks`` keeps its
        threads a rank (its CPUs scale with the ranks); given ``gpus``, it has a rank a GPU."""
        if spec is None:
            return self
        values = {k: v for k, v in spec.model_dump().items() if v is not None}
        per_rank = max(1, self.cpus // max(1, self.ranks))
        out = replace(self, **{k: v for k, v in values.items() if k != "gpus"})
        if "gpus" in values:
            gpus = values["gpus"]
            low, high = (gpus, gpus) if isinstance(gpus, int) else gpus
            ranks = max(1, low) if self.distributed and low else out.ranks
            out = replace(out, gpus=low, gpus_max=high if high > low else 0, ranks=ranks)
            if self.distributed and "cpus" not in values:
                out = replace(out, cpus=per_rank * ranks)
        if "ranks" in values and "cpus" not in values:
            out = replace(out, cpus=per_rank * out.ranks)
        return out

    def at_width(self, gpus: int, per_node: int = 0) -> Resources:
        """A moldable step's resources at ``gpus`` GPUs (a rank each), spread over whole nodes
        of ``per_node`` GPUs where it is wider than one; its CPUs scale too."""
        per_rank = max(1, self.cpus // max(1, self.ranks))
        nodes = -(-gpus // per_node) if per_node and gpus > per_node else 1
        return replace(
            self, gpus=gpus, ranks=max(1, gpus), cpus=per_rank * max(1, gpus), gpus_max=0,
            nodes=nodes,
        )  # fmt: skip

    def fits(self, free: Resources) -> bool:
        return (
            self.cpus <= free.cpus
            and self.gpus <= free.gpus
            and (not self.memory_gb or not free.memory_gb or self.memory_gb <= free.memory_gb)
        )

    def minus(self, other: Resources) -> Resources:
        return replace(
            self,
            cpus=self.cpus - other.cpus,
            gpus=self.gpus - other.gpus,
            memory_gb=self.memory_gb - other.memory_gb if self.memory_gb else 0.0,
        )

    def plus(self, other: Resources) -> Resources:
        return replace(
            self,
            cpus=self.cpus + other.cpus,
            gpus=self.gpus + other.gpus,
            memory_gb=self.memory_gb + other.memory_gb if self.memory_gb else 0.0,
        )

    def describe(self) -> str:
        parts = [f"cpu={self.cpus}"]
        if self.gpus:
            parts.append(f"gpu={self.gpus}" + (f"-{self.gpus_max}" if self.moldable else ""))
        if self.ranks > 1:
            parts.append(f"ranks={self.ranks}")
        if self.nodes > 1:
            parts.append(f"nodes={self.nodes}")
        if self.memory_gb:
            parts.append(f"mem={self.memory_gb:g}G")
        if self.time:
            parts.append(f"time={self.time // 60}:{self.time % 60:02d}:00")
        return ",".join(parts)


def largest(nodes: list[Resources]) -> Resources:
    """The most one of ``nodes`` offers in each resource (what one step can get)."""
    return Resources(
        max(n.cpus for n in nodes), max(n.gpus for n in nodes), max(n.memory_gb for n in nodes)
    )


def total(nodes: list[Resources]) -> Resources:
    """What ``nodes`` offer together (what all running steps can hold)."""
    return Resources(
        sum(n.cpus for n in nodes), sum(n.gpus for n in nodes), sum(n.memory_gb for n in nodes)
    )


SLOTS_ENV = "MTCORE_SLOTS"
"""Caps for runs that pass none (``cpu=N,gpu=M``, as ``--slots``): a machine that runs several
mtcore runs at once (the test tiers' pytest-xdist workers) gives each its share."""


def cores() -> int:
    """The cores this process may run on: its CPU affinity (``taskset``, a Slurm or container
    allocation), not the machine's count."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def default_slots() -> dict[str, int]:
    """The caps of a run given none: ``MTCORE_SLOTS`` where set, else none."""
    text = os.environ.get(SLOTS_ENV, "").strip()
    return parse_slots(text, f"{SLOTS_ENV}={text!r}") if text else {}


def parse_slots(text: str, where: str = "") -> dict[str, int]:
    """``cpu=N,gpu=M,steps=K`` (any may be left out) as ``{"cpu": N, "gpu": M, "steps": K}``:
    ``steps`` caps how many steps run at once (``steps=1``: one at a time, each as wide as
    the CPUs allow, as ``make -j1``)."""
    where = where or f"--slots {text!r}"
    out: dict[str, int] = {}
    for part in text.split(","):
        key, sep, value = part.strip().partition("=")
        if not sep or key not in ("cpu", "gpu", "steps") or not value.isdigit():
            raise MtcoreError(
                f"{where}: {part.strip()!r} is not cpu=N, gpu=N or steps=N "
                "(e.g. --slots cpu=4,gpu=2)"
            )
        out[key] = int(value)
    for key in ("cpu", "steps"):
        if out.get(key) == 0:
            raise MtcoreError(f"{where}: {key} must be at least 1")
    return out


def step_resources(
    declared: Resources, step_id: str, kind: str, table: dict[str, ResourceSpec]
) -> Resources:
    """The step's resources: what its kind declares, overridden by the recipe's ``default``
    entry, then its ``<kind>`` entry, then its ``<step id>`` entry, each only in what it sets."""
    return declared.apply(table.get("default")).apply(table.get(kind)).apply(table.get(step_id))
