"""Persistent worker processes (``run_in_worker``): one per key, reused by later calls (the
modules a call imported and the state it kept stay loaded), replaced after a crash, a timeout or
the memory bound, quitting when idle and started again silently, one call at a time per key from
any thread."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mtcore.api import PluginError
from mtcore_plugins.common.runtime import isolated
from mtcore_plugins.common.runtime.isolated import run_in_worker, stop_workers

CALLS = 0
"""Calls of :func:`count` in this process (a worker's own count: the module is imported once
per worker)."""


def count(pause: float = 0.0) -> tuple[int, int, float, float]:
    """(pid, calls so far in this process, start, end): ``pause`` seconds between them."""
    global CALLS
    start = time.monotonic()
    CALLS += 1
    calls = CALLS
    time.sleep(pause)
    return os.getpid(), calls, start, time.monotonic()


def abort_if(flag: str) -> int:
    if Path(flag).exists():
        os.abort()
    return os.getpid()


def allocate(size: int) -> int:
    return len(bytearray(size))


def fail(kind: str) -> None:
    if kind == "plugin":
        raise PluginError("no model at /nowhere")
    raise ValueError("bad value")


def unpicklable() -> object:
    return lambda: None


def reporting(steps: int, pause: float) -> int:
    """Reports ``i`` of ``steps`` done every ``pause`` seconds, as a metric's batches do."""
    for i in range(1, steps + 1):
        time.sleep(pause)
        isolated.report(i, steps)
    return steps


@pytest.fixture(autouse=True)
def fresh_pool() -> Iterator[None]:
    yield
    stop_workers()


def test_a_second_call_reuses_the_worker_and_what_it_loaded() -> None:
    pid, calls, *_ = run_in_worker("reuse", "task", count)
    again, calls_again, *_ = run_in_worker("reuse", "task", count)
    assert pid != os.getpid() and again == pid
    assert (calls, calls_again) == (1, 2)  # the module and its counter stayed in the worker
    other, other_calls, *_ = run_in_worker("another", "task", count)
    assert other not in (pid, os.getpid()) and other_calls == 1  # one worker per key
    assert CALLS == 0


def test_a_crash_names_the_task_and_the_next_call_gets_a_fresh_worker(tmp_path: Path) -> None:
    flag = tmp_path / "crash"
    pid = run_in_worker("crash", "step x: metric 'm'", abort_if, str(flag))
    flag.touch()
    with pytest.raises(PluginError, match=r"^step x: metric 'm': .*killed by SIGABRT"):
        run_in_worker("crash", "step x: metric 'm'", abort_if, str(flag))
    assert "crash" not in isolated._POOL
    flag.unlink()
    fresh = run_in_worker("crash", "step x: metric 'm'", abort_if, str(flag))
    assert fresh != pid


def test_an_idle_worker_quits_and_the_next_call_starts_one_silently() -> None:
    pid, *_ = run_in_worker("idle", "task", count, idle=0.5)
    worker = isolated._POOL["idle"]
    deadline = time.monotonic() + 20
    while worker.process.is_alive() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert worker.process.exitcode == 0  # quit by itself, cleanly
    fresh, calls, *_ = run_in_worker("idle", "task", count, idle=0.5)
    assert fresh != pid and calls == 1


@pytest.mark.parametrize("delivered", [False, True])
def test_a_call_that_crosses_the_idle_exit_runs_in_a_fresh_worker(delivered: bool) -> None:
    """The worker quit after the parent found it alive: the call does not reach it (a broken
    pipe) or reaches it too late (its farewell is the answer); either way nothing ran there."""
    pid, *_ = run_in_worker("race", "task", count, idle=0.3)
    worker = isolated._POOL["race"]
    time.sleep(1.0)  # it sent its farewell and quit, but nothing has reaped it yet
    worker.alive = lambda: True  # type: ignore[method-assign]  # as if it were found alive
    if delivered:
        worker.conn.send_bytes = lambda payload: None  # type: ignore[method-assign]
    fresh, calls, *_ = run_in_worker("race", "task", count, idle=0.3)
    assert fresh != pid and calls == 1


def test_the_memory_bound_is_a_memory_error_and_the_worker_is_replaced() -> None:
    pid = run_in_worker("memory", "metric 'big'", abort_if, "/nonexistent", memory_gb=0.5)
    with pytest.raises(PluginError, match=r"^metric 'big': out of memory above .* 0.5 GB"):
        run_in_worker("memory", "metric 'big'", allocate, 3 << 30, memory_gb=0.5)
    assert run_in_worker("memory", "metric 'big'", allocate, 1 << 20, memory_gb=0.5) == 1 << 20
    assert isolated._POOL["memory"].pid != pid


def test_another_memory_bound_replaces_the_worker() -> None:
    pid, *_ = run_in_worker("bound", "task", count)
    bounded, calls, *_ = run_in_worker("bound", "task", count, memory_gb=2.0)
    assert bounded != pid and calls == 1


def test_a_hung_call_times_out_and_the_next_call_gets_a_fresh_worker() -> None:
    pid, *_ = run_in_worker("hang", "task", count)
    with pytest.raises(PluginError, match=r"^task: the worker process gave no result in 1 s"):
        run_in_worker("hang", "task", count, 30.0, timeout=1.0)
    fresh, calls, *_ = run_in_worker("hang", "task", count)
    assert fresh != pid and calls == 1


def test_calls_from_two_threads_on_one_key_run_one_at_a_time() -> None:
    results: list[tuple[int, int, float, float]] = []
    errors: list[BaseException] = []

    def call() -> None:
        try:
            results.append(run_in_worker("threads", "task", count, 0.5))
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=call) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    (pid1, calls1, start1, end1), (pid2, calls2, start2, end2) = sorted(results, key=lambda r: r[1])
    assert pid1 == pid2 and (calls1, calls2) == (1, 2)
    assert start2 >= end1  # the second started after the first ended


def test_exceptions_keep_their_wording_and_the_worker() -> None:
    with pytest.raises(PluginError, match=r"^task: no model at /nowhere$"):
        run_in_worker("errors", "task", fail, "plugin")
    pid = isolated._POOL["errors"].pid
    with pytest.raises(PluginError, match=r"(?s)^task: ValueError: bad value\n.*Traceback"):
        run_in_worker("errors", "task", fail, "value")
    with pytest.raises(PluginError, match=r"^task: \w+Error: .*"):
        run_in_worker("errors", "task", unpicklable)
    assert isolated._POOL["errors"].pid == pid  # an exception is not a crash


def test_a_call_reports_its_progress_to_the_caller() -> None:
    seen: list[tuple[int, int]] = []
    follow = lambda done, total: seen.append((done, total))  # noqa: E731
    assert run_in_worker("progress", "task", reporting, 6, 0.3, progress=follow) == 6
    assert seen[-1] == (6, 6)  # the last report always comes
    assert 2 <= len(seen) < 6 and seen == sorted(seen)  # at most one every half second
    assert run_in_worker("progress", "task", reporting, 2, 0.0) == 2  # no follower: dropped
    with pytest.raises(PluginError, match="gave no result in 1 s"):  # reports do not extend it
        run_in_worker("progress", "task", reporting, 10, 0.3, timeout=1.0, progress=follow)


def test_a_forked_child_starts_its_own_workers() -> None:
    pid, *_ = run_in_worker("fork", "task", count)
    child = os.fork()
    if child == 0:  # the parent's worker is not the child's to use or stop
        code = 1
        try:
            other, calls, *_ = run_in_worker("fork", "task", count)
            code = 0 if other != pid and calls == 1 else 2
            stop_workers()
        finally:
            os._exit(code)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert run_in_worker("fork", "task", count)[:2] == (pid, 2)


def test_past_the_worker_bound_the_least_recently_used_worker_stops(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(isolated, "MAX_WORKERS", 2)
    run_in_worker("a", "task", count)
    run_in_worker("b", "task", count)
    first = isolated._POOL["a"]
    assert run_in_worker("a", "task", count)[1] == 2  # "b" is now the least recently used
    run_in_worker("c", "task", count)
    assert sorted(isolated._POOL) == ["a", "c"] and isolated._POOL["a"] is first


def test_a_call_of_another_protocol_is_refused_with_an_error_both_sides_read() -> None:
    """A parent of older code (protocol 1: no version) or newer code reaches a worker: the worker
    answers with the four-field error every protocol reads, and stays for a matching call."""
    worker = isolated.Worker()
    try:
        for call in (("call", count, ()), ("call", count, (), isolated.PROTOCOL + 1)):
            worker.conn.send(call)
            kind, name, text, trace = worker.conn.recv()
            assert (kind, name, trace) == ("error", "PluginError", "")
            theirs = call[3] if len(call) == 4 else 1
            assert f"protocol {isolated.PROTOCOL}, its parent protocol {theirs}" in text
            assert "start it again" in text
        pid, calls, _, _ = worker.call("count", count, (), timeout=30)
        assert (pid, calls) == (worker.pid, 1)  # the refused calls did not run
    finally:
        worker.stop()
