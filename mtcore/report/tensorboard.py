"""TensorBoard event files of a run's trainings (``mtcore run --tensorboard [DIR]``): a training
that runs hands fairseq ``--tensorboard-logdir DIR/<step id>`` and fairseq writes its records
while it trains; a training without event files there when the run ends (found complete in the
cache, or trained by a run without ``--tensorboard``) gets them written from its log, as the
MLflow tracker logs its curves: one event file in ``DIR/<step id>``, a scalar per curve
(``train/loss``, ``epoch/loss``, ``valid/loss``, ...) at each logged update. A folder that
already holds event files is left as it is, so a second run writes nothing twice."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mtcore.contracts.errors import MtcoreError
from mtcore.contracts.hooks import hookimpl
from mtcore.contracts.step import Step

if TYPE_CHECKING:
    from mtcore.contracts.registry import Registry
    from mtcore.run.results import RunResult

BOARD = "mtcore.tensorboard"
"""The name the writer is registered under in a run's hook manager."""
ENV = "MTCORE_TENSORBOARD"
"""The folder the trainings of a run hand fairseq (read by the train steps, also as jobs)."""
EVENTS = "events.out.tfevents.*"
SUFFIX = ".mtcore"  # the event files written here, told from fairseq's


@dataclass
class Board:
    """What a run's end found for each training, by step id."""

    live: list[str] = field(default_factory=list)  # ran: fairseq wrote its events
    written: list[str] = field(default_factory=list)  # written from its log now
    kept: list[str] = field(default_factory=list)  # cached, with event files already
    no_log: list[str] = field(default_factory=list)  # a training without curves to write


class TensorboardWriter:
    """The hook plugin ``mtcore run --tensorboard`` registers: at a run's end, the event files
    of every training of the run that has none in ``folder``."""

    def __init__(self, folder: Path, registry: Registry | None = None) -> None:
        self.folder = folder
        self.registry = registry
        self.board = Board()

    @hookimpl
    def mtcore_run_finished(self, recipe: Any, result: RunResult, label: str | None) -> None:
        if self.registry is None:
            from mtcore.contracts.registry import load_registry

            self.registry = load_registry()
        for item in result.results:
            try:
                cls = self.registry.load("steps", item.planned.spec.kind)
            except MtcoreError:
                continue
            if not has_curves(cls):
                continue  # not a training
            self._one(item.planned.id, item.status, cls.curves(item.path))

    def _one(self, step_id: str, status: str, curves: dict[str, list[tuple[int, float]]]) -> None:
        target = self.folder / step_id
        if any(target.rglob(EVENTS)):
            (self.board.live if status == "ran" else self.board.kept).append(step_id)
        elif not curves:
            self.board.no_log.append(step_id)
        else:
            write_events(target, curves)
            self.board.written.append(step_id)

    def summary(self) -> list[str]:
        """What was written where, and why not where nothing was."""
        board = self.board
        counts = [
            (len(board.live), "logged by fairseq while training"),
            (len(board.written), "written from their logs"),
            (len(board.kept), "with event files from an earlier run, left as they are"),
        ]
        said = ", ".join(f"{n} {what}" for n, what in counts if n)
        total = sum(n for n, _ in counts) + len(board.no_log)
        trainings = f"{total} training" + ("" if total == 1 else "s")
        lines = [f"tensorboard: {trainings} in {self.folder}" + (f": {said}" if said else "")]
        if board.no_log:
            lines.append("tensorboard: no curves in the training log of " + ", ".join(board.no_log))
        return lines


def has_curves(cls: type[Step]) -> bool:
    """Whether a step kind reads curves (it overrides :meth:`Step.curves`): a training."""
    mro = cls.__mro__
    return Step in mro and any("curves" in vars(klass) for klass in mro[: mro.index(Step)])


def write_events(folder: Path, curves: dict[str, list[tuple[int, float]]]) -> None:
    """One event file in ``folder`` holding every point of ``curves`` as a scalar with its
    update as the step (TensorBoard's own writer and protocol buffers: no TensorFlow, no
    torch)."""
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    folder.mkdir(parents=True, exist_ok=True)
    writer = EventFileWriter(str(folder), filename_suffix=SUFFIX)
    now = time.time()
    try:
        for name, line in curves.items():
            for update, value in line:
                scalar = Summary(value=[Summary.Value(tag=name, simple_value=float(value))])
                writer.add_event(Event(wall_time=now, step=int(update), summary=scalar))
    finally:
        writer.close()
