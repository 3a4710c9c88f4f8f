"""Child processes of steps: logged subprocesses and workers that die with their parent.

A step killed with ``kill -9`` must not leave a trainer or a pool worker running: a rerun would
then work beside it in the same directory. Children call :func:`die_with_parent` first thing.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

from mtcore.contracts.errors import StepError

PARENT_ENV = "MTCORE_PARENT_PID"


def die_with_parent(parent: int | None = None) -> None:
    """Ask the kernel to kill this process when its parent dies (Linux ``PR_SET_PDEATHSIG``);
    exit at once if the parent is already gone."""
    if parent is None and PARENT_ENV in os.environ:
        parent = int(os.environ[PARENT_ENV])
    if sys.platform.startswith("linux"):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if parent is not None and os.getppid() != parent:
        os._exit(1)  # the parent died before prctl took effect


# OpenMP threads that wait by spinning (libgomp's default) collapse when the machine has more
# runnable threads than cores: a step training next to another process ran 20x slower here
# (0.2 vs 4.5 updates/s, micro model, 2 threads each on 2 cores). Passive waiting costs little
# on an idle machine. A value the user set wins.
THREAD_DEFAULTS = {"OMP_WAIT_POLICY": "PASSIVE"}


# Children that run_logged started cold, so that a run interrupted while several steps run in
# threads can end them all (a signal reaches only the main thread).
_children: set[subprocess.Popen[bytes]] = set()
_children_lock = threading.Lock()


def kill_children() -> None:
    """Kills every command :func:`run_logged` is running cold (the run was interrupted)."""
    with _children_lock:
        for child in list(_children):
            if child.poll() is None:
                child.kill()


def thread_defaults() -> None:
    """Puts :data:`THREAD_DEFAULTS` into this process's environment (for the processes it
    starts; OpenMP in this process has read its settings already if torch is imported)."""
    for key, value in THREAD_DEFAULTS.items():
        os.environ.setdefault(key, value)


def safe_torch_loads() -> None:
    """Every ``torch.load`` of this process and of the processes it starts reads weights only,
    whatever the environment says: ``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD`` would otherwise turn
    fairseq's own loads (decoding, the neural LM scorer, the CTranslate2 converter), which pass
    no ``weights_only``, into pickle loads that run a crafted checkpoint's code. torch then
    refuses any global outside the allow-list (mtcore_plugins.common.fairseq.setup), even for a
    call that asks ``weights_only=False``."""
    os.environ.pop("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", None)
    os.environ["TORCH_FORCE_WEIGHTS_ONLY_LOAD"] = "1"


def safe_children() -> None:
    """The Python processes this one starts (``python -m`` steps and jobs, fairseq, torchrun,
    Ray and Slurm workers) leave their working directory off ``sys.path`` (``PYTHONSAFEPATH``,
    as ``python -P``): a file named like a module in a shared workdir (``yaml.py``) would be
    imported in place of it."""
    os.environ.setdefault("PYTHONSAFEPATH", "1")


def run_logged(
    cmd: list[str],
    log_path: Path,
    what: str,
    env: dict[str, str] | None = None,
    tail_lines: int = 30,
    warm: bool = False,
) -> None:
    """Runs ``cmd`` with stdout and stderr appended to ``log_path``; a failure raises
    :class:`StepError` quoting the log's tail. The child learns our pid through
    ``MTCORE_PARENT_PID`` so it can call :func:`die_with_parent`. ``warm``: a ``python -m``
    command of this interpreter starts as a fork of a process that has imported torch and
    fairseq already (:mod:`mtcore.exec.launcher`; one process, same result, seconds sooner)."""
    full_env = {
        **THREAD_DEFAULTS,
        **os.environ,
        **(env or {}),
        PARENT_ENV: str(os.getpid()),
    }
    with open(log_path, "a", encoding="utf-8") as log:
        log.write(f"$ {' '.join(cmd)}\n")
    code = None
    if warm and cmd[:2] == [sys.executable, "-m"] and len(cmd) > 2:
        from mtcore.exec import launcher

        if launcher.enabled():
            code = launcher.call(cmd[2], cmd[3:], full_env, log_path)
    if code is None:
        with open(log_path, "a", encoding="utf-8") as log:
            child = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=full_env)
            with _children_lock:
                _children.add(child)
            try:
                code = child.wait()
            except BaseException:
                child.kill()
                child.wait()
                raise
            finally:
                with _children_lock:
                    _children.discard(child)
    if code in (-signal.SIGINT, -signal.SIGTERM):
        # Ctrl-C or a scheduler's SIGTERM reached the whole process group: the child may die
        # and report before this process handles its own copy of the signal (delivered to
        # another thread, or not yet). Stop the run as the signal would, not as a failure.
        raise KeyboardInterrupt(f"{what} was stopped by signal {-code}")
    if code != 0:
        reason = f"signal {-code}" if code < 0 else f"exit status {code}"
        raise StepError(
            f"{what} failed ({reason}); last lines of {log_path}:\n{tail(log_path, tail_lines)}"
        )


def tail(path: Path, lines: int = 30) -> str:
    """The last ``lines`` lines of a log (reads at most its last 64 KiB)."""
    if not path.exists():
        return "(no log)"
    with open(path, "rb") as handle:
        handle.seek(max(0, path.stat().st_size - 64 * 1024))
        text = handle.read().decode("utf-8", errors="replace")
    return "\n".join(text.splitlines()[-lines:])
