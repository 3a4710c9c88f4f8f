"""Runs fairseq in a subprocess after registering mtcore model plugins, plus the helpers the
fairseq steps share (safe checkpoint loading, checkpoint averaging).

    python -m mtcore_plugins.steps.fairseq_entry train [--models a,b] [--threads N] \
        [--too-long error|skip] -- FAIRSEQ_TRAIN_ARGS...

registers the named ``mtcore.models`` plugins, allows the types fairseq checkpoints hold for
torch's safe (``weights_only``) loader, then runs ``fairseq_cli.train`` with ARGS. Nothing here
imports torch or fairseq at module level.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from mtcore.process import die_with_parent


def safe_globals() -> list[Any]:
    """Types inside fairseq checkpoints that torch's weights-only unpickler must allow. Found by
    loading fairseq 0.12 checkpoints (interval, last, best; with optimizer state) under torch
    2.13: only ``argparse.Namespace`` (a legacy architecture's ``cfg.model``). The logged meters
    in ``extra_state`` are stored as plain dicts and tensors; ``OrderedDict`` is allowed already."""
    return [argparse.Namespace]


@contextmanager
def root_logging_kept() -> Iterator[None]:
    """Importing fairseq calls ``logging.basicConfig(level=DEBUG)`` (wav2vec2_classification)
    and more: every library's debug output would reach the user's terminal. Undo that."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    if not handlers:  # basicConfig does nothing while the root logger has a handler
        root.addHandler(logging.NullHandler())
    try:
        yield
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


def add_safe_globals() -> None:
    import torch.serialization

    torch.serialization.add_safe_globals(safe_globals())


def register_models(names: Sequence[str], registry: Any = None) -> None:
    """Calls ``register()`` of each named ``mtcore.models`` plugin (idempotent by contract)."""
    if registry is None:
        from mtcore.registry import load_registry

        registry = load_registry()
    for name in names:
        plugin = registry.load("models", name).from_dict({})
        plugin.register()


def average_checkpoints(paths: Sequence[Path], output: Path) -> None:
    """fairseq's ``scripts/average_checkpoints.py`` logic (not shipped in the wheel): the mean of
    every model parameter; the rest of the state comes from the last checkpoint, without the
    optimizer state. Written atomically."""
    import torch

    add_safe_globals()
    summed: dict[str, Any] = {}
    state: dict[str, Any] = {}
    for path in paths:
        state = torch.load(path, map_location="cpu", weights_only=True)
        for key, value in state["model"].items():
            value = value.float() if value.is_floating_point() else value
            summed[key] = value.clone() if key not in summed else summed[key] + value
    for key, value in summed.items():
        summed[key] = value / len(paths) if value.is_floating_point() else value // len(paths)
    save_for_inference(state, summed, output)


STABLE_EXTRA_STATE = ("train_iterator", "val_loss", "best")
# Absolute paths fairseq keeps in a checkpoint's config; loading overrides them anyway.
PATH_SETTINGS = (("checkpoint", "save_dir", "checkpoints"), ("task", "data", "."))


def save_for_inference(state: dict[str, Any], model: dict[str, Any], output: Path) -> None:
    """Writes ``model`` with the rest of ``state`` made independent of how training went: no
    optimizer state, no timings, no history of resumes and no absolute paths, so a training
    killed and resumed gives the same bytes as one that ran through."""
    import torch

    light = {k: v for k, v in state.items() if k != "last_optimizer_state"}
    light["model"] = model
    if light.get("optimizer_history"):
        light["optimizer_history"] = light["optimizer_history"][-1:]
    extra = light.get("extra_state") or {}
    light["extra_state"] = {k: v for k, v in extra.items() if k in STABLE_EXTRA_STATE}
    cfg = light.get("cfg")
    if isinstance(cfg, dict):
        for section, key, placeholder in PATH_SETTINGS:
            if isinstance(cfg.get(section), dict) and key in cfg[section]:
                cfg[section][key] = placeholder
            # Legacy architectures keep a flat argparse copy of every setting in cfg.model.
            if isinstance(cfg.get("model"), argparse.Namespace) and hasattr(cfg["model"], key):
                setattr(cfg["model"], key, placeholder)
    partial = output.with_name(output.name + ".partial")
    torch.save(light, partial)
    os.replace(partial, output)


def _refuse_long_examples() -> None:
    """fairseq's trainer skips training examples longer than the model's positions (or than
    max_tokens) with only a warning; make that an error before the first update instead."""
    from fairseq.tasks.fairseq_task import FairseqTask

    def strict(
        self: Any, indices: Any, dataset: Any, max_positions: Any = None, *args: Any, **kw: Any
    ) -> Any:
        kept, ignored = dataset.filter_indices_by_size(indices, max_positions)
        if len(ignored) > 0:
            raise SystemExit(
                f"mtcore: {len(ignored)} examples are longer than max_positions={max_positions} "
                f"(source, target; max_tokens counts too), first ids {list(ignored[:10])}. "
                "Filter long pairs before binarize, raise max_tokens, or set too_long: skip."
            )
        return kept

    FairseqTask.filter_indices_by_size = strict  # type: ignore[method-assign]


def _train(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="fairseq_entry train", add_help=False)
    parser.add_argument("--models", default="", help="comma-separated mtcore.models plugins")
    parser.add_argument("--threads", type=int, default=0, help="torch threads; 0 keeps torch's")
    parser.add_argument("--too-long", choices=("error", "skip"), default="error")
    split = argv.index("--") if "--" in argv else len(argv)
    ours = parser.parse_args(argv[:split])
    rest = argv[split + 1 :]
    # fairseq_cli.train's own format, set before any fairseq import can configure the root
    # logger first; the train step parses these lines.
    logging.basicConfig(
        format="%(asctime)s | %(levelname)s | %(name)s | %(message)s",
        datefmt="%Y-%m-%d %H:%M:%S",
        level=logging.INFO,
        stream=sys.stdout,
        force=True,
    )
    import torch

    if ours.threads > 0:
        torch.set_num_threads(ours.threads)
    register_models([m for m in ours.models.split(",") if m])
    add_safe_globals()
    if ours.too_long == "error":
        _refuse_long_examples()
    from fairseq_cli import train

    sys.argv = ["fairseq-train", *rest]
    train.cli_main()


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] != "train":
        sys.exit(
            "usage: python -m mtcore_plugins.steps.fairseq_entry train [--models a,b] "
            "[--threads N] [--too-long error|skip] -- FAIRSEQ_TRAIN_ARGS..."
        )
    die_with_parent()
    _train(argv[1:])


if __name__ == "__main__":
    main()
