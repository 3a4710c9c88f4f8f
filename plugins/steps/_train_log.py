"""fairseq's training log (``train.log``, JSON records): whether a training finished, its live
progress line, and the summary the ``train`` and ``train_lm`` steps record."""

from __future__ import annotations

import importlib.util
import json
import os
import re
from pathlib import Path
from typing import Any

from mtcore.api.engine import tail

JSON_RECORD = re.compile(r"\| (train_inner|train|valid) \| (\{.*\})\s*$")
DONE = "| done training in"
SKIPPED = re.compile(r"([\d,]+) samples have invalid sizes and will be skipped")
LOADED = re.compile(r"Loaded checkpoint (.*) \(epoch (\d+) @ (\d+) updates\)")
EARLY_STOP = "early stop since valid performance hasn't improved"
VALID_KEYS = ("loss", "nll_loss", "ppl", "bleu", "wps", "ups", "wall", "num_updates")


def training_done(log: Path) -> bool:
    """fairseq-train logs ``done training in`` as its last act; a rerun after that (killed while
    finishing up) must not train again: fairseq would run one update past max_update."""
    return log.exists() and DONE in tail(log, 5)


def live_line(log: Path, max_update: int) -> str:
    """``update 350/1400 loss 5.21 3.2 upd/s`` from the last progress record of a running
    fairseq-train log (its last 16 KiB)."""
    if not log.exists():
        return "starting"
    with open(log, "rb") as handle:
        handle.seek(max(0, log.stat().st_size - 16384))
        lines = handle.read().decode("utf-8", errors="replace").splitlines()
    for line in reversed(lines):
        match = JSON_RECORD.search(line)
        if match and match.group(1) in ("train_inner", "train"):
            try:
                record = json.loads(match.group(2))
                line = f"update {int(float(record['num_updates']))}/{max_update}"
                if "loss" in record:
                    line += f" loss {float(record['loss']):.2f}"
                if "ups" in record:
                    line += f" {float(record['ups']):.1f} upd/s"
            except (ValueError, TypeError, KeyError):
                continue
            return line
    return "update 0/" + str(max_update)


def parse_train_log(log: Path) -> dict[str, Any]:
    """Final losses, updates and speed from fairseq's JSON log lines (the last of each kind)."""
    found: dict[str, Any] = {}
    with open(log, encoding="utf-8", errors="replace") as handle:
        for line in handle:
            loaded = LOADED.search(line)
            if loaded and loaded.group(1).endswith("checkpoint_last.pt"):
                found["resumed_from_update"] = int(loaded.group(3))
            elif loaded:  # the init model of a fine-tuning, loaded with everything reset
                found["init_loaded"] = True
            if EARLY_STOP in line:
                found["early_stopped"] = True
            skipped = SKIPPED.search(line)
            if skipped:  # logged once per epoch iterator, the same examples each time
                count = int(skipped.group(1).replace(",", ""))
                found["skipped_too_long"] = max(found.get("skipped_too_long", 0), count)
            kind, record = _json_record(line)
            if kind in ("train", "valid"):
                for key in VALID_KEYS:
                    if f"{kind}_{key}" in record:
                        found[f"{kind}_{key}"] = float(record[f"{kind}_{key}"])
            elif kind == "train_inner" and "num_updates" in record:
                found["train_inner_loss"] = float(record["loss"])
                found["train_inner_num_updates"] = float(record["num_updates"])
    updates = max(
        found.get("train_num_updates", 0),
        found.get("train_inner_num_updates", 0),
        found.get("valid_num_updates", 0),
    )
    found["updates"] = int(updates)
    if "train_wps" in found:
        found["tokens_per_second"] = found.pop("train_wps")
    return found


def _json_record(line: str) -> tuple[str, dict[str, Any]]:
    match = JSON_RECORD.search(line)
    if not match:
        return "", {}
    try:
        return match.group(1), json.loads(match.group(2))
    except json.JSONDecodeError:
        return "", {}


CURVE_KEYS = {
    "train_inner": ("loss", "nll_loss", "ppl", "lr", "gnorm", "wps"),
    "train": ("train_loss",),
    "valid": ("valid_loss", "valid_nll_loss", "valid_ppl", "valid_bleu"),
}
CURVE_PREFIX = {"train_inner": "train", "train": "epoch", "valid": "valid"}


def parse_curves(log: Path) -> dict[str, list[tuple[int, float]]]:
    """Training curves from fairseq's JSON records, each a list of (update, value) sorted by
    update: ``train/loss``, ``train/lr``, ... (``train_inner``, every ``log_interval``
    updates), ``epoch/loss`` (an epoch's average, at its end) and ``valid/loss``,
    ``valid/bleu``, ... (every validation). A training killed and resumed from its last
    checkpoint logs some updates twice (the killed run's records, then the resumed run's from
    the checkpoint on): the later record of an update wins, so the curve is one line without
    duplicated points."""
    if not log.exists():
        return {}
    points: dict[str, dict[int, float]] = {}
    with open(log, encoding="utf-8", errors="replace") as handle:
        for line in handle:
            kind, record = _json_record(line)
            keys = CURVE_KEYS.get(kind)
            if not keys:
                continue
            step = record.get(
                "num_updates", record.get("valid_num_updates", record.get("train_num_updates"))
            )
            try:
                update = int(float(step))
            except (TypeError, ValueError):
                continue
            prefix = CURVE_PREFIX[kind]
            for key in keys:
                if key not in record:
                    continue
                try:
                    value = float(record[key])
                except (TypeError, ValueError):
                    continue
                name = f"{prefix}/{key.removeprefix(kind + '_')}"
                points.setdefault(name, {})[update] = value
    return {name: sorted(found.items()) for name, found in points.items()}


TENSORBOARD_ENV = "MTCORE_TENSORBOARD"
"""The folder that ``mtcore run --tensorboard`` gives fairseq for TensorBoard event files."""


def tensorboard_args(step_id: str) -> list[str]:
    """``--tensorboard-logdir DIR/<step id>`` (fairseq's own TensorBoard logging: every
    ``train_inner``, ``train`` and ``valid`` record as scalars) when ``$MTCORE_TENSORBOARD``
    names DIR; nothing otherwise. The event files live outside the step's folder, so they are
    no part of its outputs; a resumed training adds a file to the same folder."""
    folder = os.environ.get(TENSORBOARD_ENV)
    if not folder:
        return []
    if importlib.util.find_spec("tensorboard") is None:
        raise ImportError(
            f"{TENSORBOARD_ENV} is set but the tensorboard package is not installed "
            "(pip install tensorboard)"
        )
    return ["--tensorboard-logdir", str(Path(folder) / step_id)]
