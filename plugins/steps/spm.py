"""Trains one joint SentencePiece model over every language of a corpus."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator

from mtcore.corpus import Corpus
from mtcore.errors import StepError
from mtcore.plugin import PluginConfig
from mtcore.step import Step, StepContext, write_artifact_meta


class SentencePieceConfig(PluginConfig):
    # NT5 §3.2: "Sentencepiece ... with the unigram language model option", 32,000 subwords
    # for the initial model (64,000 for the final ones).
    model_type: Literal["unigram", "bpe", "char", "word"] = Field(
        "unigram", description="SentencePiece segmentation algorithm"
    )
    vocab_size: int = Field(32_000, ge=16, le=1_000_000, description="target vocabulary size")
    character_coverage: float = Field(
        0.9995,
        ge=0.9,
        le=1.0,
        description="share of characters the vocabulary must cover (0.9995 suits Japanese/Chinese)",
    )
    input_sentence_size: int = Field(
        10_000_000,
        ge=0,
        le=1_000_000_000,
        description="sentences sampled (with a fixed seed) for training; 0 uses every sentence",
    )
    max_sentence_length: int = Field(
        4192, ge=16, le=1 << 20, description="longer sentences (in bytes) are left out of training"
    )
    byte_fallback: bool = Field(False, description="spell unknown characters as byte pieces")
    normalization_rule_name: Literal["nmt_nfkc", "nfkc", "nmt_nfkc_cf", "nfkc_cf", "identity"] = (
        Field("nmt_nfkc", description="normalization applied before segmentation")
    )
    seed: int = Field(1, ge=0, le=2**31 - 1, description="seed of the sentence sampling")
    num_threads: int = Field(
        4,
        ge=1,
        le=256,
        description="trainer threads; the model is byte-identical across runs for a given count "
        "but differs between counts",
    )
    langs: list[str] | None = Field(
        None, description="corpus languages to train on; all of them when unset"
    )
    user_defined_symbols: list[str] = Field(
        default_factory=list,
        max_length=1000,
        description="tokens always kept as one piece, whatever the data: tags such as <BT> or "
        "<2uk>, the noise augmenter's <blank>",
    )

    @field_validator("user_defined_symbols")
    @classmethod
    def _symbols(cls, value: list[str]) -> list[str]:
        for symbol in value:
            if not symbol or any(c.isspace() for c in symbol):
                raise ValueError(f"user-defined symbol {symbol!r} must be non-empty, no spaces")
        if len(set(value)) != len(value):
            raise ValueError("user_defined_symbols lists a symbol twice")
        return value


class SentencePieceStep(Step):
    """One SentencePiece model shared by all languages (``spm.model``, ``spm.vocab``)."""

    name = "spm"
    Config = SentencePieceConfig
    inputs: ClassVar[dict[str, bool]] = {"corpus": True}
    outputs: ClassVar[tuple[str, ...]] = ("model",)

    def run(self, ctx: StepContext) -> None:
        import sentencepiece as spm

        corpus = Corpus.open(ctx.inputs["corpus"].path)
        columns = self._columns(corpus)
        out = ctx.output("model")
        model = self._train(spm, corpus, columns, ctx)
        (out / "spm.model").write_bytes(model)
        processor = spm.SentencePieceProcessor(model_proto=model)
        write_vocab(processor, out / "spm.vocab")
        ctx.metrics["vocab_size"] = processor.get_piece_size()
        write_artifact_meta(
            out,
            type="sentencepiece",
            model="spm.model",
            vocab="spm.vocab",
            vocab_size=processor.get_piece_size(),
            model_type=self.config.model_type,
            langs=[corpus.langs[c] for c in columns],
        )

    def _train(self, spm: Any, corpus: Corpus, columns: list[int], ctx: StepContext) -> bytes:
        """The serialized model. Written through ``model_writer`` rather than ``model_prefix``,
        which spm would record inside the model and so make it depend on the work path."""
        buffer = io.BytesIO()
        log_file = ctx.scratch("spm") / "train.log"
        spm.set_random_generator_seed(self.config.seed)
        try:
            with open(log_file, "w") as log:
                spm.SentencePieceTrainer.Train(
                    sentence_iterator=self._sentences(corpus, columns, ctx),
                    model_writer=buffer,
                    logstream=log,
                    **self._trainer_options(),
                )
        except RuntimeError as exc:
            raise StepError(
                f"{ctx.step_id}: SentencePiece training failed: {exc}. A small corpus may need a "
                f"smaller vocab_size (now {self.config.vocab_size}) or a lower "
                f"character_coverage.\n{_tail(log_file)}"
            ) from exc
        return buffer.getvalue()

    def _columns(self, corpus: Corpus) -> list[int]:
        if self.config.langs is None:
            return list(range(len(corpus.langs)))
        missing = [lang for lang in self.config.langs if lang not in corpus.langs]
        if missing:
            raise StepError(
                f"spm: languages {missing} are not in the corpus (it has {list(corpus.langs)})"
            )
        return [corpus.langs.index(lang) for lang in self.config.langs]

    def _trainer_options(self) -> dict[str, object]:
        c = self.config
        options: dict[str, object] = {
            "model_type": c.model_type,
            "vocab_size": c.vocab_size,
            "character_coverage": c.character_coverage,
            "input_sentence_size": c.input_sentence_size,
            "shuffle_input_sentence": True,
            "max_sentence_length": c.max_sentence_length,
            "byte_fallback": c.byte_fallback,
            "normalization_rule_name": c.normalization_rule_name,
            "num_threads": c.num_threads,
            # A small corpus may not support vocab_size pieces: take fewer instead of failing.
            "hard_vocab_limit": False,
            # fairseq's dictionary adds its own <s> <pad> </s> <unk>; spm keeps its defaults.
        }
        if c.user_defined_symbols:
            options["user_defined_symbols"] = c.user_defined_symbols
        return options

    @staticmethod
    def _sentences(corpus: Corpus, columns: list[int], ctx: StepContext) -> Iterator[str]:
        for pair in corpus:
            for column in columns:
                if pair[column].strip():
                    ctx.stats.add("spm.sentences")
                    yield pair[column]


def write_vocab(processor: Any, path: Path) -> None:
    """``piece<TAB>score`` per line, as spm's own ``.vocab`` file."""
    with open(path, "w", encoding="utf-8", newline="\n") as handle:
        for index in range(processor.get_piece_size()):
            handle.write(f"{processor.id_to_piece(index)}\t{processor.get_score(index):g}\n")


def _tail(path: Path, lines: int = 20) -> str:
    if not path.exists():
        return ""
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
