"""A translation as wide as its resources, on CPU with the tiny fairseq model of
``test_fairseq_steps``: its ranks share the shards, the output is the bytes of width 1, a failed
rank fails the step naming it and a rerun translates only its shards; the leader of ranks a
scheduler placed (Slurm, Ray) waits for a follower, and names it when it fails."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from mtcore.contracts.errors import StepError
from mtcore.contracts.step import Artifact, StepContext
from mtcore.exec.ranks import task_env
from mtcore_plugins.steps.translate import TranslateStep
from tests.plugins.steps import test_fairseq_steps as fairseq_steps
from tests.support.steps import make_ctx

# the tiny model and its data: test_fairseq_steps' session fixtures
corpora, spm_model = fairseq_steps.corpora, fairseq_steps.spm_model
binarized, trained = fairseq_steps.binarized, fairseq_steps.trained

pytestmark = pytest.mark.slow  # trains the tiny model once (session fixture)

CONFIG = {"src": "en", "tgt": "ja", "beam": 3, "threads": 1, "batch_size": 7, "chunk_lines": 10}
FAIL_RANK_1 = "import os\nif os.environ.get('RANK') == '1':\n    os._exit(3)\n"


def run(trained, corpora, spm_model, work: Path, ranks: int = 1) -> StepContext:
    ctx = make_ctx(work, "translate", model=trained[0], corpus=corpora["test"], spm=spm_model)
    ctx = replace(ctx, ranks=ranks)
    TranslateStep.from_dict(CONFIG).run(ctx)
    return ctx


def hyp(work: Path) -> bytes:
    return (work / "hyp/hyp.ja").read_bytes()


@pytest.fixture(scope="module")
def width_1(trained, corpora, spm_model, tmp_path_factory) -> tuple[StepContext, bytes]:
    work = tmp_path_factory.mktemp("width1")
    return run(trained, corpora, spm_model, work), hyp(work)


def test_two_ranks_share_the_shards_and_write_the_bytes_of_one(
    trained, corpora, spm_model, width_1, tmp_path
) -> None:
    one, expected = width_1
    ctx = run(trained, corpora, spm_model, tmp_path, ranks=2)
    assert hyp(tmp_path) == expected and len(expected.splitlines()) == 48
    assert ctx.stats.as_dict() == one.stats.as_dict()
    assert Artifact.open(tmp_path / "hyp").meta["lines"] == 48
    # 48 lines in shards of 10: shards 0, 2, 4 to rank 0 and 1, 3 to rank 1
    assert ctx.metrics["ranks"] == 2 and ctx.metrics["shards_by_rank"] == [3, 2]
    assert ctx.metrics["shards_translated"] == one.metrics["shards_translated"] == 5


def test_a_failed_rank_fails_the_step_and_a_rerun_translates_its_shards(
    trained, corpora, spm_model, width_1, tmp_path, monkeypatch
) -> None:
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(FAIL_RANK_1)  # rank 1 exits 3 as it starts
    monkeypatch.setenv("PYTHONPATH", str(hook))
    work = tmp_path / "work"
    with pytest.raises(StepError, match=r"rank 1 of 2 failed \(exit status 3"):
        run(trained, corpora, spm_model, work, ranks=2)
    saved = sorted(p.name for p in (work / ".scratch/shards").glob("*.pkl"))
    assert saved == ["00000000.pkl", "00000002.pkl", "00000004.pkl"]  # rank 0's
    monkeypatch.delenv("PYTHONPATH")
    ctx = run(trained, corpora, spm_model, work, ranks=2)
    assert ctx.metrics["shards_by_rank"] == [0, 2]  # only rank 1's shards again
    assert hyp(work) == width_1[1]


FOLLOWER = """
import sys
from pathlib import Path
from mtcore.run.jobs import run_task
sys.exit(run_task(Path(sys.argv[1]), 1, 2, 1, "t1", Path(sys.argv[2])))
"""


@pytest.mark.parametrize("fails", [False, True])
def test_the_leader_of_placed_ranks_waits_for_its_follower(
    trained, corpora, spm_model, width_1, tmp_path, monkeypatch, fails
) -> None:
    """As on Slurm or Ray: this process is rank 0 of a job of two tasks, a second process
    follows (``run_task`` of rank 1: waits for the published command, runs it, records its
    exit status)."""
    folder = tmp_path / "job"
    for key, value in task_env(0, 2, 0, "t1", folder).items():
        monkeypatch.setenv(key, value)
    follower_env = None
    if fails:
        hook = tmp_path / "hook"
        hook.mkdir()
        (hook / "sitecustomize.py").write_text(FAIL_RANK_1)
        follower_env = {**os.environ, "PYTHONPATH": str(hook)}
    log = tmp_path / "rank1.log"
    follower = subprocess.Popen(
        [sys.executable, "-c", FOLLOWER, str(folder), str(log)], env=follower_env
    )
    watchdog = threading.Timer(300, follower.kill)
    watchdog.start()
    try:
        if fails:
            with pytest.raises(StepError, match=r"rank 1 of 2 ended \(exit status 3\)"):
                run(trained, corpora, spm_model, tmp_path / "work", ranks=2)
        else:
            ctx = run(trained, corpora, spm_model, tmp_path / "work", ranks=2)
            assert hyp(tmp_path / "work") == width_1[1]
            assert ctx.metrics["shards_by_rank"] == [3, 2]
        assert follower.wait(60) == (3 if fails else 0)
    finally:
        watchdog.cancel()
        follower.kill()
