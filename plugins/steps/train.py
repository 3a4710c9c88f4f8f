"""Trains a fairseq translation model in a subprocess; resumes from checkpoint_last.pt."""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import time
import zipfile
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field

from mtcore.errors import DataError, StepError
from mtcore.plugin import PluginConfig
from mtcore.process import run_logged, tail
from mtcore.step import Step, StepContext, write_artifact_meta
from mtcore_plugins.steps.fairseq_entry import average_checkpoints

ENTRY = "mtcore_plugins.steps.fairseq_entry"
INTERVAL_CHECKPOINT = re.compile(r"checkpoint_(\d+)_(\d+)\.pt$")
JSON_RECORD = re.compile(r"\| (train_inner|train|valid) \| (\{.*\})\s*$")
DONE = "| done training in"
SKIPPED = re.compile(r"([\d,]+) samples have invalid sizes and will be skipped")
LOADED = re.compile(r"Loaded checkpoint .* \(epoch (\d+) @ (\d+) updates\)")


class TrainConfig(PluginConfig):
    # Defaults follow NT5 Table 2, "Initial Translation Model", unless noted.
    arch: str = Field(
        "mtcore_transformer_tiny",
        min_length=1,
        max_length=100,
        description="fairseq architecture (--arch), built in or from a models plugin",
    )
    models: list[str] = Field(
        ["transformer_presets"],
        max_length=32,
        description="mtcore.models plugins to register before fairseq starts",
    )
    max_update: int = Field(50_000, ge=1, le=10_000_000, description="stop after this many updates")
    max_epoch: int | None = Field(None, ge=1, le=100_000, description="stop after this many epochs")
    max_tokens: int = Field(4096, ge=16, le=1_000_000, description="tokens per batch per device")
    update_freq: int = Field(
        1, ge=1, le=1024, description="batches accumulated per update (x max_tokens = batch)"
    )
    lr: float = Field(0.001, gt=0.0, le=10.0, description="peak learning rate")
    lr_scheduler: Literal["inverse_sqrt", "fixed", "polynomial_decay", "cosine"] = Field(
        "inverse_sqrt", description="learning-rate schedule (Table 2: inverse square root decay)"
    )
    warmup_updates: int = Field(4000, ge=0, le=1_000_000, description="linear warmup updates")
    warmup_init_lr: float = Field(
        1e-7, ge=0.0, le=10.0, description="learning rate at update 0 (inverse_sqrt, cosine)"
    )
    adam_beta1: float = Field(0.9, ge=0.0, lt=1.0, description="Adam beta1")
    adam_beta2: float = Field(0.98, ge=0.0, lt=1.0, description="Adam beta2")
    adam_eps: float = Field(1e-8, gt=0.0, le=1.0, description="Adam epsilon")
    weight_decay: float = Field(0.0, ge=0.0, le=1.0, description="Adam weight decay")
    clip_norm: float = Field(1.0, ge=0.0, le=1000.0, description="gradient clipping; 0 disables")
    dropout: float = Field(0.3, ge=0.0, le=0.9, description="dropout")
    attention_dropout: float | None = Field(
        None, ge=0.0, le=0.9, description="attention dropout; unset keeps the arch's"
    )
    label_smoothing: float = Field(
        0.1,
        ge=0.0,
        le=0.9,  # not in the paper: fairseq's usual value
        description="label smoothing of the cross-entropy",
    )
    share_all_embeddings: bool = Field(
        True, description="tie encoder, decoder and output embeddings (the dictionary is joined)"
    )
    seed: int = Field(1, ge=0, le=2**31 - 1, description="random seed")
    save_interval_updates: int = Field(
        200, ge=1, le=1_000_000, description="save a checkpoint every N updates"
    )
    keep_last: int = Field(8, ge=1, le=1000, description="interval checkpoints kept while training")
    average_last: int = Field(
        8, ge=1, le=1000, description="average the last N checkpoints into checkpoint.pt"
    )
    too_long: Literal["error", "skip"] = Field(
        "error",
        description="training pairs longer than the model's positions or max_tokens: error stops "
        "before the first update; skip leaves them out, counted as train.skipped_too_long "
        "(fairseq itself skips them with only a warning)",
    )
    threads: int = Field(0, ge=0, le=512, description="torch CPU threads; 0 keeps torch's default")
    log_interval: int = Field(100, ge=1, le=1_000_000, description="log every N updates")
    extra_args: list[str] = Field(
        default_factory=list,
        max_length=200,
        description="further fairseq-train arguments, passed verbatim",
    )


class TrainStep(Step):
    """fairseq-train on a ``fairseq-data`` artifact; writes ``model/checkpoint.pt`` (averaged)."""

    name = "train"
    Config = TrainConfig
    inputs: ClassVar[dict[str, bool]] = {"data": True}
    outputs: ClassVar[tuple[str, ...]] = ("model",)

    def plugins_used(self) -> list[tuple[str, str]]:
        return [("models", name) for name in self.config.models]

    def run(self, ctx: StepContext) -> None:
        data = ctx.inputs["data"]
        if data.type != "fairseq-data":
            raise DataError(f"{data.path} is not fairseq data (artifact type {data.type!r})")
        out = ctx.output("model")
        save_dir = out / "checkpoints"
        log = out / "train.log"
        started = time.time()
        if not training_done(log):
            if repair_last_checkpoint(save_dir):
                ctx.stats.add("train.repaired_checkpoint_last")
            run_logged(
                self.command(data.path, data.meta, save_dir), log, "fairseq-train", env=self._env()
            )
        if not (out / "checkpoint.pt").exists():
            self._finalize(save_dir, out / "checkpoint.pt")
        shutil.rmtree(save_dir, ignore_errors=True)
        for lang in (data.meta["src"], data.meta["tgt"]):
            shutil.copyfile(data.path / f"dict.{lang}.txt", out / f"dict.{lang}.txt")
        self._report(ctx, log, time.time() - started)
        write_artifact_meta(
            out,
            type="fairseq-model",
            checkpoint="checkpoint.pt",
            src=data.meta["src"],
            tgt=data.meta["tgt"],
            arch=self.config.arch,
            models=list(self.config.models),
        )

    def command(self, data: Path, meta: dict[str, Any], save_dir: Path) -> list[str]:
        c = self.config
        head = [sys.executable, "-m", ENTRY, "train", "--models", ",".join(c.models)]
        head += ["--threads", str(c.threads), "--too-long", c.too_long, "--", str(data)]
        flags: dict[str, object] = {
            "--task": "translation",
            "--source-lang": meta["src"],
            "--target-lang": meta["tgt"],
            "--arch": c.arch,
            "--optimizer": "adam",
            "--adam-betas": f"({c.adam_beta1}, {c.adam_beta2})",
            "--adam-eps": c.adam_eps,
            "--weight-decay": c.weight_decay,
            "--clip-norm": c.clip_norm,
            "--lr": c.lr,
            "--lr-scheduler": c.lr_scheduler,
            "--warmup-updates": c.warmup_updates,
            "--dropout": c.dropout,
            "--criterion": "label_smoothed_cross_entropy",
            "--label-smoothing": c.label_smoothing,
            "--max-tokens": c.max_tokens,
            "--update-freq": c.update_freq,
            "--max-update": c.max_update,
            "--seed": c.seed,
            "--save-dir": save_dir,
            "--save-interval-updates": c.save_interval_updates,
            "--keep-interval-updates": max(c.keep_last, c.average_last),
            "--num-workers": 0,
            # fairseq's default of 8 reshapes batches to multiples of 8 and can drop a remainder.
            "--required-batch-size-multiple": 1,
            "--log-format": "json",
            "--log-interval": c.log_interval,
        }
        args = [item for flag, value in flags.items() for item in (flag, str(value))]
        return [*head, *args, "--no-epoch-checkpoints", *self._optional_args(), *c.extra_args]

    def _optional_args(self) -> list[str]:
        c = self.config
        args: list[str] = []
        if c.lr_scheduler in ("inverse_sqrt", "cosine"):
            args += ["--warmup-init-lr", str(c.warmup_init_lr)]
        if c.lr_scheduler == "polynomial_decay":
            args += ["--total-num-update", str(c.max_update)]
        if c.max_epoch is not None:
            args += ["--max-epoch", str(c.max_epoch)]
        if c.attention_dropout is not None:
            args += ["--attention-dropout", str(c.attention_dropout)]
        if c.share_all_embeddings:
            args.append("--share-all-embeddings")
        return args

    def _env(self) -> dict[str, str]:
        if self.config.threads == 0:
            return {}
        n = str(self.config.threads)
        return {"OMP_NUM_THREADS": n, "MKL_NUM_THREADS": n}

    def _finalize(self, save_dir: Path, target: Path) -> None:
        """Averages the last ``average_last`` checkpoints by update count (checkpoint_last.pt
        counts when training stopped between two save intervals)."""
        chosen = select_checkpoints(save_dir, self.config.average_last)
        if not chosen:
            raise StepError(f"fairseq-train finished but wrote no checkpoint in {save_dir}")
        average_checkpoints(chosen, target)

    def _report(self, ctx: StepContext, log: Path, seconds: float) -> None:
        parsed = parse_train_log(log)
        ctx.metrics.update(parsed)
        ctx.metrics["seconds"] = round(seconds, 1)
        ctx.stats.add("train.updates", int(parsed.get("updates", 0)))
        if parsed.get("skipped_too_long"):
            ctx.stats.add("train.skipped_too_long", parsed["skipped_too_long"])
            ctx.log.warning(
                "%s: fairseq skipped %d training examples longer than the model allows",
                ctx.step_id,
                parsed["skipped_too_long"],
            )


def training_done(log: Path) -> bool:
    """fairseq-train logs ``done training in`` as its last act; a rerun after that (killed while
    finishing up) must not train again: fairseq would run one update past max_update."""
    return log.exists() and DONE in tail(log, 5)


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


def interval_checkpoints(save_dir: Path) -> dict[int, Path]:
    """``checkpoint_<epoch>_<updates>.pt`` by update count, ascending."""
    found: dict[int, Path] = {}
    for path in save_dir.glob("checkpoint_*_*.pt"):
        match = INTERVAL_CHECKPOINT.search(path.name)
        if match:
            found[int(match.group(2))] = path
    return dict(sorted(found.items()))


def select_checkpoints(save_dir: Path, n: int) -> list[Path]:
    by_update = interval_checkpoints(save_dir)
    last = save_dir / "checkpoint_last.pt"
    if last.exists():
        by_update.setdefault(checkpoint_updates(last), last)
    return [by_update[u] for u in sorted(by_update)[-n:]]


def checkpoint_updates(path: Path) -> int:
    import torch

    from mtcore_plugins.steps.fairseq_entry import add_safe_globals

    add_safe_globals()
    state = torch.load(path, map_location="cpu", weights_only=True)
    return int(state["optimizer_history"][-1]["num_updates"])


def parse_train_log(log: Path) -> dict[str, Any]:
    """Final losses, updates and speed from fairseq's JSON log lines (the last of each kind)."""
    found: dict[str, Any] = {}
    with open(log, encoding="utf-8", errors="replace") as handle:
        for line in handle:
            loaded = LOADED.search(line)
            if loaded:
                found["resumed_from_update"] = int(loaded.group(2))
            skipped = SKIPPED.search(line)
            if skipped:  # logged once per epoch iterator, the same examples each time
                count = int(skipped.group(1).replace(",", ""))
                found["skipped_too_long"] = max(found.get("skipped_too_long", 0), count)
            kind, record = _json_record(line)
            if kind in ("train", "valid"):
                for key in ("loss", "nll_loss", "ppl", "wps", "ups", "wall", "num_updates"):
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
