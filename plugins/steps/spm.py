"""Trains one joint SentencePiece model over every language of its corpora.

With ``temperature: T`` above 1 the training text is sampled per language, language ``l``
getting a share ``p_l ∝ (n_l / N) ** (1 / T)`` of the sentences (``n_l`` its non-empty
sentences, ``N`` all of them), as multilingual systems train their vocabularies (Conneau and
Lample 2019; Tran et al. 2021, whom Yishu §2.1.3 follows with T = 5): a language with little
text gets more pieces than its raw share would give it. The sample has as many sentences as
the input (at most ``input_sentence_size``); a language whose quota exceeds its text is
repeated whole, and the rest of a quota is chosen by seeded selection sampling, in corpus order
(the ``mix`` step's rule), so the sample is exact and reproducible.
"""

from __future__ import annotations

import io
import multiprocessing
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from fractions import Fraction
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator

from mtcore.api import Corpus, PluginConfig, Step, StepContext, StepError, write_artifact_meta
from mtcore.api.engine import die_with_parent
from mtcore_plugins.steps._sampling import role_rng, round_half_up


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
    temperature: float = Field(
        1.0,
        ge=1.0,
        le=1000.0,
        description="sample each language's sentences with probability proportional to "
        "(its share of the text) ** (1 / temperature); 1 trains on the text as it is "
        "(Yishu §2.1.3: 5)",
    )
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


class SentencePieceStep(Step[SentencePieceConfig]):
    """One SentencePiece model shared by all languages (``spm.model``, ``spm.vocab``),
    trained on ``corpus`` and any further corpora given under other role names (monolingual
    text, say), every column of every input whose language is in ``langs``."""

    name = "spm"
    inputs: ClassVar[dict[str, bool]] = {"corpus": True, "*": False}
    outputs: ClassVar[tuple[str, ...]] = ("model",)

    def kept_tokens(self) -> frozenset[str]:
        return frozenset(self.config.user_defined_symbols)

    def run(self, ctx: StepContext) -> None:
        import sentencepiece as spm

        corpora = {role: Corpus.open(artifact.path) for role, artifact in ctx.inputs.items()}
        files = self._files(corpora)
        out = ctx.output("model")
        model = self._train(self._sentences(files, ctx), ctx)
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
            langs=list(files),
            temperature=self.config.temperature,
        )

    def _train(self, sentences: Iterator[str], ctx: StepContext) -> bytes:
        """The serialized model. Written through ``model_writer`` rather than ``model_prefix``,
        which spm would record inside the model and so make it depend on the work path. The
        sentences are written to a scratch file here (counting them) and the training runs in a
        process of its own (:func:`train_in_child`)."""
        text = ctx.scratch("spm") / "sentences.txt"
        with open(text, "w", encoding="utf-8", newline="\n") as handle:
            for line in sentences:
                handle.write(line + "\n")
        log_file = ctx.scratch("spm") / "train.log"
        options = self._trainer_options()
        spawn = multiprocessing.get_context("spawn")  # the driver runs other steps in threads
        try:
            with ProcessPoolExecutor(1, mp_context=spawn) as pool:
                job = pool.submit(
                    train_in_child, str(text), str(log_file), self.config.seed, options
                )
                return job.result()
        except RuntimeError as exc:
            raise StepError(
                f"{ctx.step_id}: SentencePiece training failed: {exc}. A small corpus may need a "
                f"smaller vocab_size (now {self.config.vocab_size}) or a lower "
                f"character_coverage.\n{_tail(log_file)}"
            ) from exc

    def _files(self, corpora: dict[str, Corpus]) -> dict[str, list[Path]]:
        """Language -> the text files holding it, in input order."""
        files: dict[str, list[Path]] = {}
        for corpus in corpora.values():
            for lang in corpus.langs:
                if self.config.langs is None or lang in self.config.langs:
                    files.setdefault(lang, []).append(corpus.file(lang))
        missing = [lang for lang in self.config.langs or [] if lang not in files]
        if missing:
            found = {role: list(corpus.langs) for role, corpus in corpora.items()}
            raise StepError(f"spm: languages {missing} are in no input (the inputs have {found})")
        if self.config.langs is not None:
            files = {lang: files[lang] for lang in self.config.langs}
        return files

    def _sentences(self, files: dict[str, list[Path]], ctx: StepContext) -> Iterator[str]:
        if self.config.temperature == 1.0:
            for lang, paths in files.items():
                for line in _nonempty(paths):
                    ctx.stats.add(f"spm.{lang}.sentences")
                    ctx.stats.add("spm.sentences")
                    yield line
            return
        counts = {lang: sum(1 for _ in _nonempty(paths)) for lang, paths in files.items()}
        quotas = temperature_quotas(
            counts, self.config.temperature, self.config.input_sentence_size
        )
        ctx.metrics["language_shares"] = {
            lang: round(quota / max(1, sum(quotas.values())), 6) for lang, quota in quotas.items()
        }
        for lang, paths in files.items():
            ctx.stats.add(f"spm.{lang}.sentences", counts[lang])
            ctx.stats.add(f"spm.{lang}.sampled", quotas[lang])
            ctx.stats.add("spm.sentences", quotas[lang])
            yield from _sample(paths, counts[lang], quotas[lang], role_rng(self.config.seed, lang))

    def _trainer_options(self) -> dict[str, object]:
        c = self.config
        options: dict[str, object] = {
            "model_type": c.model_type,
            "vocab_size": c.vocab_size,
            "character_coverage": c.character_coverage,
            # a temperature sample is already sized; spm takes every sentence of it
            "input_sentence_size": c.input_sentence_size if c.temperature == 1.0 else 0,
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


def temperature_quotas(counts: dict[str, int], temperature: float, limit: int) -> dict[str, int]:
    """Sentences sampled per language: ``S * p_l`` rounded half up, ``p_l ∝ (n_l / N) ** (1 /
    T)``, ``S`` the total (at most ``limit`` when that is not 0). Languages without text get
    none."""
    total = sum(counts.values())
    if total == 0:
        return dict.fromkeys(counts, 0)
    size = min(total, limit) if limit else total
    weights = {lang: (n / total) ** (1.0 / temperature) for lang, n in counts.items() if n}
    norm = sum(weights.values())
    return {
        lang: round_half_up(Fraction(size) * Fraction(weights[lang] / norm)) if n else 0
        for lang, n in counts.items()
    }


def train_in_child(sentences: str, log_file: str, seed: int, options: dict[str, Any]) -> bytes:
    """SentencePiece training over the lines of ``sentences``, in a process of its own. Its
    ``logstream`` swaps the process's file descriptor 2 for the log while it trains, then closes
    fd 2 and restores it: in the driver, where other steps run in threads, that sent every
    thread's stderr into this log meanwhile, and handed fd 2 to whatever file another thread
    opened in the gap (a KenLM step's log then received the run's stderr, failed on a seek with
    ``Illegal seek``, and closed the run's stderr: the run ended with status 1 and no message)."""
    import sentencepiece as spm

    die_with_parent()
    spm.set_random_generator_seed(seed)
    buffer = io.BytesIO()

    def lines() -> Iterator[str]:
        with open(sentences, encoding="utf-8", newline="\n") as handle:
            for line in handle:
                yield line.removesuffix("\n")

    with open(log_file, "w") as log:
        spm.SentencePieceTrainer.Train(
            sentence_iterator=lines(), model_writer=buffer, logstream=log, **options
        )
    return buffer.getvalue()


def _nonempty(paths: list[Path]) -> Iterator[str]:
    for path in paths:
        with open(path, encoding="utf-8", newline="\n") as handle:
            for line in handle:
                text = line.rstrip("\n")
                if text.strip():
                    yield text


def _sample(paths: list[Path], size: int, quota: int, rng: Any) -> Iterator[str]:
    """``quota // size`` passes over the text, then ``quota % size`` sentences chosen by
    selection sampling (Knuth's Algorithm S), in corpus order."""
    if size == 0:
        return
    copies, need = divmod(quota, size)
    for _ in range(copies):
        yield from _nonempty(paths)
    left = size
    for line in _nonempty(paths):
        if need == 0:
            return
        if rng.random() * left < need:
            need -= 1
            yield line
        left -= 1


def write_vocab(processor: Any, path: Path) -> None:
    """``piece<TAB>score`` per line, as spm's own ``.vocab`` file."""
    with open(path, "w", encoding="utf-8", newline="\n") as handle:
        for index in range(processor.get_piece_size()):
            handle.write(f"{processor.id_to_piece(index)}\t{processor.get_score(index):g}\n")


def _tail(path: Path, lines: int = 20) -> str:
    if not path.exists():
        return ""
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
