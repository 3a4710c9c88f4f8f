"""A training stopped in any epoch and continued from its checkpoint_last ends where one that ran
through ends: same parameters, same optimizer state (issue 22's byte-identical resume)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import torch

from mtcore.contracts.step import Artifact
from mtcore_plugins.steps.train import TrainStep
from tests.plugins.steps.test_fairseq_steps import (  # noqa: F401 (fixtures)
    TRAIN,
    binarized,
    corpora,
    spm_model,
)

pytestmark = pytest.mark.slow


def train_to(data: Path, save_dir: Path, updates: int) -> str:
    """fairseq-train through the train step's own command, stopped after ``updates`` (it saves
    checkpoint_last there, as a kill after a checkpoint leaves it); its log."""
    step = TrainStep.from_dict({**TRAIN, "save_interval_updates": 1000})
    command = step.command(data, Artifact.open(data).meta, save_dir)
    command[command.index("--max-update") + 1] = str(updates)
    done = subprocess.run(command, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def state(save_dir: Path) -> tuple[dict[str, torch.Tensor], dict[str, object]]:
    from mtcore_plugins.common.fairseq.setup import add_safe_globals

    add_safe_globals()  # the checkpoint's optimizer state, through the safe loader
    saved = torch.load(save_dir / "checkpoint_last.pt", map_location="cpu", weights_only=True)
    return saved["model"], saved["last_optimizer_state"]


def same(a: object, b: object) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(map(same, a, b))  # type: ignore[arg-type]
    return a == b


def test_stopped_in_epochs_two_and_three_it_continues_as_if_never_stopped(
    binarized,  # noqa: F811
    tmp_path: Path,
) -> None:
    """fairseq 0.12 ordered a resumed run's examples with the seed of the epoch it resumed in,
    not epoch 1's, so from epoch 2 on the batches (equal lengths in another order) and then
    the model drifted (mtcore_plugins.steps._fairseq_entry._resumed_batches_as_in_epoch_one)."""
    data = binarized[0]
    log = train_to(data, tmp_path / "through", 120)
    epoch = int(re.search(r'\| train \| \{"epoch": 1, .*"train_num_updates": "(\d+)"', log)[1])
    assert 2 * epoch + 2 < 120, f"{epoch} updates an epoch: 120 updates do not reach epoch 3"
    stops = [epoch + epoch // 2, 2 * epoch, 2 * epoch + 1]  # mid epoch 2, its end, epoch 3
    for updates in [*stops, 120]:
        train_to(data, tmp_path / "stopped", updates)
    through, stopped = state(tmp_path / "through"), state(tmp_path / "stopped")
    assert same(through[0], stopped[0]), "the parameters differ"
    assert same(through[1], stopped[1]), "the optimizer states differ"
