"""Encodes train/valid corpora with SentencePiece and binarizes them with fairseq-preprocess."""

from __future__ import annotations

import struct
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field

from mtcore.corpus import Corpus, batched
from mtcore.errors import DataError, StepError
from mtcore.plugin import PluginConfig
from mtcore.process import run_logged
from mtcore.step import Step, StepContext, write_artifact_meta

SPLITS = ("train", "valid")
CHUNK = 10_000
MMAP_MAGIC = b"MMIDIDX\x00\x00"


class BinarizeConfig(PluginConfig):
    src: str = Field(min_length=1, max_length=32, description="source language of the corpora")
    tgt: str = Field(min_length=1, max_length=32, description="target language of the corpora")
    workers: int = Field(1, ge=1, le=128, description="fairseq-preprocess worker processes")


class BinarizeStep(Step):
    """``train``/``valid`` corpora -> fairseq binary data with one joined dictionary. Every input
    line becomes exactly one example (an empty line becomes an empty, EOS-only example).

    The optional ``dictionary`` input (another binarize step's data, or a trained model) reuses
    its dictionary instead of building one: fine-tuning data (NT5 §4.3, HW-TSC's trusted set)
    must index tokens exactly as the model being fine-tuned does."""

    name = "binarize"
    Config = BinarizeConfig
    inputs: ClassVar[dict[str, bool]] = {
        "train": True,
        "valid": True,
        "spm": True,
        "dictionary": False,
    }
    outputs: ClassVar[tuple[str, ...]] = ("data",)

    def run(self, ctx: StepContext) -> None:
        processor = load_spm(ctx.inputs["spm"].path)
        encoded = ctx.scratch("encoded")
        lines = {split: self._encode(ctx, split, processor, encoded) for split in SPLITS}
        out = ctx.output("data")
        given = ctx.inputs.get("dictionary")
        self._preprocess(encoded, out, None if given is None else self._dictionary(given.path))
        for split, count in lines.items():
            for lang in (self.config.src, self.config.tgt):
                found = mmap_length(out / f"{split}.{self.config.src}-{self.config.tgt}.{lang}.idx")
                if found != count:
                    raise StepError(
                        f"{ctx.step_id}: fairseq-preprocess wrote {found} {split} examples for "
                        f"{lang} from {count} input lines; see {out / 'binarize.log'}"
                    )
            ctx.stats.add(f"binarize.{split}_lines", count)
        write_artifact_meta(
            out,
            type="fairseq-data",
            src=self.config.src,
            tgt=self.config.tgt,
            lines=lines,
            dict=f"dict.{self.config.src}.txt",
        )

    def _encode(self, ctx: StepContext, split: str, processor: Any, encoded: Path) -> int:
        corpus = Corpus.open(ctx.inputs[split].path)
        columns = [self._column(corpus, lang, split) for lang in (self.config.src, self.config.tgt)]
        count = 0
        with ExitStack() as stack:
            handles = [
                stack.enter_context(
                    open(encoded / f"{split}.{lang}", "w", encoding="utf-8", newline="\n")
                )
                for lang in (self.config.src, self.config.tgt)
            ]
            for chunk in batched(corpus, CHUNK):
                for column, handle in zip(columns, handles, strict=True):
                    for pieces in processor.encode([pair[column] for pair in chunk], out_type=str):
                        if not pieces:
                            ctx.stats.add(f"binarize.{split}_empty")
                        handle.write(" ".join(pieces) + "\n")
                count += len(chunk)
        return count

    def _column(self, corpus: Corpus, lang: str, split: str) -> int:
        if lang not in corpus.langs:
            raise DataError(
                f"binarize: the {split} corpus has languages {list(corpus.langs)}, "
                f"not {lang!r} (check src/tgt)"
            )
        return corpus.langs.index(lang)

    def _dictionary(self, path: Path) -> Path:
        for lang in (self.config.src, self.config.tgt):
            found = path / f"dict.{lang}.txt"
            if found.exists():
                return found
        raise DataError(
            f"binarize: the dictionary input {path} has no dict.{self.config.src}.txt or "
            f"dict.{self.config.tgt}.txt (connect a binarize step's data or a trained model)"
        )

    def _preprocess(self, encoded: Path, out: Path, dictionary: Path | None) -> None:
        c = self.config
        cmd = [
            sys.executable,
            "-m",
            "fairseq_cli.preprocess",
            "--source-lang",
            c.src,
            "--target-lang",
            c.tgt,
            "--trainpref",
            str(encoded / "train"),
            "--validpref",
            str(encoded / "valid"),
            "--destdir",
            str(out),
            "--joined-dictionary",
            "--dataset-impl",
            "mmap",
            "--workers",
            str(c.workers),
        ]
        if dictionary is not None:  # with --joined-dictionary it serves both sides
            cmd += ["--srcdict", str(dictionary)]
        run_logged(cmd, out / "binarize.log", "fairseq-preprocess")


def load_spm(path: Path) -> Any:
    import sentencepiece as spm

    from mtcore.step import Artifact

    meta = Artifact.open(path).meta
    if meta.get("type") != "sentencepiece":
        raise DataError(f"{path} is not a SentencePiece model (artifact type {meta.get('type')!r})")
    return spm.SentencePieceProcessor(model_file=str(path / meta.get("model", "spm.model")))


def mmap_length(index: Path) -> int:
    """Number of examples in a fairseq mmap dataset, read from its ``.idx`` header (magic,
    version, dtype code, length) without importing fairseq."""
    with open(index, "rb") as handle:
        header = handle.read(len(MMAP_MAGIC) + 17)
    if not header.startswith(MMAP_MAGIC) or len(header) < len(MMAP_MAGIC) + 17:
        raise StepError(f"{index} is not a fairseq mmap index")
    (length,) = struct.unpack("<Q", header[len(MMAP_MAGIC) + 9 :])
    return int(length)
