"""Trust boundaries (issue 43): a checkpoint is data whatever the environment says, a pinned
checksum is final, a local Ray cluster is private to this machine."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

PAYLOAD = """
import sys
from pathlib import Path
import torch

class Payload:
    def __reduce__(self):  # unpickling creates the marker file: code from a checkpoint
        return (open, (sys.argv[2], "w"))

torch.save({"model": {}, "args": None, "extra": Payload()}, sys.argv[1])
"""

LOAD = """
import pickle, sys
{setup}
from fairseq import checkpoint_utils
try:
    checkpoint_utils.load_checkpoint_to_cpu(sys.argv[1])
except pickle.UnpicklingError as exc:
    print("refused:", str(exc).splitlines()[0])
"""


def crafted_checkpoint(tmp_path: Path) -> tuple[Path, Path]:
    checkpoint, marker = tmp_path / "checkpoint_best.pt", tmp_path / "pwned"
    subprocess.run(
        [sys.executable, "-c", PAYLOAD, str(checkpoint), str(marker)], check=True, timeout=120
    )
    assert not marker.exists()
    return checkpoint, marker


@pytest.mark.parametrize(
    "setup",
    [
        # as decoding, the neural LM scorer and the converter set up a process
        "from mtcore_plugins.common.fairseq_setup import add_safe_globals; add_safe_globals()",
        # as the CLI and mtcore.jobs do, before any step
        "from mtcore.process import safe_torch_loads; safe_torch_loads()",
    ],
    ids=["fairseq-setup", "cli"],
)
def test_fairseq_loads_refuse_a_crafted_checkpoint_despite_torchs_opt_out(tmp_path, setup):
    """fairseq's checkpoint loader passes no weights_only: with torch's opt-out variable set it
    unpickled whatever a checkpoint held. It runs no code now, and says why."""
    checkpoint, marker = crafted_checkpoint(tmp_path)
    env = {**os.environ, "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1"}
    done = subprocess.run(
        [sys.executable, "-c", LOAD.format(setup=setup), str(checkpoint)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert not marker.exists(), "the checkpoint's code ran"
    assert done.returncode == 0, done.stderr[-2000:]
    assert "refused: Weights only load failed" in done.stdout, done.stdout + done.stderr[-2000:]


def test_without_the_guard_the_opt_out_runs_the_payload(tmp_path):
    """The check above can fail: the same load with the opt-out and no guard runs the code."""
    checkpoint, marker = crafted_checkpoint(tmp_path)
    env = {**os.environ, "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1"}
    env.pop("TORCH_FORCE_WEIGHTS_ONLY_LOAD", None)
    subprocess.run(
        [sys.executable, "-c", LOAD.format(setup=""), str(checkpoint)],
        capture_output=True,
        env=env,
        timeout=300,
    )
    assert marker.exists()
