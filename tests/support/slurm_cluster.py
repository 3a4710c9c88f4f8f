"""The ``slurm_cluster`` fixture: a real one-node Slurm cluster on localhost, for the tests of the
slurm scheduler backend (issue 42). Import it into a test module:

    from tests.support.slurm_cluster import slurm_cluster  # noqa: F401

Design: every pytest process that asks for the fixture starts its own cluster (munged, slurmctld
and slurmd) with ``scripts/slurm_local.sh`` in a fresh directory of its own, on ports drawn at
random, and stops it when its session ends. Under pytest-xdist two workers thus run two clusters
side by side, which Slurm allows since each has its own munge socket and key, ports, state, spool
and pid files (checked by hand: two clusters on one host each ran jobs at once). No cluster is
shared between processes, so nothing goes stale when a worker dies; the only lock is the one
``slurm_local.sh install`` holds around apt-get, which two workers may otherwise run at once.

``SLURM_CONF`` points this process (and so sbatch, squeue and submitit's calls) at the cluster
while the session lasts. A cluster that cannot be installed or started fails the test that asked
for it with the daemons' log tails; it never skips, since a skipped test passes CI unseen.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support import ROOT

SCRIPT = ROOT / "scripts" / "slurm_local.sh"
PARTITION = "debug"  # the one partition slurm_local.sh configures


@dataclass(frozen=True)
class SlurmCluster:
    """A running cluster: its ``slurm.conf``, its one partition, the CPUs of its one node and the
    directory that holds its state, logs and the daemons' pid files."""

    conf: Path
    partition: str
    cpus: int
    dir: Path


def _script(*args: str, timeout: float) -> tuple[bool, str]:
    """(whether ``slurm_local.sh ARGS`` succeeded, the tail of its output)."""
    try:
        done = subprocess.run(
            ["bash", str(SCRIPT), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as error:  # its output is bytes, text=True or not
        stderr = error.stderr.decode(errors="replace") if error.stderr else ""
        return False, f"timed out after {timeout} s\n{stderr}"
    output = (done.stdout + done.stderr).splitlines()
    return done.returncode == 0, "\n".join(output[-60:])


def _node_cpus(conf: Path) -> int:
    found = re.search(r"^NodeName=.*\bCPUs=(\d+)", conf.read_text(), re.MULTILINE)
    assert found, f"no NodeName line with CPUs= in {conf}"
    return int(found.group(1))


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    ok, output = _script("install", timeout=900)
    if not ok:
        pytest.fail(f"slurm_local.sh install failed:\n{output}", pytrace=False)
    # Under /tmp, not pytest's base temp: munge's and slurmd's unix socket paths must stay short.
    where = Path(tempfile.mkdtemp(prefix="mtcore-slurm-", dir="/tmp"))
    ok, output = _script("start", str(where), timeout=180)
    if not ok:
        _script("stop", str(where), timeout=60)
        pytest.fail(f"slurm_local.sh start {where} failed:\n{output}", pytrace=False)
    conf = where / "slurm.conf"
    previous = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(conf)
    try:
        yield SlurmCluster(conf=conf, partition=PARTITION, cpus=_node_cpus(conf), dir=where)
    finally:
        if previous is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = previous
        ok, output = _script("stop", str(where), timeout=120)
    if not ok:
        pytest.fail(f"slurm_local.sh stop {where} failed:\n{output}", pytrace=False)
    shutil.rmtree(where, ignore_errors=True)
