"""A real two-node Ray cluster on one host for tests, reachable on 127.0.0.1 only. Import the
fixture into a test module:

    from tests.support.ray_cluster import RayCluster, ray_two_nodes  # noqa: F401

Started as Ray's own multi-node tests start one: a head node (``ray start --head --block``) and a
second raylet joining it (``ray start --block --address=127.0.0.1:P``), each in its own
processes, its own ``--temp-dir`` (Ray allows one per node) and its own process group. The
second node declares GPUs (``--num-gpus``; none need exist: Ray hands out device numbers in
``CUDA_VISIBLE_DEVICES``) and a custom resource ``second_node`` to aim tasks at it. Each node is
stopped by signalling its blocking ``ray start``, which stops what it started; never by ``ray
stop``, which would also stop the clusters that other pytest-xdist workers run on this host (two
pytest processes, each with its cluster, ran this module side by side).

Loopback only. On Linux, Ray 2.58 rewrites a loopback ``--node-ip-address`` or ``--address``
(``services.resolve_ip_for_localhost``) to the host's routable address, and its gRPC servers
(GCS, raylet, object manager, core workers) listen on all interfaces whenever the node address
is not exactly 127.0.0.1: with the plain ``ray start`` flags, ``ss -ltnp`` showed the GCS and
both raylets on ``*:port`` (every IPv4 and IPv6 address) and the runtime-env agents on the
host's address. No ``ray start`` flag changes that; the only switch Ray has,
``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` (its single-host mode, meant for macOS and Windows),
makes a joining ``ray start --address`` refuse to run. So both nodes run ``ray start`` through a
small launcher (``RAY_START``) that turns the rewrite off, and drivers run in single-host mode
(``DRIVER_ENV``), set for this process and inherited by the processes it starts while the
cluster runs; a subprocess given an ``env=`` of its own needs ``DRIVER_ENV`` in it, or its
``ray.init`` goes to the host's address and fails ("Failed to connect to GCS"). Both nodes then
advertise 127.0.0.1 (drivers attach to the head's raylet, which Ray prefers among nodes on one
address), and ``ss -ltnp`` with the cluster running and tasks in flight shows only ``127.0.0.1``
and ``[::ffff:127.0.0.1]`` (IPv4 on an IPv6 socket): the GCS, raylets and object managers,
runtime-env agents, idle and busy workers, detached actors and the driver. Nothing else listens:
the dashboard is off, and Ray's minimal install has no dashboard-agent HTTP server
(``--dashboard-agent-listen-port``, 52365) and no Ray Client server (``--ray-client-server-port``,
10001). ``listening_sockets`` lets a test check this.

Workers bind ports the kernel picks (``--min-worker-port=0 --max-worker-port=0``, as Ray's
``cluster_utils`` does) rather than Ray's shared 10002-19999 range, since several clusters may
run on the host at once.
"""

from __future__ import annotations

import contextlib
import importlib.util
import ipaddress
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

LOOPBACK = "127.0.0.1"
START_S = 120  # for both nodes to start and register
STOP_S = 30  # for a signalled ``ray start`` to stop what it started

DRIVER_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
"""What a driver process needs in its environment (before it imports ray) to connect to the
cluster: Ray's single-host mode, which keeps 127.0.0.1 as 127.0.0.1."""

RAY_START = """
import sys

from ray._private import services
from ray.scripts.scripts import main

services.resolve_ip_for_localhost = lambda host: host  # keep 127.0.0.1
sys.argv[0] = "ray"
sys.exit(main())
"""

NODES_SCRIPT = """
import json, sys, time

import ray

ray.init(address=sys.argv[1], log_to_driver=False)
deadline = time.monotonic() + float(sys.argv[2])
while True:
    alive = [node for node in ray.nodes() if node["Alive"]]
    if len(alive) >= 2 or time.monotonic() > deadline:
        break
    time.sleep(0.2)
print(json.dumps(alive))
"""


@dataclass(frozen=True)
class RayCluster:
    """A running cluster. The ``*_logs`` folders (Ray's session logs: ``raylet.out``,
    ``gcs_server.out``, ``worker-*.out``) are removed when the cluster stops; the ``ray start``
    outputs stay in the folder the cluster was given."""

    address: str  # "127.0.0.1:P", for ray.init(address=...) in a driver with DRIVER_ENV
    head_node_id: str
    worker_node_id: str
    head_log: Path
    worker_log: Path
    head_logs: Path
    worker_logs: Path
    pids: tuple[int, int]  # the blocking ``ray start`` processes, head first


@contextmanager
def two_node_cluster(
    tmp: Path, head_cpus: int = 1, worker_cpus: int = 1, worker_gpus: int = 2, head_gpus: int = 0
) -> Iterator[RayCluster]:
    """A head node and a second node with ``worker_gpus`` GPUs and the resource
    ``second_node: 1``, both alive and on 127.0.0.1 when entered; stopped on exit. Fails the test,
    with the logs' tails, if that does not hold within ``START_S`` seconds."""
    with socket.socket() as probe:
        probe.bind((LOOPBACK, 0))
        port = probe.getsockname()[1]
    address = f"{LOOPBACK}:{port}"
    # Short: the Unix socket paths Ray makes under it must stay below 108 bytes.
    ray_tmp = Path(tempfile.mkdtemp(prefix="ray-", dir="/tmp"))
    common = [
        f"--node-ip-address={LOOPBACK}",
        "--min-worker-port=0",
        "--max-worker-port=0",
        "--disable-usage-stats",
    ]
    head_args = [
        "--head",
        f"--port={port}",
        f"--num-cpus={head_cpus}",
        f"--num-gpus={head_gpus}",
        "--include-dashboard=false",
        f"--temp-dir={ray_tmp / 'head'}",
    ]
    worker_args = [
        f"--address={address}",
        f"--num-cpus={worker_cpus}",
        f"--num-gpus={worker_gpus}",
        '--resources={"second_node": 1}',
        f"--temp-dir={ray_tmp / 'worker'}",
    ]
    logs = [tmp / "ray-head.log", tmp / "ray-worker.log"]
    session_logs = [ray_tmp / name / "session_latest" / "logs" for name in ("head", "worker")]
    procs: list[subprocess.Popen[bytes]] = []
    deadline = time.monotonic() + START_S
    try:
        with pytest.MonkeyPatch.context() as patch:
            _single_host_drivers(patch)
            for args, log in zip([head_args, worker_args], logs, strict=True):
                procs.append(_start_node(args + common, log))
                _wait_started(procs[-1], log, deadline, logs, session_logs)
            head, worker = _alive_nodes(address, deadline, logs, session_logs)
            yield RayCluster(
                address, head, worker, *logs, *session_logs, (procs[0].pid, procs[1].pid)
            )
    finally:
        for proc in reversed(procs):
            _stop(proc)
        shutil.rmtree(ray_tmp, ignore_errors=True)


@pytest.fixture(scope="module")
def ray_two_nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayCluster]:
    """The module's two-node cluster (1 CPU on the head; 1 CPU and 2 GPUs on the second node);
    drivers in this process and the processes it starts may connect to ``address``."""
    if importlib.util.find_spec("ray") is None:
        pytest.skip("ray is not installed (pip install 'mtcore[ray]')")
    with two_node_cluster(tmp_path_factory.mktemp("ray_two_nodes")) as cluster:
        yield cluster


def listening_sockets(pids: Iterable[int]) -> list[tuple[str, int, int]]:
    """(address, port, pid) of each TCP socket listening in ``pids`` or their descendants."""
    tree = _descendants(set(pids))
    owner: dict[str, int] = {}
    for pid in tree:
        with contextlib.suppress(OSError):  # a process that ended meanwhile
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    link = os.readlink(f"/proc/{pid}/fd/{fd}")
                    if link.startswith("socket:["):
                        owner[link[8:-1]] = pid
    found: list[tuple[str, int, int]] = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in owner:  # 0A: LISTEN
                host, port = fields[1].split(":")
                # The kernel prints each 32-bit word of the address in host (little-endian) order.
                raw = b"".join(bytes.fromhex(host[i : i + 8])[::-1] for i in range(0, len(host), 8))
                address = ipaddress.ip_address(raw)
                address = getattr(address, "ipv4_mapped", None) or address  # IPv4 on IPv6
                found.append((str(address), int(port, 16), owner[fields[9]]))
    return found


def _single_host_drivers(patch: pytest.MonkeyPatch) -> None:
    """DRIVER_ENV for this process, where ray may be imported already, and its children."""
    from ray._private import ray_constants

    for name, value in DRIVER_ENV.items():
        patch.setenv(name, value)
    patch.setattr(ray_constants, "ENABLE_RAY_CLUSTER", False)


def _start_node(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-c", RAY_START, "start", "--block", *args]
    env = {name: value for name, value in os.environ.items() if name not in DRIVER_ENV}
    with open(log, "wb") as out:
        # Its own process group: if it cannot stop what it started, that group is killed.
        return subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )


def _wait_started(
    proc: subprocess.Popen[bytes], log: Path, deadline: float, logs: list[Path], more: list[Path]
) -> None:
    while b"Ray runtime started" not in log.read_bytes():
        if proc.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"ray start failed ({log.name}):\n{_tails(logs, more)}")
        time.sleep(0.2)


def _alive_nodes(
    address: str, deadline: float, logs: list[Path], more: list[Path]
) -> tuple[str, str]:
    """The head's and the second node's ids, once a driver sees both alive on 127.0.0.1."""
    left = max(deadline - time.monotonic(), 1.0)
    command = [sys.executable, "-c", NODES_SCRIPT, address, str(left)]
    env = {**os.environ, **DRIVER_ENV}
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=left + 30, env=env)
    except subprocess.TimeoutExpired:
        pytest.fail(f"a driver listing the nodes hung:\n{_tails(logs, more)}")
    if done.returncode != 0:
        tails = _tails(logs, more)
        pytest.fail(f"a driver could not list the nodes:\n{done.stderr[-3000:]}\n{tails}")
    nodes = json.loads(done.stdout.strip().splitlines()[-1])
    head = [n["NodeID"] for n in nodes if "node:__internal_head__" in n["Resources"]]
    worker = [n["NodeID"] for n in nodes if "second_node" in n["Resources"]]
    addresses = {n["NodeManagerAddress"] for n in nodes}
    if len(head) != 1 or len(worker) != 1 or addresses != {LOOPBACK}:
        pytest.fail(f"expected two alive nodes on {LOOPBACK}, got {nodes}:\n{_tails(logs, more)}")
    return head[0], worker[0]


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(STOP_S)
    with contextlib.suppress(ProcessLookupError):  # what it left behind, if anything
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _tails(logs: list[Path], session_logs: list[Path]) -> str:
    """The ``ray start`` outputs' ends, then the GCS's and raylets' (mostly state dumps)."""
    files = [(log, 3000) for log in logs] + [
        (folder / name, 1500)
        for folder in session_logs
        for name in ("gcs_server.out", "raylet.out")
    ]
    return "\n".join(
        f"--- {path}\n{path.read_text(errors='replace')[-chars:]}"
        for path, chars in files
        if path.is_file()
    )


def _descendants(roots: set[int]) -> set[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                stat = Path(f"/proc/{entry}/stat").read_text()
                parent = int(stat.rsplit(")", 1)[1].split()[1])  # the field after the state
                children.setdefault(parent, []).append(int(entry))
    found, todo = set(), list(roots)
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo.extend(children.get(pid, []))
    return found
