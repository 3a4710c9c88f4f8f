"""Trains a fairseq translation model in a subprocess; resumes from checkpoint_last.pt.

Beyond a plain training: fine-tuning or vocabulary-mapped initialisation from another train
step's model (input ``init``), early stopping on dev loss or BLEU, averaging the last or the
best N checkpoints, right-to-left models, Adafactor, fp16/bf16 on GPU and several processes
through torchrun (settings in :mod:`mtcore_plugins.steps._train_config`).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any, ClassVar

from mtcore.api import Artifact, DataError, Step, StepContext, StepError, write_artifact_meta
from mtcore.api.engine import Resources, current_task, publish_ranks, run_logged, thread_count
from mtcore_plugins.common.fairseq.checkpoints import (
    average_checkpoints,
    best_entries,
    checkpoint_updates,
    first_difference,
    repair_last_checkpoint,
    select_best,
    select_checkpoints,
)
from mtcore_plugins.common.hub.pretrained import ARTIFACT_TYPE as PRETRAINED
from mtcore_plugins.steps._pretrained_init import (
    TOKENIZER_DIR,
    arch_args,
    check_continuable,
    fairseq_checkpoint,
)
from mtcore_plugins.steps._train_config import TrainConfig
from mtcore_plugins.steps._train_log import (
    LOADED,
    live_line,
    parse_curves,
    parse_train_log,
    tensorboard_args,
    training_done,
)

ENTRY = "mtcore_plugins.steps._fairseq_entry"
__all__ = ["LOADED", "TrainConfig", "TrainStep", "parse_train_log", "repair_last_checkpoint"]


class TrainStep(Step[TrainConfig]):
    """fairseq-train on a ``fairseq-data`` artifact; writes ``model/checkpoint.pt`` (averaged).
    With ``init`` (a ``fairseq-model`` artifact) training starts from that model's weights with
    a fresh optimizer, LR schedule, meters and data iterator (fairseq --finetune-from-model,
    which a killed run resumes from its own checkpoint_last.pt instead).

    ``init`` may also be a pretrained M2M-100 or NLLB model of the recipe's ``models:``
    (HW-TSC §3.3/§5.3), with data binarized by its tokenizer (``binarize`` with the model as
    ``spm``): its weights become a fairseq ``transformer`` of the model's shape (``arch:
    transformer``), and the trained model keeps the tokenizer and language tokens its decoders
    need (:mod:`~mtcore_plugins.steps._pretrained_init`)."""

    name = "train"
    inputs: ClassVar[dict[str, bool]] = {"data": True, "init": False}
    outputs: ClassVar[tuple[str, ...]] = ("model",)
    trains: ClassVar[bool] = True
    _gpus = 0  # CUDA devices the driver sees (set by _check_device)

    def resources(self) -> Resources:
        """One GPU a process where the settings need GPUs (fp16/bf16: one process per GPU);
        else ``threads`` CPU threads a process (every core for torch's default). A recipe's
        ``resources: {train: {gpus: N}}`` asks for GPUs for fp32 training."""
        c = self.config
        threads = thread_count(c.threads)
        ranks = c.distributed_world_size
        if c.precision != "fp32":
            return Resources(cpus=threads * ranks, gpus=ranks, ranks=ranks, distributed=True)
        return Resources(cpus=threads * ranks, ranks=ranks, distributed=True)

    def work(self) -> dict[str, float]:
        """``tokens``: target tokens of the whole training; with ``batch_tokens``, ``batches``:
        the batches of ``max_tokens`` an update holds (a width must divide it)."""
        c = self.config
        if c.batch_tokens is not None:
            return {
                "tokens": float(c.max_update * c.batch_tokens),
                "batches": float(c.batch_tokens // c.max_tokens),
            }
        per_update = c.max_tokens * c.update_freq * c.distributed_world_size
        return {"tokens": float(c.max_update * per_update)}

    def update_freq(self, ranks: int) -> int:
        """Batches accumulated per update at ``ranks`` ranks: ``batch_tokens / (max_tokens x
        ranks)`` where the batch is stated in tokens, else the setting. Only the order in
        which the gradients of one update are summed changes with the width."""
        c = self.config
        if c.batch_tokens is None:
            return c.update_freq
        batches = c.batch_tokens // c.max_tokens
        if batches % ranks:
            raise StepError(
                f"train: batch_tokens {c.batch_tokens} is {batches} batches of max_tokens "
                f"{c.max_tokens}, which {ranks} ranks cannot share evenly; give a width that "
                f"divides {batches} (resources: gpus or ranks)"
            )
        return batches // ranks

    @classmethod
    def curves(cls, folder: Path) -> dict[str, list[tuple[int, float]]]:
        return parse_curves(folder / "model" / "train.log")

    def live(self, work: Path) -> str:
        return live_line(work / "model" / "train.log", self.config.max_update)

    def run(self, ctx: StepContext) -> None:
        data = ctx.inputs["data"]
        if data.type != "fairseq-data":
            raise DataError(f"{data.path} is not fairseq data (artifact type {data.type!r})")
        given = list(self.config.extra_args)
        subset = (
            given[given.index("--train-subset") + 1] if "--train-subset" in given[:-1] else "train"
        )
        cycled = subset == "train" and any(data.meta.get("cycle_lines", []))
        if data.meta.get("lines", {}).get(subset) == 0 and not cycled:
            raise DataError(
                f"{ctx.step_id}: the training data {data.path} has no {subset} pairs (its "
                f"binarize step's {subset} input is empty: a step before it may drop all)"
            )
        ranks = ctx.ranks if self.config.batch_tokens is not None else self.ranks
        if ctx.nodes > 1 and current_task() is None:
            raise StepError(
                f"{ctx.step_id}: {ranks} ranks on {ctx.nodes} nodes need a scheduler that places "
                "ranks on other machines (slurm, ray); the local one runs them on this machine "
                "(resources: nodes: 1)"
            )
        self._check_device(ranks)
        out = ctx.output("model")
        save_dir = out / "checkpoints"
        log = out / "train.log"
        started = time.time()
        init = ctx.inputs.get("init")
        models = self._models(init)
        shape = self._pretrained_shape(ctx, data, init)
        if not training_done(log):
            start = self._init_checkpoint(ctx, data, init) if init is not None else None
            if repair_last_checkpoint(save_dir):
                ctx.stats.add("train.repaired_checkpoint_last")
            cmd = self.command(data.path, data.meta, save_dir, start, models, shape, ranks)
            cmd += tensorboard_args(ctx.step_id)
            ctx.metrics["ranks"] = ranks
            ctx.metrics["update_freq"] = self.update_freq(ranks)
            env = self._env()
            task = current_task()
            if task is not None and ranks > 1:
                # the scheduler placed the ranks (Slurm tasks, Ray bundles): this is rank 0
                if task.world != ranks:
                    raise StepError(
                        f"{ctx.step_id}: the scheduler started {task.world} ranks for a width "
                        f"of {ranks}"
                    )
                env = publish_ranks(task, cmd, env, Path.cwd())
            # one CPU process: a warm fork; several (torch.distributed), or CUDA (a fork of a
            # process that may have touched the driver), start cold
            warm = ranks == 1 and self._gpus == 0
            run_logged(cmd, log, "fairseq-train", env=env, warm=warm)
        if not (out / "checkpoint.pt").exists():
            ctx.metrics["averaged"] = self._finalize(save_dir, out / "checkpoint.pt")
        shutil.rmtree(save_dir, ignore_errors=True)
        for lang in (data.meta["src"], data.meta["tgt"]):
            shutil.copyfile(data.path / f"dict.{lang}.txt", out / f"dict.{lang}.txt")
        extra: dict[str, Any] = {}
        if "language_tokens" in data.meta:  # a pretrained model's tokenizer, tagged
            shutil.copytree(data.path / TOKENIZER_DIR, out / TOKENIZER_DIR, dirs_exist_ok=True)
            extra = {k: data.meta[k] for k in ("language_tokens", "pretrained")}
            extra["arch_args"] = shape
        self._report(ctx, log, time.time() - started)
        write_artifact_meta(
            out,
            type="fairseq-model",
            checkpoint="checkpoint.pt",
            src=data.meta["src"],
            tgt=data.meta["tgt"],
            arch=self.config.arch,
            models=models,
            direction=self.config.direction,
            criterion=self.config.criterion,
            **extra,
        )

    def command(
        self,
        data: Path,
        meta: dict[str, Any],
        save_dir: Path,
        init: Path | None = None,
        models: list[str] | None = None,
        shape: list[str] | None = None,
        ranks: int | None = None,
    ) -> list[str]:
        """``shape``: the flags of a pretrained model's network (:func:`arch_args`), which
        replace ``--arch``; ``ranks``: the width it runs at (default: its own setting)."""
        c = self.config
        ranks = ranks or self.ranks
        head = [sys.executable, "-m", ENTRY, "train", "--models", ",".join(models or c.models)]
        head += ["--threads", str(c.threads), "--too-long", c.too_long]
        head += [
            "--nproc",
            str(ranks),
            "--label-smoothing",
            str(c.label_smoothing),
        ]
        if c.direction == "r2l":
            head.append("--r2l")
        if c.average_best > 0:
            head += ["--keep-best", str(c.average_best)]
        if c.best_metric == "bleu" and c.bleu_tokenize not in ("pieces", "detok"):
            head += ["--bleu-tokenize", c.bleu_tokenize]
        flags: dict[str, object] = {
            "--task": "translation",
            "--source-lang": meta["src"],
            "--target-lang": meta["tgt"],
            "--arch": c.arch,
            "--optimizer": c.optimizer,
            "--weight-decay": c.weight_decay,
            "--clip-norm": c.clip_norm,
            "--lr": c.lr,
            "--lr-scheduler": c.lr_scheduler,
            "--warmup-updates": c.warmup_updates,
            "--dropout": c.dropout,
            "--criterion": c.criterion,
            "--max-tokens": c.max_tokens,
            "--update-freq": self.update_freq(ranks),
            "--max-update": c.max_update,
            "--seed": c.seed,
            "--save-dir": save_dir,
            "--save-interval-updates": c.save_interval_updates,
            # counted back from the best, the average needs the patience window kept too
            "--keep-interval-updates": max(c.keep_last, c.average_last)
            + (c.patience if c.average_until == "best" else 0),
            "--num-workers": 0,
            # fairseq's default of 8 reshapes batches to multiples of 8 and can drop a remainder.
            "--required-batch-size-multiple": 1,
            "--log-format": "json",
            "--log-interval": c.log_interval,
        }
        if shape:
            del flags["--arch"]
        args = [item for flag, value in flags.items() for item in (flag, str(value))]
        args += shape or []
        if init is not None:
            args += ["--finetune-from-model", str(init)]
        optional = [*self._optimizer_args(), *self._optional_args(), *self._criterion_args()]
        if int(meta.get("cycle_parts", 1)) > 1:
            # two train splits a shard: fairseq's default, -1, would tile the first -1 times
            args += ["--upsample-primary", "1"]
        return [
            *head, "--", data_paths(data, meta), *args, "--no-epoch-checkpoints", *optional,
            *c.extra_args,
        ]  # fmt: skip

    def _optimizer_args(self) -> list[str]:
        c = self.config
        if c.optimizer == "adam":
            return [
                "--adam-betas",
                f"({c.adam_beta1}, {c.adam_beta2})",
                "--adam-eps",
                str(c.adam_eps),
            ]
        args = ["--decay-rate", str(c.adafactor_decay_rate)]
        args += ["--clip-threshold", str(c.adafactor_clip_threshold)]
        if c.adafactor_beta1 is not None:
            args += ["--beta1", str(c.adafactor_beta1)]
        return args

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
        if c.precision != "fp32":
            args.append(f"--{c.precision}")
        if c.patience > 0:
            args += ["--patience", str(c.patience)]
        if c.best_metric == "bleu":
            # fairseq 0.12's --eval-bleu: a beam search over the valid set at each validation,
            # scored by sacrebleu; pieces = tokenized BLEU over the SentencePiece pieces.
            generation = {"beam": c.bleu_beam, "max_len_a": 1.5, "max_len_b": 10}
            args += ["--eval-bleu", "--eval-bleu-args", json.dumps(generation)]
            args += ["--best-checkpoint-metric", "bleu", "--maximize-best-checkpoint-metric"]
            if c.bleu_tokenize == "pieces":
                args.append("--eval-tokenized-bleu")
            else:
                args += ["--eval-bleu-remove-bpe", "sentencepiece"]
        return args

    def _criterion_args(self) -> list[str]:
        args: list[str] = []
        for key, value in self.config.criterion_args.items():
            flag = "--" + key.replace("_", "-")
            if value is True:
                args.append(flag)
            elif value is not False:
                args += [flag, str(value)]
        return args

    def _env(self) -> dict[str, str]:
        if self.config.threads == 0:
            return {}
        n = str(self.config.threads)
        return {"OMP_NUM_THREADS": n, "MKL_NUM_THREADS": n}

    @property
    def ranks(self) -> int:
        """The width the settings give (``distributed_world_size``)."""
        return self.config.distributed_world_size

    def _check_device(self, ranks: int) -> None:
        """fp16/bf16 and several processes per GPU need the GPUs to exist; say so before
        fairseq fails deep inside."""
        import torch

        c = self.config
        gpus = self._gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if c.precision != "fp32" and gpus == 0:
            raise StepError(
                f"train: precision {c.precision} needs a CUDA GPU and this machine has none "
                "(torch.cuda.is_available() is False); use precision: fp32 on CPU"
            )
        if gpus and ranks > gpus and current_task() is None:
            raise StepError(
                f"train: {ranks} ranks are more than the {gpus} GPUs of this machine; use at "
                f"most {gpus}"
            )
        self.update_freq(ranks)  # a width that cannot share the batch fails here, not later

    def _models(self, init: Artifact | None) -> list[str]:
        inherited = list(init.meta.get("models", [])) if init is not None else []
        return list(dict.fromkeys([*self.config.models, *inherited]))

    def _pretrained_shape(
        self, ctx: StepContext, data: Artifact, init: Artifact | None
    ) -> list[str] | None:
        """The fairseq flags of a pretrained init model's network (None for a fairseq init or
        none), after checking the data was binarized by its tokenizer."""
        pretrained = init is not None and init.meta.get("type") == PRETRAINED
        made_by = (data.meta.get("pretrained") or {}).get("id")
        if not pretrained:
            inherited = None if init is None else init.meta.get("arch_args")
            if made_by is not None and inherited is None:
                raise DataError(
                    f"{ctx.step_id}: the data was binarized for the pretrained model {made_by}; "
                    "connect that model as init (or a model trained from it)"
                )
            return None if inherited is None else [str(a) for a in inherited]
        assert init is not None
        where = f"{ctx.step_id}: init model {init.path}"
        config = check_continuable(init, where)
        if made_by != init.meta.get("id"):
            raise DataError(
                f"{where} is the pretrained model {init.meta.get('id')}; the data was not "
                "binarized with its tokenizer (connect the model as the binarize step's spm)"
            )
        if self.config.arch != "transformer":
            raise DataError(
                f"{where}: a pretrained model sets the network itself; set arch: transformer "
                f"(not {self.config.arch!r})"
            )
        if self.config.direction != "l2r":
            raise DataError(f"{where}: a pretrained model reads left to right; leave direction "
                            "unset")  # fmt: skip
        return arch_args(config)

    def _init_checkpoint(self, ctx: StepContext, data: Artifact, init: Artifact) -> Path:
        """The checkpoint training starts from: the init model's own (same dictionaries), a
        copy with its embedding rows mapped onto the data's dictionaries, or a pretrained
        M2M-100/NLLB model's weights as a fairseq checkpoint."""
        c, meta = self.config, init.meta
        where = f"{ctx.step_id}: init model {init.path}"
        if meta.get("type") == PRETRAINED:
            converted = ctx.scratch("init") / "pretrained.pt"
            if not converted.exists():
                fairseq_checkpoint(init, converted)
            return converted
        if meta.get("type") != "fairseq-model":
            raise DataError(f"{where} is not a fairseq model (artifact type {meta.get('type')!r})")
        if (meta.get("src"), meta.get("tgt")) != (data.meta["src"], data.meta["tgt"]):
            raise DataError(
                f"{where} translates {meta.get('src')}->{meta.get('tgt')}, the data "
                f"{data.meta['src']}->{data.meta['tgt']}"
            )
        if meta.get("arch") != c.arch:
            raise DataError(f"{where} has arch {meta.get('arch')!r}; set arch: {meta.get('arch')}")
        if meta.get("direction", "l2r") != c.direction:
            raise DataError(
                f"{where} is {meta.get('direction', 'l2r')}; set direction: "
                f"{meta.get('direction', 'l2r')} or start from another model"
            )
        checkpoint = init.file("checkpoint", "checkpoint.pt")
        langs = (data.meta["src"], data.meta["tgt"])
        old = tuple(init.path / f"dict.{lang}.txt" for lang in langs)
        new = tuple(data.path / f"dict.{lang}.txt" for lang in langs)
        if c.init_vocab == "same":
            for old_dict, new_dict in zip(old, new, strict=True):
                difference = first_difference(old_dict, new_dict)
                if difference:
                    raise DataError(
                        f"{where}: {difference}. Fine-tuning needs the same dictionary; set "
                        "init_vocab: map to start a new vocabulary from the init model's rows"
                    )
            return checkpoint
        from mtcore_plugins.steps._vocab_map import remap_checkpoint

        mapped = ctx.scratch("init") / "mapped.pt"
        maps = remap_checkpoint(checkpoint, (old[0], old[1]), (new[0], new[1]), mapped)
        for side, vocab in maps.items():
            ctx.stats.add(f"train.init_{side}_shared", vocab.shared)
            ctx.stats.add(f"train.init_{side}_borrowed", vocab.borrowed)
            ctx.stats.add(f"train.init_{side}_reused", vocab.reused)
        return mapped

    def _finalize(self, save_dir: Path, target: Path) -> list[dict[str, Any]]:
        """Averages the last ``average_last`` checkpoints by update count (checkpoint_last.pt
        counts when training stopped between two save intervals), or the best
        ``average_best`` by the dev metric; returns what was averaged."""
        c = self.config
        if c.average_best > 0:
            chosen = select_best(save_dir, c.average_best)
            if not chosen:
                raise StepError(
                    f"average_best: no validated checkpoint in {save_dir} (did validation run? "
                    "it runs at every save unless extra_args disable it)"
                )
            averaged = [
                {"updates": e["updates"], c.best_metric: e["metric"]}
                for e in best_entries(save_dir)[: c.average_best]
            ]
        else:
            until = None
            if c.average_until == "best" and (save_dir / "checkpoint_best.pt").exists():
                until = checkpoint_updates(save_dir / "checkpoint_best.pt")
            chosen = select_checkpoints(save_dir, c.average_last, until)
            if not chosen:
                raise StepError(f"fairseq-train finished but wrote no checkpoint in {save_dir}")
            averaged = [{"file": p.name} for p in chosen]
        average_checkpoints(chosen, target)
        return averaged

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


def data_paths(data: Path, meta: dict[str, Any]) -> str:
    """fairseq's data argument: the directory, or with cycled data (binarize ``cycled``) its
    shard directories joined by the path separator, one an epoch in turn."""
    parts = int(meta.get("cycle_parts", 1))
    if parts == 1:
        return str(data)
    return os.pathsep.join(str(data / "cycle" / str(k)) for k in range(parts))
