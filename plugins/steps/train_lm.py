"""Trains a neural language model (fairseq ``transformer_lm``, task ``language_modeling``) on
one language of a corpus, for the ``neural_lm`` rerank feature (Xiaomi §3.4: "the perplexity
score for the translation candidates with a neural LM based on the Transformer"; Yishu's LM
reranking).

Text is cut into SentencePiece pieces with the translation models' ``spm`` and binarized with
its own dictionary (``fairseq-preprocess --only-source``); each sentence is one training sample
(``--sample-break-mode eos``), which is how the scorer reads a hypothesis. Training runs through
the same entry as the ``train`` step (safe checkpoint loading, refusing over-long samples) and
resumes from ``checkpoint_last.pt``. The output ``model`` holds ``checkpoint.pt`` (no optimizer
state), ``dict.txt`` and ``artifact.json`` (``type: fairseq-lm``, ``lang``).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import ClassVar

from pydantic import Field

from mtcore.api import Corpus, DataError, PluginConfig, Step, StepContext, write_artifact_meta
from mtcore.api.engine import batched, run_logged
from mtcore_plugins.common.text.spm import load_spm
from mtcore_plugins.steps._train_log import (
    live_line,
    parse_curves,
    parse_train_log,
    tensorboard_args,
    training_done,
)

ENTRY = "mtcore_plugins.steps._lm_entry"


BINARIZED = ".binarized"  # marks the scratch data complete (fairseq-preprocess wrote every file)


class TrainLMConfig(PluginConfig):
    lang: str = Field(min_length=1, max_length=32, description="corpus language to model")
    layers: int = Field(2, ge=1, le=48, description="decoder layers")
    embed_dim: int = Field(128, ge=8, le=8192, description="model width")
    ffn_embed_dim: int = Field(512, ge=8, le=65536, description="feed-forward width")
    heads: int = Field(4, ge=1, le=128, description="attention heads")
    dropout: float = Field(0.1, ge=0.0, le=0.9, description="dropout")
    share_embeddings: bool = Field(True, description="tie input and output embeddings")
    max_update: int = Field(1000, ge=1, le=10_000_000, description="training updates")
    max_tokens: int = Field(4096, ge=64, le=1_000_000, description="tokens per batch")
    lr: float = Field(0.0005, gt=0.0, le=1.0, description="peak learning rate (inverse sqrt)")
    warmup_updates: int = Field(100, ge=0, le=1_000_000, description="linear warmup updates")
    tokens_per_sample: int = Field(
        512, ge=16, le=65536, description="longest sentence in pieces (longer is an error)"
    )
    save_interval_updates: int = Field(
        500, ge=1, le=10_000_000, description="checkpoint every N updates (resume points)"
    )
    seed: int = Field(1, ge=0, le=2**31 - 1, description="training seed")
    threads: int = Field(0, ge=0, le=512, description="torch threads; 0 keeps torch's default")


class TrainLMStep(Step[TrainLMConfig]):
    """``corpus`` (+ optional ``valid``) and ``spm`` -> ``model``, a fairseq language model."""

    name = "train_lm"
    inputs: ClassVar[dict[str, bool]] = {"corpus": True, "spm": True, "valid": False}
    outputs: ClassVar[tuple[str, ...]] = ("model",)
    trains: ClassVar[bool] = True

    def work(self) -> dict[str, float]:
        return {"tokens": float(self.config.max_update * self.config.max_tokens)}

    @classmethod
    def curves(cls, folder: Path) -> dict[str, list[tuple[int, float]]]:
        return parse_curves(folder / "model" / "train.log")

    def live(self, work: Path) -> str:
        return live_line(work / "model" / "train.log", self.config.max_update)

    def run(self, ctx: StepContext) -> None:
        out = ctx.output("model")
        log = out / "train.log"
        save_dir = ctx.scratch("checkpoints")
        data = ctx.scratch("data")
        if not training_done(log):
            if not (data / BINARIZED).exists():  # a killed try may have left a torn binarization
                shutil.rmtree(data)
                self._binarize(ctx, ctx.scratch("data"))
                (data / BINARIZED).touch()
            cmd = self.command(data, save_dir, "valid" in ctx.inputs)
            cmd += tensorboard_args(ctx.step_id)
            import torch  # a warm fork on CPU only: CUDA in a fork of a used driver fails

            run_logged(cmd, log, "fairseq-train", warm=not torch.cuda.is_available())
        self._finalize(save_dir / "checkpoint_last.pt", out / "checkpoint.pt")
        shutil.copyfile(data / "dict.txt", out / "dict.txt")
        found = parse_train_log(log)
        for key in ("updates", "valid_loss", "tokens_per_second"):
            if key in found:
                ctx.metrics[key] = found[key]
        write_artifact_meta(
            out, type="fairseq-lm", checkpoint="checkpoint.pt", lang=self.config.lang,
            dict="dict.txt", arch="transformer_lm",
        )  # fmt: skip

    def _binarize(self, ctx: StepContext, data: Path) -> None:
        processor = load_spm(ctx.inputs["spm"].path)
        encoded = ctx.scratch("encoded")
        splits = {"train": ctx.inputs["corpus"]}
        if "valid" in ctx.inputs:
            splits["valid"] = ctx.inputs["valid"]
        for split, artifact in splits.items():
            corpus = Corpus.open(artifact.path)
            if self.config.lang not in corpus.langs:
                raise DataError(
                    f"{ctx.step_id}: the {split} corpus {corpus.path} has languages "
                    f"{list(corpus.langs)}, not {self.config.lang!r}"
                )
            column = corpus.langs.index(self.config.lang)
            lines = 0
            with open(encoded / f"{split}.txt", "w", encoding="utf-8", newline="\n") as handle:
                for chunk in batched(corpus, 10_000):
                    texts = [pair[column] for pair in chunk if pair[column].strip()]
                    for pieces in processor.encode(texts, out_type=str):
                        handle.write(" ".join(pieces) + "\n")
                    lines += len(texts)
            ctx.stats.add(f"train_lm.{split}_sentences", lines)
        cmd = [sys.executable, "-m", "fairseq_cli.preprocess", "--only-source"]
        cmd += ["--trainpref", str(encoded / "train.txt"), "--destdir", str(data)]
        cmd += ["--dataset-impl", "mmap", "--workers", "1"]
        if "valid" in splits:
            cmd += ["--validpref", str(encoded / "valid.txt")]
        run_logged(cmd, data / "preprocess.log", "fairseq-preprocess", warm=True)

    def command(self, data: Path, save_dir: Path, validate: bool) -> list[str]:
        c = self.config
        head = [sys.executable, "-m", ENTRY, "train", "--models", "", "--threads", str(c.threads)]
        flags: dict[str, object] = {
            "--task": "language_modeling",
            "--arch": "transformer_lm",
            "--decoder-layers": c.layers,
            "--decoder-embed-dim": c.embed_dim,
            "--decoder-ffn-embed-dim": c.ffn_embed_dim,
            "--decoder-attention-heads": c.heads,
            "--dropout": c.dropout,
            "--sample-break-mode": "eos",
            "--tokens-per-sample": c.tokens_per_sample,
            "--optimizer": "adam",
            "--adam-betas": "(0.9, 0.98)",
            "--lr": c.lr,
            "--lr-scheduler": "inverse_sqrt",
            "--warmup-updates": c.warmup_updates,
            "--warmup-init-lr": 1e-7,
            "--clip-norm": 0.0,
            "--max-tokens": c.max_tokens,
            "--max-update": c.max_update,
            "--seed": c.seed,
            "--save-dir": save_dir,
            "--save-interval-updates": c.save_interval_updates,
            "--keep-interval-updates": 1,
            "--num-workers": 0,
            "--required-batch-size-multiple": 1,
            "--log-format": "json",
            "--log-interval": 10,
        }
        args = [item for flag, value in flags.items() for item in (flag, str(value))]
        args += ["--no-epoch-checkpoints"]
        if c.share_embeddings:
            args.append("--share-decoder-input-output-embed")
        if not validate:
            args.append("--disable-validation")
        return [*head, "--", str(data), *args]

    @staticmethod
    def _finalize(last: Path, output: Path) -> None:
        import torch

        from mtcore_plugins.common.fairseq.checkpoints import save_for_inference
        from mtcore_plugins.common.fairseq.setup import add_safe_globals

        if output.exists():
            return
        add_safe_globals()
        state = torch.load(last, map_location="cpu", weights_only=True)
        save_for_inference(state, state["model"], output)
