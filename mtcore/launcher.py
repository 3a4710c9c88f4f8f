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
at import), so a step whose environment differs gets a zygote of its own. A zygote that is gone
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

from mtcore.errors import StepError

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
            [sys.executable, "-m", "mtcore.zygote", str(os.getpid()), *PRELOAD],
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


_zygotes: dict[str, Zygote] = {}
_registry_lock = threading.Lock()


def _key(env: dict[str, str]) -> str:
    return json.dumps(sorted((k, v) for k, v in env.items() if k not in _SKIP_KEY))


def call(module: str, argv: list[str], env: dict[str, str], log: Path) -> int | None:
    """Runs ``python -m module *argv`` in a warm fork with ``env``, output appended to ``log``;
    ``None`` when no zygote could run it (start it cold instead)."""
    key = _key(env)
    with _registry_lock:
        zygote = _zygotes.get(key)
        if zygote is not None and (zygote.owner != os.getpid() or not zygote.alive()):
            _zygotes.pop(key)
            zygote = None
        if zygote is None:
            while len(_zygotes) >= MAX_ZYGOTES:
                _zygotes.pop(next(iter(_zygotes))).close()
            zygote = _zygotes[key] = Zygote(env)
    status = zygote.call(module, argv, env, log)
    if status is None:
        with _registry_lock:
            if _zygotes.get(key) is zygote:
                _zygotes.pop(key)
    return status


@atexit.register
def close_all() -> None:
    with _registry_lock:
        for zygote in _zygotes.values():
            if zygote.owner == os.getpid():
                zygote.close()
        _zygotes.clear()
