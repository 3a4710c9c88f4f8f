"""The default executor: a local process pool, results in task order, bounded in flight."""

from __future__ import annotations

import multiprocessing
import os
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any

from pydantic import Field

from mtcore.api import Executor, PluginConfig
from mtcore.api.engine import die_with_parent


class LocalConfig(PluginConfig):
    workers: int = Field(
        default_factory=lambda: os.cpu_count() or 1,
        ge=1,
        le=1024,
        description="worker processes; 1 runs tasks in the calling process",
    )
    max_in_flight: int = Field(
        0, ge=0, le=10_000, description="tasks submitted ahead; 0 means twice the workers"
    )


class LocalExecutor(Executor[LocalConfig]):
    """Runs ``fn(task)`` over a process pool (spawned workers: no inherited locks or threads).
    At most ``max_in_flight`` tasks are pending at once, so a lazily read corpus stays lazy."""

    name = "local"

    def __init__(self, config: LocalConfig | None = None) -> None:
        super().__init__(config)
        self._pool: ProcessPoolExecutor | None = None
        self._lock = threading.Lock()  # steps running side by side share the pool
        self._width = self.config.workers  # tasks of this view at once (narrowed: fewer)
        self._shared = self  # the executor whose pool a narrowed view uses

    @property
    def workers(self) -> int:
        return self._width

    def narrowed(self, workers: int) -> LocalExecutor:
        """A view of this pool for one step that holds ``workers`` CPUs: it has that many
        tasks in the pool at once, so steps side by side never run more workers than the CPUs
        they hold between them. One still runs in a worker process (not in the step's thread,
        which shares the driver's interpreter with the steps beside it)."""
        if workers >= self.config.workers:
            return self
        view = LocalExecutor(self.config)
        view._shared, view._width = self._shared, max(1, workers)
        return view

    def map(self, fn: Callable[[Any], Any], tasks: Iterable[Any]) -> Iterator[Any]:
        shared = self._shared
        if shared.config.workers == 1:
            for task in tasks:
                yield fn(task)
            return
        with shared._lock:
            if shared._pool is None:
                shared._pool = ProcessPoolExecutor(
                    shared.config.workers,
                    mp_context=multiprocessing.get_context("spawn"),
                    initializer=die_with_parent,  # a killed run leaves no workers behind
                    initargs=(os.getpid(),),
                )
            pool = shared._pool
        narrow = self._width < shared.config.workers
        limit = self._width if narrow else self.config.max_in_flight or 2 * self._width
        pending: deque[Future[Any]] = deque()
        for task in tasks:
            pending.append(pool.submit(fn, task))
            if len(pending) >= limit:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None

    def abort(self) -> None:
        """Ends the workers now: a task that is running is not waited for."""
        if self._pool is not None:
            for process in list(getattr(self._pool, "_processes", {}).values()):
                process.terminate()
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
