"""A whole recipe on the cluster schedulers: Yishu's smoke profile (the fastest of the four: every
step kind it uses, 82 steps) run by ``mtcore run --scheduler slurm`` on a real one-node Slurm
and by ``--scheduler ray`` on a two-node Ray cluster, each giving exactly the steps and output
hashes of the local scheduler's run (the fast tier's, kept under
``$MTCORE_TEST_SMOKE_WORKDIRS`` in CI, or one made here)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import ROOT
from tests.support.ray_cluster import DRIVER_ENV, two_node_cluster
from tests.support.slurm_cluster import slurm_cluster  # noqa: F401

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("uncapped")]
MTCORE = [sys.executable, "-m", "mtcore.cli"]
RECIPE = "yishu"


def outputs(work: Path) -> dict[str, dict[str, str]]:
    return {
        p.parent.name: json.loads(p.read_text())["outputs"]
        for p in (work / "steps").glob("*/manifest.json")
    }


def ran(work: Path) -> int:
    """Steps that ran (not reused by early cutoff from an equal step of the workdir)."""
    manifests = [json.loads(p.read_text()) for p in (work / "steps").glob("*/manifest.json")]
    return sum("reused_from" not in m for m in manifests)


def smoke(work: Path, *options: str, env: dict[str, str] | None = None) -> None:
    recipe = str(ROOT / "recipes" / f"{RECIPE}.yaml")
    done = subprocess.run(
        [*MTCORE, "run", recipe, "-p", "smoke", "-w", str(work), *options],
        capture_output=True,
        text=True,
        env=env,
        timeout=1500,
    )
    assert done.returncode == 0, done.stderr[-4000:]


def local_outputs(tmp_path: Path) -> dict[str, dict[str, str]]:
    kept = os.environ.get("MTCORE_TEST_SMOKE_WORKDIRS")
    if kept and (Path(kept) / RECIPE / "report.md").is_file():
        return outputs(Path(kept) / RECIPE)
    smoke(tmp_path / "local")
    return outputs(tmp_path / "local")


def same(want: dict[str, dict[str, str]], got: dict[str, dict[str, str]]) -> None:
    assert sorted(got) == sorted(want), sorted(set(got) ^ set(want))
    assert [d for d in want if want[d] != got[d]] == []


@pytest.mark.long  # CI's budget: the fast tier's Slurm tests run real jobs on the same cluster
@pytest.mark.usefixtures("slurm_cluster")
def test_the_smoke_profile_on_slurm_gives_the_local_outputs(tmp_path):
    work = tmp_path / "slurm"
    smoke(work, "--scheduler", "slurm", "--set", "scheduler.poll_seconds=0.5")
    same(local_outputs(tmp_path), outputs(work))
    jobs = list((work / "logs" / "steps").glob("*.slurm"))
    assert len(jobs) == ran(work)  # every step that ran was a Slurm job


@pytest.mark.long  # CI's budget: the fast tier's Ray tests run on the same two-node cluster
def test_the_smoke_profile_on_two_ray_nodes_gives_the_local_outputs(tmp_path):
    work = tmp_path / "ray"
    (tmp_path / "cluster").mkdir()
    with two_node_cluster(tmp_path / "cluster", head_cpus=1, worker_cpus=1, worker_gpus=0) as c:
        smoke(
            work,
            "--scheduler",
            "ray",
            "--set",
            f"scheduler.address={c.address}",
            env={**os.environ, **DRIVER_ENV},
        )
    same(local_outputs(tmp_path), outputs(work))
    runs = sorted((work / "logs").glob("run-*.log"))
    assert runs[-1].read_text().count("(ray actor ") == ran(work)  # each one an actor
