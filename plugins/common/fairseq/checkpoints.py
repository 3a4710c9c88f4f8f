"""Checkpoint files of a fairseq training: which to average (the last N by update count, or the
best N by a dev metric), repairing ``checkpoint_last.pt`` after a kill, and the averaging itself
(fairseq's ``scripts/average_checkpoints.py`` is not shipped in the wheel)."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

INTERVAL_CHECKPOINT = re.compile(r"checkpoint_(\d+)_(\d+)\.pt$")
BEST_DIR = "best"
BEST_INDEX = "best.json"


def interval_checkpoints(save_dir: Path) -> dict[int, Path]:
    """``checkpoint_<epoch>_<updates>.pt`` by update count, ascending."""
    found: dict[int, Path] = {}
    for path in save_dir.glob("checkpoint_*_*.pt"):
        match = INTERVAL_CHECKPOINT.search(path.name)
        if match:
            found[int(match.group(2))] = path
    return dict(sorted(found.items()))


def select_checkpoints(save_dir: Path, n: int, until: int | None = None) -> list[Path]:
    """The last ``n`` checkpoints by update count (of those saved at ``until`` updates or
    before, when given: the early-stopping point); ``checkpoint_last.pt`` counts when training
    stopped between two save intervals."""
    by_update = interval_checkpoints(save_dir)
    last = save_dir / "checkpoint_last.pt"
    if last.exists():
        by_update.setdefault(checkpoint_updates(last), last)
    kept = [u for u in sorted(by_update) if until is None or u <= until]
    return [by_update[u] for u in kept[-n:]]


def checkpoint_updates(path: Path) -> int:
    import torch

    from mtcore_plugins.common.fairseq.setup import add_safe_globals

    add_safe_globals()
    state = torch.load(path, map_location="cpu", weights_only=True)
    return int(state["optimizer_history"][-1]["num_updates"])


def repair_last_checkpoint(save_dir: Path) -> bool:
    """fairseq writes an interval checkpoint, then *copies* it to checkpoint_last.pt. A kill
    between the two leaves checkpoint_last.pt missing or older than the newest checkpoint (the
    resume would lose updates or start over), and a kill during the copy leaves it truncated
    (the resume would fail). In each case the newest intact interval checkpoint replaces it."""
    last = save_dir / "checkpoint_last.pt"
    intact = [p for p in interval_checkpoints(save_dir).values() if zipfile.is_zipfile(p)]
    last_ok = last.exists() and zipfile.is_zipfile(last)
    if last_ok and (not intact or last.stat().st_mtime_ns >= intact[-1].stat().st_mtime_ns):
        return False
    if not intact:
        if not last.exists():
            return False
        last.unlink()  # truncated, and nothing to resume from: start over
        return True
    partial = last.with_name("checkpoint_last.pt.repair")
    shutil.copyfile(intact[-1], partial)
    os.replace(partial, last)
    return True


def dictionary_symbols(path: Path) -> list[str]:
    """The symbols of a fairseq ``dict.txt`` in index order (its counts do not matter to a
    model: two dictionaries with the same symbols in the same order index tokens alike)."""
    symbols = []
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.removesuffix(" #fairseq:overwrite")
        symbols.append(line.rsplit(" ", 1)[0])
    return symbols


def first_difference(a: Path, b: Path) -> str:
    """Where two dictionary files first give a different symbol ("" when they index alike)."""
    left, right = dictionary_symbols(a), dictionary_symbols(b)
    for line, (x, y) in enumerate(zip(left, right, strict=False), start=1):
        if x != y:
            return f"{a} line {line} is {x!r}, {b} line {line} is {y!r}"
    if len(left) != len(right):
        return f"{a} has {len(left)} entries, {b} has {len(right)}"
    return ""


# --- best N by a dev metric ----------------------------------------------------------------
# fairseq's own --keep-best-checkpoints keeps a new checkpoint only when it beats the worst one
# kept, even while fewer than N are kept (a BLEU sequence 10, 8 keeps only the 10), and writes
# the score into the file name with a random digit appended. The training process therefore
# keeps its own best N (fairseq_entry --keep-best), indexed in best/best.json.


def best_entries(save_dir: Path) -> list[dict[str, Any]]:
    """The kept best checkpoints, best first: ``{"updates", "metric", "file"}``."""
    index = save_dir / BEST_DIR / BEST_INDEX
    if not index.exists():
        return []
    data = json.loads(index.read_text())
    return list(data["entries"])


def rank_best(entries: list[dict[str, Any]], maximize: bool) -> list[dict[str, Any]]:
    """Best first; among equal scores the later checkpoint (more training) first."""
    sign = 1.0 if maximize else -1.0
    return sorted(
        entries, key=lambda e: (sign * float(e["metric"]), int(e["updates"])), reverse=True
    )


def keep_best(
    save_dir: Path, source: Path, updates: int, metric: float, n: int, maximize: bool
) -> bool:
    """Adds the checkpoint ``source`` (saved at ``updates`` with dev score ``metric``) to the best
    ``n`` when it ranks among them. Crash-safe order: copy the file, rewrite the index, then
    delete what the index no longer names. Returns whether it was kept."""
    if not math.isfinite(metric):  # a diverged validation (nan loss) ranks nowhere
        return False
    folder = save_dir / BEST_DIR
    folder.mkdir(parents=True, exist_ok=True)
    name = f"checkpoint_u{updates}.pt"
    entries = [e for e in best_entries(save_dir) if int(e["updates"]) != updates]
    entry = {"updates": updates, "metric": metric, "file": name}
    ranked = rank_best([*entries, entry], maximize)[:n]
    if entry not in ranked:
        return False
    partial = folder / (name + ".partial")
    copy_without_optimizer(source, partial)
    os.replace(partial, folder / name)
    index = folder / (BEST_INDEX + ".partial")
    index.write_text(json.dumps({"maximize": maximize, "entries": ranked}, indent=1) + "\n")
    os.replace(index, folder / BEST_INDEX)
    named = {e["file"] for e in ranked} | {BEST_INDEX}
    for path in folder.iterdir():
        if path.name not in named:
            path.unlink()
    return True


def copy_without_optimizer(source: Path, target: Path) -> None:
    """A checkpoint kept only for averaging needs no optimizer state (Adam's is twice the
    model's size)."""
    import torch

    from mtcore_plugins.common.fairseq.setup import add_safe_globals

    add_safe_globals()
    state = torch.load(source, map_location="cpu", weights_only=True)
    state.pop("last_optimizer_state", None)
    torch.save(state, target)


def select_best(save_dir: Path, n: int) -> list[Path]:
    """The files of the best ``n`` kept checkpoints, in update order."""
    chosen = best_entries(save_dir)[:n]
    return [save_dir / BEST_DIR / e["file"] for e in sorted(chosen, key=lambda e: e["updates"])]


# --- averaging -------------------------------------------------------------------------------

STABLE_EXTRA_STATE = ("train_iterator", "val_loss", "best")
# Absolute paths fairseq keeps in a checkpoint's config (where set); loading overrides them
# anyway. finetune_from_model: a model trained from another (`init`) named that file, inside
# the workdir, so the same model had other bytes in another workdir (found by the kill sweep).
PATH_SETTINGS = (
    ("checkpoint", "save_dir", "checkpoints"),
    ("task", "data", "."),
    ("checkpoint", "finetune_from_model", "init.pt"),
)


def average_checkpoints(paths: Sequence[Path], output: Path) -> None:
    """fairseq's ``scripts/average_checkpoints.py`` logic: the mean of every model parameter
    (summed in float64, stored in the parameter's own dtype; integer buffers by floor
    division); the rest of the state comes from the last checkpoint, without the optimizer
    state. Written atomically."""
    import torch

    from mtcore_plugins.common.fairseq.setup import add_safe_globals

    if not paths:
        raise ValueError("average_checkpoints needs at least one checkpoint")
    add_safe_globals()
    summed: dict[str, Any] = {}
    dtypes: dict[str, Any] = {}
    state: dict[str, Any] = {}
    for path in paths:
        state = torch.load(path, map_location="cpu", weights_only=True)
        if summed and set(state["model"]) != set(summed):
            raise ValueError(f"{path} holds other parameters than {paths[0]}")
        for key, value in state["model"].items():
            dtypes[key] = value.dtype
            value = value.double() if value.is_floating_point() else value
            summed[key] = value.clone() if key not in summed else summed[key] + value
    for key, value in summed.items():
        if value.is_floating_point():
            summed[key] = (value / len(paths)).to(dtypes[key])
        else:
            summed[key] = value // len(paths)
    save_for_inference(state, summed, output)


def save_for_inference(state: dict[str, Any], model: dict[str, Any], output: Path) -> None:
    """Writes ``model`` with the rest of ``state`` made independent of how training went: no
    optimizer state, no timings, no history of resumes and no absolute paths, so a training
    killed and resumed gives the same bytes as one that ran through."""
    import argparse

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
            if isinstance(cfg.get(section), dict) and cfg[section].get(key) is not None:
                cfg[section][key] = placeholder
            # Legacy architectures keep a flat argparse copy of every setting in cfg.model.
            flat = cfg.get("model")
            if isinstance(flat, argparse.Namespace) and getattr(flat, key, None) is not None:
                setattr(flat, key, placeholder)
    partial = output.with_name(output.name + ".partial")
    torch.save(light, partial)
    os.replace(partial, output)
