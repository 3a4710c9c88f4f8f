"""The warm process of :mod:`mtcore.exec.launcher`: ``python -m mtcore.exec.zygote PARENT_PID
MODULE...``
imports the modules, then reads one JSON request a line on stdin (module, argv, env, log, cwd),
forks a child that runs the module as ``__main__`` and answers ``{"status": N}`` once the child
has exited. Requests are served one at a time; end of input ends the zygote."""

from __future__ import annotations

import contextlib
import importlib
import json
import logging
import os
import runpy
import signal
import sys
import traceback
from typing import Any

from mtcore.exec.process import PARENT_ENV, die_with_parent

START_DIR = os.getcwd()  # sys.path[0] of this process (`python -m` runs it)


def preload(modules: list[str]) -> None:
    """Imports ``modules`` and leaves logging as a fresh interpreter has it (a library that
    logs while importing configures the root logger; the child's module must do that itself)."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception:  # not installed here: the child imports what it needs itself
            continue
    for handler in root.handlers[len(handlers) :]:
        root.removeHandler(handler)
    root.setLevel(level)


def exit_status(exc: SystemExit) -> int:
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=sys.stderr)
    return 1


def child(request: dict[str, Any], channels: tuple[int, int]) -> None:
    """Runs in the fork: becomes the requested command and never returns."""
    status = 1
    try:
        for fd in channels:
            os.close(fd)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        die_with_parent(int(request["env"][PARENT_ENV]))
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        log = os.open(request["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(null)
        os.close(log)
        if sys.path and sys.path[0] == START_DIR:  # `python -m` puts its cwd first
            sys.path[0] = request["cwd"]
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.argv = [request["module"], *request["argv"]]
        try:
            runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
            status = 0
        except SystemExit as exc:
            status = exit_status(exc)
        except BaseException:
            traceback.print_exc()
            status = 1
        logging.shutdown()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(status)


def serve(parent: int, modules: list[str]) -> None:
    die_with_parent(parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the child; the parent decides
    requests = os.dup(0)
    replies = os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    preload(modules)
    with open(requests, encoding="utf-8") as inbox, open(replies, "w", encoding="utf-8") as out:
        for line in inbox:
            request = json.loads(line)
            request["env"][PARENT_ENV] = str(os.getpid())
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                child(request, (requests, replies))
            _, wait_status = os.waitpid(pid, 0)
            out.write(json.dumps({"status": os.waitstatus_to_exitcode(wait_status)}) + "\n")
            out.flush()


if __name__ == "__main__":
    serve(int(sys.argv[1]), sys.argv[2:])
