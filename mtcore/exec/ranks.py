"""The ranks of one distributed step (a training as wide as its resources), wherever they run.

On the ``local`` scheduler a step of N ranks starts them itself (torchrun, standalone). A
scheduler that places each rank on its own (a Slurm job of ``nodes x tasks``, a Ray placement
group of N bundles) runs the step in rank 0's task, the *leader*, and has every other task
*follow*: it tells each task who it is through the environment,

- ``MTCORE_RANK``: this task's rank (0 leads), ``MTCORE_WORLD``: the ranks, ``MTCORE_LOCAL_RANK``:
  its rank on its node (its device there), ``MTCORE_RANK_TOKEN``: the same string for every task
  of one attempt (a requeued job is a new attempt), ``MTCORE_RANK_FOLDER``: a folder every task
  sees (the step's job folder on the shared workdir), ``MTCORE_RANK_ADDR``: optionally, the
  leader's address as the others reach it;

and the leader's step, once it knows its command, publishes it (:func:`publish_ranks`) with the
rendezvous address: its own node, a free port. Each follower (:func:`follow`) waits for it, runs
the same command as its rank and exits with its status. torch.distributed's ``env://``
rendezvous (``MASTER_ADDR``/``MASTER_PORT``, ``RANK``, ``WORLD_SIZE``) then joins them: NCCL on
GPUs, gloo on CPUs. A step whose ranks do not meet (independent shards) reads ``RANK`` and
``WORLD_SIZE`` only; its leader learns of a follower's end from the exit status each follower
records (:func:`rank_exits`).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mtcore.contracts.errors import StepError

RANK, WORLD, LOCAL_RANK = "MTCORE_RANK", "MTCORE_WORLD", "MTCORE_LOCAL_RANK"
TOKEN, FOLDER, ADDR = "MTCORE_RANK_TOKEN", "MTCORE_RANK_FOLDER", "MTCORE_RANK_ADDR"


@dataclass(frozen=True)
class Task:
    """This process's place among the ranks a scheduler started (None where it started one)."""

    rank: int
    world: int
    local_rank: int
    token: str
    folder: Path

    @property
    def published(self) -> Path:
        return self.folder / f"ranks-{self.token}.json"

    def exit_record(self, rank: int) -> Path:
        """Where :func:`follow` records the exit status of rank ``rank``'s command."""
        return self.folder / f"ranks-{self.token}.rank{rank}.exit"


def current_task() -> Task | None:
    """The task this process is, from the scheduler's environment; None when no scheduler
    placed ranks (the step starts its own, if any)."""
    if WORLD not in os.environ or int(os.environ[WORLD]) <= 1:
        return None
    return Task(
        int(os.environ[RANK]),
        int(os.environ[WORLD]),
        int(os.environ.get(LOCAL_RANK, "0")),
        os.environ[TOKEN],
        Path(os.environ[FOLDER]),
    )


def task_env(rank: int, world: int, local_rank: int, token: str, folder: Path) -> dict[str, str]:
    """What a scheduler sets in each task it starts for a step of ``world`` ranks."""
    return {
        RANK: str(rank),
        WORLD: str(world),
        LOCAL_RANK: str(local_rank),
        TOKEN: token,
        FOLDER: str(folder),
    }


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("", 0))
        return int(sock.getsockname()[1])


def leader_address() -> str:
    """The leader's address as the other nodes reach it: ``MTCORE_RANK_ADDR`` where the
    scheduler knows it (Ray's node IP), else this host's."""
    given = os.environ.get(ADDR)
    if given:
        return given
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


def rank_env(rank: int, world: int, local_rank: int, addr: str, port: int) -> dict[str, str]:
    """torch.distributed's ``env://`` rendezvous for one rank."""
    return {
        "RANK": str(rank),
        "WORLD_SIZE": str(world),
        "LOCAL_RANK": str(local_rank),
        "MASTER_ADDR": addr,
        "MASTER_PORT": str(port),
    }


def publish_ranks(task: Task, cmd: list[str], env: dict[str, str], cwd: Path) -> dict[str, str]:
    """The leader's half: writes its command for the followers; returns the environment rank 0
    runs it with."""
    addr, port = leader_address(), free_port()
    document = {"cmd": cmd, "env": env, "cwd": str(cwd), "addr": addr, "port": port}
    task.folder.mkdir(parents=True, exist_ok=True)
    temporary = task.published.with_name(f".{task.published.name}.{os.getpid()}")
    temporary.write_text(json.dumps(document), encoding="utf-8")
    os.replace(temporary, task.published)
    return {**env, **rank_env(0, task.world, task.local_rank, addr, port)}


def follow(task: Task, log: Path, timeout: float = 7 * 86400.0, poll: float = 0.5) -> int:
    """A follower's whole work: waits for the leader's command (or for the job to end without
    one: the leader failed before it, or the step was complete), runs it as rank ``task.rank``
    with its output in ``log``, returns its exit status."""
    deadline = time.monotonic() + timeout
    while not task.published.exists():
        if _ended(task.folder / "state.json"):
            return 0
        if time.monotonic() > deadline:
            raise StepError(f"rank {task.rank}: no command from rank 0 in {task.published}")
        time.sleep(poll)
    document: dict[str, Any] = json.loads(task.published.read_text(encoding="utf-8"))
    from mtcore.exec.process import PARENT_ENV

    env = {**os.environ, **document["env"], PARENT_ENV: str(os.getpid())}
    env.update(rank_env(task.rank, task.world, task.local_rank, document["addr"], document["port"]))
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        done = subprocess.run(
            document["cmd"], env=env, cwd=document["cwd"], stdout=out, stderr=subprocess.STDOUT
        )
    task.exit_record(task.rank).write_text(f"{done.returncode}\n{log}\n", encoding="utf-8")
    return done.returncode


def rank_exits(task: Task) -> dict[int, tuple[int, str]]:
    """The followers whose command has ended, so far: rank to (exit status, its log)."""
    out = {}
    for rank in range(1, task.world):
        try:
            code, log = task.exit_record(rank).read_text(encoding="utf-8").splitlines()[:2]
            out[rank] = (int(code), log)
        except (OSError, ValueError):
            continue
    return out


def _ended(state: Path) -> bool:
    """The job folder's ``state.json`` says the step is done or failed."""
    try:
        value = json.loads(state.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(value, dict) and value.get("state") in ("done", "failed")
