"""Warm starts for Python tool processes: a zygote imports torch and fairseq once, then forks a
child for each ``python -m MODULE ...`` a step runs (fairseq-train, fairseq-preprocess).

A cold ``python -m fairseq_cli.preprocess`` spends ~2.5 s of a CPU core on imports before it
reads a line; a recipe that trains 18 models and binarizes 14 corpora pays that 32 times. The
child of the zygote is an ordinary process all the same: its own pid, its stdout and stderr
appended to the step's log, the step's environment and working directory, its module run as
``__main__`` with the same arguments, the exit status that module returns, killed with its
parent (``PR_SET_PDEATHSIG`` on the zygote and on every child). It computes exactly what the
cold command computes: nothing of the module runs in the zygote, only imports of libraries.

One zygote serves one environment (torch and OpenMP read ``OMP_NUM_THREADS`` and the like once,
at import), so a step whose environment differs gets a zygote of its own; and one command at a
time, so steps running side by side in one environment get one each. A zygote that is gone
(killed, crashed) is replaced by a cold start. ``MTCORE_WARM_START=0`` turns warm starts off.
"""

from __future__ import annotations

import atexit
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO, Any

from mtcore.contracts.errors import StepError

SWITCH = "MTCORE_WARM_START"
PRELOAD_TOOLS = ("torch", "fairseq", "fairseq.options", "fairseq.trainer", "fairseq.binarizer")
PRELOAD = PRELOAD_TOOLS  # what a zygote imports
MAX_ZYGOTES = 4  # environments kept warm at once (a run uses one or two)
_SKIP_KEY = ("MTCORE_PARENT_PID",)


def enabled() -> bool:
    return os.environ.get(SWITCH, "1") not in ("0", "false", "no", "")


class Zygote:
    """One warm process; :meth:`call` runs one module in a fresh fork of it."""

    def __init__(self, env: dict[str, str]) -> None:
        self.owner = os.getpid()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mtcore.exec.zygote", str(os.getpid()), *PRELOAD],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,  # the libraries' import chatter; children log to files
            env=env,
            text=True,
        )
        self.lock = threading.Lock()
        self.busy = False  # a child is running

    def call(self, module: str, argv: list[str], env: dict[str, str], log: Path) -> int | None:
        """The child's exit status (negative: killed by that signal), or ``None`` when the
        zygote is gone before it could start the child (the caller starts the command cold).
        A zygote that dies while its child runs is an error: the command is not run twice."""
        request = {"module": module, "argv": argv, "env": env, "log": str(log), "cwd": os.getcwd()}
        stdin, stdout = self.proc.stdin, self.proc.stdout
        assert stdin is not None and stdout is not None
        with self.lock:
            try:
                stdin.write(json.dumps(request) + "\n")
                stdin.flush()
            except OSError:  # gone before the child could start: nothing ran
                return None
            self.busy = True
            reply = stdout.readline()  # an interrupt here leaves busy set: close() kills
            self.busy = False
        if not reply:  # gone while the child ran (PR_SET_PDEATHSIG has ended it): not rerun
            raise StepError(
                f"the warm process running python -m {module} died (exit status "
                f"{self.proc.wait()}); see {log}. Rerun to resume, or set {SWITCH}=0"
            )
        answer: dict[str, Any] = json.loads(reply)
        return int(answer["status"])

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        """Ends the zygote: at once if a child is running (the run was interrupted; the child
        dies with it), else once it has read the end of its input."""
        if self.busy and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if self.proc.poll() is None:
            stdin: IO[str] | None = self.proc.stdin
            if stdin is not None:
                stdin.close()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


_zygotes: dict[str, Zygote] = {}  # "<n> <environment key>" -> zygote
_taken: set[int] = set()  # ids of the zygotes a call is using (steps run side by side)
_registry_lock = threading.Lock()
_count = [0]


def _key(env: dict[str, str]) -> str:
    return json.dumps(sorted((k, v) for k, v in env.items() if k not in _SKIP_KEY))


def _take(key: str, env: dict[str, str]) -> tuple[str, Zygote]:
    """An idle zygote of this environment, or a new one (one per command running at once:
    a zygote serves one request at a time). Called under the registry lock."""
    for name, zygote in list(_zygotes.items()):
        gone = zygote.owner != os.getpid() or not zygote.alive()
        if gone and id(zygote) not in _taken:
            _zygotes.pop(name)
    for name, zygote in _zygotes.items():
        if name.split(" ", 1)[1] == key and id(zygote) not in _taken:
            _taken.add(id(zygote))
            return name, zygote
    idle = [name for name, zygote in _zygotes.items() if id(zygote) not in _taken]
    while len(_zygotes) >= MAX_ZYGOTES and idle:  # never one that is running a command
        _zygotes.pop(idle.pop(0)).close()
    _count[0] += 1
    name = f"{_count[0]} {key}"
    zygote = _zygotes[name] = Zygote(env)
    _taken.add(id(zygote))
    return name, zygote


def call(module: str, argv: list[str], env: dict[str, str], log: Path) -> int | None:
    """Runs ``python -m module *argv`` in a warm fork with ``env``, output appended to ``log``;
    ``None`` when no zygote could run it (start it cold instead)."""
    with _registry_lock:
        name, zygote = _take(_key(env), env)
    try:
        status = zygote.call(module, argv, env, log)
    finally:
        with _registry_lock:
            _taken.discard(id(zygote))
    if status is None:
        with _registry_lock:
            if _zygotes.get(name) is zygote:
                _zygotes.pop(name)
    return status


@atexit.register
def close_all() -> None:
    with _registry_lock:
        for zygote in _zygotes.values():
            if zygote.owner == os.getpid():
                zygote.close()
        _zygotes.clear()
        _taken.clear()
