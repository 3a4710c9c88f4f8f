"""What a run shows while it runs: steps done of total, what runs now, an estimate of the time
left, and one live line per running step (a training's updates, loss and speed read from its
log; a data step's bar). On a terminal the block is redrawn in place once a second; elsewhere
(a CI log, a file) plain lines: each step's start and end, and every ``every`` seconds the
running steps' lines. A step whose job was stopped and queued again (a Slurm job at its time
limit or preempted) says how many times, from its job folder's ``state.json``.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from mtcore.run.schedule import duration


class LiveBar:
    """A progress bar kept by the display instead of printed (tqdm's ``update`` and context
    manager, which is what steps use)."""

    def __init__(self, total: int | None, desc: str) -> None:
        self.total = total
        self.desc = desc
        self.n = 0
        self.started = time.monotonic()

    def update(self, n: int = 1) -> None:
        self.n += n

    def close(self) -> None:
        pass

    def __enter__(self) -> LiveBar:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def text(self) -> str:
        rate = self.n / max(time.monotonic() - self.started, 1e-9)
        total = f"/{self.total:,}" if self.total else ""
        return f"{self.desc} {self.n:,}{total} seg ({rate:,.0f}/s)"


@dataclass
class Running:
    step_id: str
    kind: str
    started: float
    where: str
    live: Callable[[], str]
    bar: LiveBar | None = None
    folder: Path | None = None  # the job folder, where a scheduler records requeues


def requeues(folder: Path | None) -> int:
    """Times the job of ``folder`` was stopped and queued again (its ``state.json``)."""
    if folder is None:
        return 0
    try:
        state = json.loads((folder / "state.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return 0
    return int(state.get("requeues", 0)) if isinstance(state, dict) else 0


@dataclass
class Display:
    """Fed by the runner (``started``, ``finished``, ``refresh``) from its own thread; bars
    come from the steps' threads through :meth:`sink`."""

    total: int
    eta: Callable[[], float]
    stream: IO[str] = field(default_factory=lambda: sys.stderr)
    tty: bool = False
    every: float = 30.0
    done: int = 0
    cached: int = 0
    running: dict[str, Running] = field(default_factory=dict)
    _drawn: int = 0
    _last_plain: float = field(default_factory=time.monotonic)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def sink(self, step_id: str, total: int | None, desc: str) -> LiveBar:
        bar = LiveBar(total, desc)
        with self._lock:
            if step_id in self.running:
                self.running[step_id].bar = bar
        return bar

    def started(
        self,
        step_id: str,
        kind: str,
        where: str,
        live: Callable[[], str],
        folder: Path | None = None,
    ) -> None:
        with self._lock:
            self.running[step_id] = Running(step_id, kind, time.monotonic(), where, live)
            self.running[step_id].folder = folder
        if not self.tty:
            self._line(f"{self._head()}: started {step_id} ({kind}) {where}")

    def finished(self, step_id: str, status: str, seconds: float | None = None) -> None:
        """``status``: ran, cached, failed or skipped."""
        with self._lock:
            self.running.pop(step_id, None)
            self.done += 1
            self.cached += status == "cached"
        if status != "cached":
            took = f" in {duration(seconds)}" if seconds is not None else ""
            self._line(f"{self._head()}: {status} {step_id}{took}")

    def refresh(self) -> None:
        if self.tty:
            self._draw()
        elif time.monotonic() - self._last_plain >= self.every and self.running:
            self._last_plain = time.monotonic()
            for line in self._lines()[1:]:
                self._line(line.strip())

    def close(self) -> None:
        if self.tty:
            self._clear()

    # --- text ----------------------------------------------------------------------------

    def _head(self) -> str:
        return f"[{self.done}/{self.total}]"

    def _lines(self) -> list[str]:
        with self._lock:
            running = list(self.running.values())
        left = self.eta()
        head = (
            f"mtcore: {self.done}/{self.total} steps done ({self.cached} cached), "
            f"{len(running)} running" + (f", about {duration(left)} left" if left > 0 else "")
        )
        lines = [head]
        now = time.monotonic()
        for item in sorted(running, key=lambda r: r.started):
            try:
                live = item.live() or (item.bar.text() if item.bar else "")
                again = requeues(item.folder)
            except Exception as exc:  # a display must never stop a run
                live, again = f"({type(exc).__name__})", 0
            if again:
                live += f"  (requeued {again}x)"
            lines.append(
                f"  {item.step_id} ({item.kind}) {duration(now - item.started)}"
                + (f"  {live}" if live else "")
                + (
                    f"  [{item.where}]"
                    if item.where and not item.where.startswith("thread")
                    else ""
                )
            )
        return lines

    def _draw(self) -> None:
        width = 200
        try:
            import shutil

            width = shutil.get_terminal_size((200, 20)).columns
        except OSError:
            pass
        lines = [line[: width - 1] for line in self._lines()]
        self._clear()
        self.stream.write("\n".join(lines) + "\n")
        self.stream.flush()
        self._drawn = len(lines)

    def _clear(self) -> None:
        if self._drawn:
            self.stream.write(f"\x1b[{self._drawn}F\x1b[J")
            self._drawn = 0

    def _line(self, text: str) -> None:
        if self.tty:
            self._clear()
        self.stream.write(text + "\n")
        self.stream.flush()
