"""Runs one call in a fresh worker process, so that a crash, an out-of-memory kill or a memory
bound hit there names what was running and leaves the caller's process (and every other result
it holds) intact. The evaluate step scores each heavy metric (a neural model) this way.

The worker is started with ``spawn`` (no fork of a process that holds threads or a CUDA
context); the function and its arguments are pickled, so they must be module-level objects and
plain data. ``memory_gb`` bounds the worker's data segment (``RLIMIT_DATA``: the heap and
anonymous mappings, where tensors live, but not the address space that CUDA and the allocator
reserve), so an oversized batch fails with a ``MemoryError`` in the worker instead of the kernel's
OOM killer choosing a process.
"""

from __future__ import annotations

import multiprocessing
import resource
import signal
import traceback
from collections.abc import Callable
from typing import Any

from mtcore.api import PluginError


def _child(conn: Any, fn: Callable[..., Any], args: tuple[Any, ...], memory_gb: float) -> None:
    if memory_gb > 0:
        limit = int(memory_gb * (1 << 30))
        resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
    try:
        result = fn(*args)
    except BaseException as error:
        conn.send(("error", type(error).__name__, str(error), traceback.format_exc()))
    else:
        conn.send(("ok", result))
    finally:
        conn.close()


def run_isolated(
    what: str, fn: Callable[..., Any], *args: Any, memory_gb: float = 0.0, timeout: float = 0.0
) -> Any:
    """``fn(*args)`` in a spawned worker process; its result, or a ``PluginError`` that starts with
    ``what`` and says how the worker ended (its exception, a signal, an exit code, the memory
    bound). ``timeout`` (seconds, 0: none) stops a worker that hangs."""
    context = multiprocessing.get_context("spawn")
    receive, send = context.Pipe(duplex=False)
    worker = context.Process(target=_child, args=(send, fn, args, memory_gb), daemon=True)
    worker.start()
    send.close()
    message: Any = None
    timed_out = False
    try:
        if receive.poll(timeout or None):
            try:
                message = receive.recv()
            except EOFError:
                message = None
        else:
            timed_out = True
    finally:
        receive.close()
        worker.join(5 if message is not None else (0 if timed_out else None))
        if worker.is_alive():
            worker.kill()
            worker.join()
    if message is None:
        if timed_out:
            raise PluginError(f"{what}: the worker process gave no result in {timeout:g} s")
        code = worker.exitcode
        if code is not None and code < 0:
            name = signal.Signals(-code).name
            hint = " (the kernel's out-of-memory killer sends SIGKILL)" if name == "SIGKILL" else ""
            raise PluginError(f"{what}: the worker process was killed by {name}{hint}")
        raise PluginError(f"{what}: the worker process exited with code {code} and no result")
    if message[0] == "ok":
        return message[1]
    _, kind, text, trace = message
    if kind == "MemoryError":
        bound = f" above the memory bound of {memory_gb:g} GB" if memory_gb > 0 else ""
        raise PluginError(f"{what}: out of memory{bound} (lower the batch size or raise the bound)")
    if kind in ("PluginError", "DataError", "StepError"):
        raise PluginError(f"{what}: {text}")
    raise PluginError(f"{what}: {kind}: {text}\n{trace}")
