"""Runs calls in worker processes, so that a crash, an out-of-memory kill or a memory bound hit
there names what was running and leaves the caller's process (and every other result it holds)
intact. The evaluate step scores each heavy metric (a neural model) this way.

:func:`run_in_worker` keeps one long-lived worker per key (the evaluate step's key is the
metric's identity: class, settings, resources), reused by every later call with that key in this
process, so that the imports (torch, comet: seconds) and the model's loading (gigabytes) are paid
once per run, not once per evaluate step. A worker that crashed is dropped and the next call
starts a fresh one; a worker quits by itself after ``idle`` seconds without a call (the next call
starts a fresh one silently); at most :data:`MAX_WORKERS` live at once (the least recently used
idle one is stopped first); all stop when this process exits.

Workers are started with ``spawn`` (no fork of a process that holds threads or a CUDA
context); the function and its arguments are pickled on each call, so they must be module-level
objects and plain data. ``memory_gb`` bounds the worker's data segment (``RLIMIT_DATA``: the heap
and anonymous mappings, where tensors live, but not the address space that CUDA and the allocator
reserve), so an oversized batch fails with a ``MemoryError`` in the worker instead of the kernel's
OOM killer choosing a process; a worker that hit it is stopped after reporting it.
"""

from __future__ import annotations

import atexit
import contextlib
import multiprocessing
import os
import resource
import signal
import threading
import time
import traceback
from collections.abc import Callable
from multiprocessing.reduction import ForkingPickler
from typing import Any

from mtcore.api import PluginError

MAX_WORKERS = 4
"""Persistent workers alive at once (each may hold a loaded model)."""

_IN_WORKER = False
_CONN: Any = None  # in a worker: its end of the pipe, for report()
_LAST_REPORT = 0.0
REPORT_EVERY = 0.5  # seconds between progress reports

PROTOCOL = 2
"""The version of the messages between a parent and its workers, sent with every call; raise it
when a message changes. A worker is a fresh import of the installed code, so mtcore upgraded or
edited under a running job gives workers a newer protocol than their parent's (protocol 1 had no
version and no progress messages): the worker answers such a call with an error both sides read,
instead of a message the parent cannot unpack."""


def in_worker() -> bool:
    """Whether this process is a worker of this module (a function it runs may keep state for
    the worker's later calls)."""
    return _IN_WORKER


def report(done: int, total: int) -> None:
    """From a call running in a worker: ``done`` of ``total`` items are done, for the caller's
    ``progress`` (a long neural scoring shows its batches). Sent at most every half second, and
    always when ``done`` reaches ``total``; outside a worker, nothing."""
    global _LAST_REPORT
    if _CONN is None:
        return
    now = time.monotonic()
    if done < total and now - _LAST_REPORT < REPORT_EVERY:
        return
    _LAST_REPORT = now
    _CONN.send(("progress", done, total))


def _reply(conn: Any, message: tuple[Any, ...]) -> None:
    try:
        conn.send(message)
    except (BrokenPipeError, ConnectionResetError):
        raise
    except Exception as error:  # the result does not pickle
        conn.send(("error", type(error).__name__, str(error), traceback.format_exc()))


def _serve(conn: Any, memory_gb: float, idle: float) -> None:
    """The worker's loop: ``("call", fn, args, PROTOCOL)`` -> ``("ok", result)`` or ``("error",
    kind, text, traceback)``, with ``("progress", done, total)`` before it; ``("stop",)`` or the
    parent's end closing ends it; ``idle`` seconds without a call (0: never) end it after a last
    ``("idle",)``, which tells a parent whose call crossed it that the call was not taken."""
    global _IN_WORKER, _CONN
    _IN_WORKER = True
    _CONN = conn
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's: it stops the workers
    if memory_gb > 0:
        limit = int(memory_gb * (1 << 30))
        resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
    try:
        while True:
            if not conn.poll(idle if idle > 0 else None):
                conn.send(("idle",))
                return
            try:
                message = conn.recv()
            except EOFError:
                return
            except BaseException as error:  # the call does not unpickle here
                _reply(conn, ("error", type(error).__name__, str(error), traceback.format_exc()))
                continue
            if message[0] != "call":
                return
            if len(message) != 4 or message[3] != PROTOCOL:
                theirs = message[3] if len(message) == 4 else 1
                _reply(conn, ("error", "PluginError", _mismatch(theirs), ""))
                del message
                continue
            _, fn, args, _version = message
            try:
                result = fn(*args)
            except BaseException as error:
                reply: tuple[Any, ...] = (
                    "error",
                    type(error).__name__,
                    str(error),
                    traceback.format_exc(),
                )
            else:
                reply = ("ok", result)
            del message, fn, args
            _reply(conn, reply)
            del reply
    except (BrokenPipeError, ConnectionResetError):
        return
    finally:
        conn.close()


def _mismatch(theirs: object) -> str:
    return (
        f"the worker process runs mtcore code of worker protocol {PROTOCOL}, its parent "
        f"protocol {theirs}: mtcore was upgraded or its plugins edited while this run was going. "
        "Stop the run (Ctrl-C or SIGTERM) and start it again: finished steps are kept"
    )


class _NotTaken(Exception):
    """The worker quit (idle) before it took the call: nothing ran, a fresh worker may."""


class Worker:
    """One worker process and its end of the pipe; :meth:`call` runs one call at a time (the
    caller serializes them)."""

    def __init__(self, memory_gb: float = 0.0, idle: float = 0.0, name: str = "") -> None:
        context = multiprocessing.get_context("spawn")
        self.conn, child = context.Pipe()
        self.process = context.Process(
            target=_serve, args=(child, memory_gb, idle), daemon=True, name=name or None
        )
        self.process.start()
        child.close()
        self.memory_gb = memory_gb
        self.last_used = time.monotonic()

    @property
    def pid(self) -> int | None:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.is_alive() and not self.conn.closed

    def call(
        self,
        what: str,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        timeout: float,
        progress: Callable[[int, int], object] | None = None,
    ) -> Any:
        """``fn(*args)`` in the worker: its result, or a ``PluginError`` that starts with ``what``
        and says how the call ended (its exception, a signal, an exit code, the memory bound, the
        timeout); the worker is ended when it crashed, hung, hit the memory bound or the wait was
        interrupted. ``_NotTaken`` when the worker had quit idle before the call reached it.
        ``progress(done, total)`` is called with what the call :func:`report`s."""
        self.last_used = time.monotonic()
        # what does not pickle fails here
        payload = ForkingPickler.dumps(("call", fn, args, PROTOCOL))
        try:
            self.conn.send_bytes(payload)
        except (BrokenPipeError, ConnectionResetError) as error:
            self.end(0)
            raise _NotTaken from error
        except BaseException:
            self.end(0)  # interrupted in the middle of a message
            raise
        del payload
        message: Any = None
        timed_out = False
        deadline = time.monotonic() + timeout if timeout > 0 else None
        try:
            while True:
                wait = None if deadline is None else max(deadline - time.monotonic(), 0.0)
                if not self.conn.poll(wait):
                    timed_out = True
                    break
                try:
                    message = self.conn.recv()
                except (EOFError, ConnectionResetError):
                    message = None
                    break
                if message[0] != "progress":
                    break
                if progress is not None:
                    progress(message[1], message[2])
                message = None
        except BaseException:
            self.end(0)  # interrupted: the worker's state is unknown
            raise
        finally:
            self.last_used = time.monotonic()
        if message is not None and message[0] == "idle":
            self.end(5)
            raise _NotTaken
        if message is None:
            self.end(0 if timed_out else 5)
            if timed_out:
                raise PluginError(f"{what}: the worker process gave no result in {timeout:g} s")
            code = self.process.exitcode
            if code is not None and code < 0:
                name = signal.Signals(-code).name
                hint = (
                    " (the kernel's out-of-memory killer sends SIGKILL)"
                    if name == "SIGKILL"
                    else ""
                )
                raise PluginError(f"{what}: the worker process was killed by {name}{hint}")
            raise PluginError(f"{what}: the worker process exited with code {code} and no result")
        if message[0] == "ok":
            return message[1]
        _, kind, text, trace = message
        if kind == "MemoryError":
            self.stop()
            bound = f" above the memory bound of {self.memory_gb:g} GB" if self.memory_gb else ""
            raise PluginError(
                f"{what}: out of memory{bound} (lower the batch size or raise the bound)"
            )
        if kind in ("PluginError", "DataError", "StepError"):
            raise PluginError(f"{what}: {text}")
        raise PluginError(f"{what}: {kind}: {text}\n{trace}")

    def end(self, grace: float) -> None:
        """Closes the pipe and waits ``grace`` seconds for the process to end, then kills it."""
        self.conn.close()
        self.process.join(grace)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()

    def stop(self) -> None:
        """Asks the worker to quit (it frees what it holds) and ends it."""
        if not self.conn.closed:
            with contextlib.suppress(OSError):
                self.conn.send(("stop",))
        self.end(5)


_POOL: dict[str, Worker] = {}
_KEY_LOCKS: dict[str, threading.Lock] = {}
_POOL_LOCK = threading.Lock()


def _key_lock(key: str) -> threading.Lock:
    with _POOL_LOCK:
        return _KEY_LOCKS.setdefault(key, threading.Lock())


def _drop(key: str, worker: Worker) -> None:
    with _POOL_LOCK:
        if _POOL.get(key) is worker:
            del _POOL[key]


def _make_room(keep: str) -> None:
    """Stops least recently used idle workers until a new one fits under :data:`MAX_WORKERS`."""
    with _POOL_LOCK:
        others = sorted(
            ((k, w) for k, w in _POOL.items() if k != keep), key=lambda kw: kw[1].last_used
        )
    excess = len(others) + 1 - MAX_WORKERS
    for key, worker in others:
        if excess <= 0:
            break
        lock = _key_lock(key)
        if not lock.acquire(blocking=False):  # running a call
            continue
        try:
            _drop(key, worker)
            worker.stop()
            excess -= 1
        finally:
            lock.release()


def run_in_worker(
    key: str,
    what: str,
    fn: Callable[..., Any],
    *args: Any,
    memory_gb: float = 0.0,
    timeout: float = 0.0,
    idle: float = 300.0,
    progress: Callable[[int, int], object] | None = None,
) -> Any:
    """``fn(*args)`` in the persistent worker of ``key`` (started on first use, or again after it
    crashed, quit idle or had another ``memory_gb``); its result, or a ``PluginError`` that starts
    with ``what`` and says how the worker ended (its exception, a signal, an exit code, the
    memory bound). Calls with one key run one at a time (from any thread); ``timeout``
    (seconds, 0: none) ends a worker that hangs; ``idle`` (seconds, 0: never) is how long the
    worker waits for its next call before it quits; ``progress(done, total)`` follows what the
    call :func:`report`s."""
    with _key_lock(key):
        for _ in range(3):
            with _POOL_LOCK:
                worker = _POOL.get(key)
            if worker is not None and (not worker.alive() or worker.memory_gb != memory_gb):
                _drop(key, worker)
                worker.stop()
                worker = None
            if worker is None:
                _make_room(key)
                worker = Worker(memory_gb, idle, name=f"mtcore worker: {what}")
                with _POOL_LOCK:
                    _POOL[key] = worker
            try:
                return worker.call(what, fn, args, timeout, progress)
            except _NotTaken:
                _drop(key, worker)
                continue
            finally:
                if not worker.alive():
                    _drop(key, worker)
        raise PluginError(f"{what}: no worker process took the call (three started)")


def stop_workers() -> None:
    """Stops every persistent worker (at exit; tests)."""
    with _POOL_LOCK:
        workers = list(_POOL.values())
        _POOL.clear()
    for worker in workers:
        worker.stop()


def _forget_workers() -> None:
    """In a forked child: the workers (and any lock held at the fork) are the parent's."""
    global _POOL, _KEY_LOCKS, _POOL_LOCK
    _POOL, _KEY_LOCKS, _POOL_LOCK = {}, {}, threading.Lock()


atexit.register(stop_workers)
os.register_at_fork(after_in_child=_forget_workers)
