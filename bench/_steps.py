"""Helpers shared by the translation benches: a step context outside a recipe run, and a
corpus cut from small_parallel_enja. Imported by scripts run as ``python bench/<name>.py``
(their directory is then on ``sys.path``)."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared/data/en-ja/odashi+small_parallel_enja"


def context(work: Path, kind: str, **inputs: Path) -> Any:
    """A one-worker step context whose step id and work directory are named after ``kind``."""
    from mtcore.contracts.registry import load_registry
    from mtcore.contracts.step import Artifact, StepContext
    from mtcore_plugins.executors.local import LocalExecutor

    return StepContext(
        step_id=kind,
        kind=kind,
        step_hash="bench",
        work=work / kind,
        inputs={role: Artifact.open(path) for role, path in inputs.items()},
        executor=LocalExecutor(LocalExecutor.Config(workers=1)),
        registry=load_registry(),
        show_progress=False,
    )


def corpus(path: Path, split: str, lines: int) -> Path:
    """The first ``lines`` en-ja pairs of a small_parallel_enja split as an mtcore corpus."""
    from mtcore.data.corpus import CorpusWriter

    with (
        open(DATA / f"{split}.en", encoding="utf-8") as en,
        open(DATA / f"{split}.ja", encoding="utf-8") as ja,
        CorpusWriter(path, ("en", "ja")) as writer,
    ):
        for pair in itertools.islice(zip(en, ja, strict=True), lines):
            writer.write((pair[0].rstrip("\n"), pair[1].rstrip("\n")))
    return path


def build_model(
    work: Path, updates: int, arch: str, threads: int, **overrides: Any
) -> tuple[Path, Path]:
    """SentencePiece model and trained en->ja checkpoint directories (the steps' own outputs):
    5,000 training pairs, 2,048 tokens a batch and lr 0.003 unless ``overrides`` (``pairs`` and
    any train setting) say otherwise."""
    from mtcore_plugins.steps.binarize import BinarizeStep
    from mtcore_plugins.steps.spm import SentencePieceStep
    from mtcore_plugins.steps.train import TrainStep

    pairs = overrides.pop("pairs", 5000)
    train, valid = corpus(work / "train", "train", pairs), corpus(work / "valid", "dev", 100)
    SentencePieceStep.from_dict({"vocab_size": 4000, "num_threads": threads}).run(
        context(work, "spm", corpus=train)
    )
    spm = work / "spm" / "model"
    BinarizeStep.from_dict({"src": "en", "tgt": "ja"}).run(
        context(work, "binarize", train=train, valid=valid, spm=spm)
    )
    settings = {
        "arch": arch,
        "max_update": updates,
        "max_tokens": 2048,
        "lr": 0.003,
        "warmup_updates": max(1, updates // 4),
        "dropout": 0.1,
        "save_interval_updates": updates,
        "keep_last": 1,
        "average_last": 1,
        "threads": threads,
        **overrides,
    }
    TrainStep.from_dict(settings).run(context(work, "train", data=work / "binarize" / "data"))
    return work / "train" / "model", spm
