"""What the driver tells while a run goes on, as protocols: the run layer announces steps
starting and ending and hands bars to the steps; what shows them (the CLI passes
:class:`mtcore.report.display.Display`) lives above it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol


class Progress(Protocol):
    """Fed by the driver (``started``, ``finished``, ``refresh``) from its own thread; the
    steps' bars come from :meth:`sink`. ``tty``: it draws a live block (bars wanted)."""

    tty: bool

    def sink(self, step_id: str, total: int | None, desc: str) -> Any: ...

    def started(
        self,
        step_id: str,
        kind: str,
        where: str,
        live: Callable[[], str],
        folder: Path | None = None,
    ) -> None: ...

    def finished(self, step_id: str, status: str, seconds: float | None = None) -> None: ...

    def refresh(self) -> None: ...

    def close(self) -> None: ...


class DisplayFactory(Protocol):
    """Makes a run's :class:`Progress` from its step count, a callable giving the seconds left
    and whether stderr is a terminal that shows progress."""

    def __call__(self, total: int, eta: Callable[[], float], *, tty: bool) -> Progress: ...
