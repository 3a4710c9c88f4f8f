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

from mtcore.api import Executor, PluginConfig, die_with_parent


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

    @property
    def workers(self) -> int:
        return self.config.workers

    def map(self, fn: Callable[[Any], Any], tasks: Iterable[Any]) -> Iterator[Any]:
        if self.config.workers == 1:
            for task in tasks:
                yield fn(task)
            return
        with self._lock:
            if self._pool is None:
                self._pool = ProcessPoolExecutor(
                    self.config.workers,
                    mp_context=multiprocessing.get_context("spawn"),
                    initializer=die_with_parent,  # a killed run leaves no workers behind
                    initargs=(os.getpid(),),
                )
            pool = self._pool
        limit = self.config.max_in_flight or 2 * self.config.workers
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
