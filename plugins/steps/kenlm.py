"""Trains one KenLM n-gram model per language of a corpus (Xiaomi §2.2.2: "a 5-gram LM that is
estimated with modified Kneser-Ney smoothing using KenLM on each side of the parallel
sentences"), for the ``lm`` filter and LM rerank features.

Text is tokenized the way the ``lm`` filter queries it (:func:`lm_line`): Japanese and Chinese
through their segmenters, other languages on whitespace. ``lmplz`` estimates the ARPA model and
``build_binary`` turns it into a probing binary the ``kenlm`` Python module memory-maps; both
come from ``scripts/build_kenlm.sh``.

The step also records the range of log10 perplexities over a set of sentences, which the ``lm``
filter uses to normalize perplexity to [0, 1] (Xiaomi §2.2.2 normalizes "the LM perplexity (PPL)
scores of all the sentences"): by default the training sentences (Xiaomi trains the LM on the
very corpus it filters, so they are "all the sentences"), or those of the optional input
``normalize``, which a recipe connects to the corpus it will filter when the LM is trained on
other (cleaner) text. A model scores its own training sentences far better than unseen ones, so
the training range would otherwise call most unseen sentences disfluent.
"""

from __future__ import annotations

import re
import shutil
import sys
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field, field_validator, model_validator
from pydantic.config import JsonDict

from mtcore.api import (
    NOT_IDENTITY,
    Corpus,
    PluginConfig,
    Step,
    StepContext,
    StepError,
    write_artifact_meta,
)
from mtcore.api.engine import run_logged
from mtcore_plugins.common.lm.ngram import TOKENIZATION, lm_line, log10_perplexity

BUILD_HINT = "build them with `bash scripts/build_kenlm.sh .venv`"
MAX_ORDER = 6  # scripts/build_kenlm.sh compiles KenLM with KENLM_MAX_ORDER=6
CHUNK = 5_000  # lines per tokenization task
NOT_IN_HASH: JsonDict = dict(NOT_IDENTITY)  # typed copy: mypy reads NOT_IDENTITY as dict[str, bool]


def kenlm_binary(name: str) -> str:
    """Path of a KenLM program: the running venv's ``bin`` first, then ``PATH``."""
    local = Path(sys.executable).parent / name
    if local.is_file():
        return str(local)
    found = shutil.which(name)
    if found is None:
        raise StepError(f"kenlm: the KenLM program {name!r} is not installed; {BUILD_HINT}")
    return found


def import_kenlm() -> Any:
    try:
        import kenlm
    except ImportError:
        raise StepError(
            f"kenlm: the `kenlm` Python module is not installed; {BUILD_HINT}"
        ) from None
    return kenlm


class KenLMConfig(PluginConfig):
    order: int = Field(5, ge=1, le=MAX_ORDER, description="n-gram order (Xiaomi §2.2.2: 5-gram LM)")
    langs: list[str] | None = Field(
        None, min_length=1, description="corpus languages to train a model for; all when unset"
    )
    prune: list[int] | None = Field(
        None,
        min_length=1,
        max_length=MAX_ORDER,
        description="lmplz --prune: per order, drop n-grams seen at most this many times "
        "(non-decreasing, unigrams 0; the last value applies to the remaining orders)",
    )
    discount_fallback: bool = Field(
        False,
        description="lmplz --discount_fallback: substitute fixed Kneser-Ney discounts when the "
        "corpus is too small to estimate them (tiny or very repetitive data)",
    )
    memory: str = Field(
        "1G",
        description="lmplz -S: memory for sorting (e.g. 1G, 500M, 20%); more is faster",
        json_schema_extra=NOT_IN_HASH,
    )

    @field_validator("memory")
    @classmethod
    def _memory(cls, value: str) -> str:
        if not re.fullmatch(r"\d+(\.\d+)?[%bKMGTkmgt]?", value):
            raise ValueError(f"memory {value!r} is not a size like 1G, 500M or 20%")
        return value

    @model_validator(mode="after")
    def _prune(self) -> KenLMConfig:
        prune = self.prune
        if prune is None:
            return self
        if prune[0] != 0:
            raise ValueError("prune: lmplz cannot prune unigrams, the first value must be 0")
        if any(b < a for a, b in pairwise(prune)):
            raise ValueError(f"prune {prune} must be non-decreasing")
        if any(v < 0 for v in prune) or len(prune) > self.order:
            raise ValueError(f"prune needs at most `order` ({self.order}) values >= 0")
        return self


def tokenize_chunk(task: tuple[str, list[str]]) -> list[str]:
    """Executor task: :func:`lm_line` of each line (module level so worker processes can
    unpickle it)."""
    lang, lines = task
    return [lm_line(line, lang) for line in lines]


class KenLMStep(Step[KenLMConfig]):
    """A KenLM n-gram model per language (output ``model``) for the ``lm`` filter.

    The output holds ``<lang>.binary`` per language and ``artifact.json`` (``type: kenlm``,
    ``langs``, ``order``, the file of each language, the tokenization and the log10 perplexity
    range per language, over the training or the ``normalize`` sentences)."""

    parallel = True  # its shards go through ctx.executor

    name = "kenlm"
    inputs: ClassVar[dict[str, bool]] = {"corpus": True, "normalize": False}
    outputs: ClassVar[tuple[str, ...]] = ("model",)

    def run(self, ctx: StepContext) -> None:
        config = self.config
        corpus = Corpus.open(ctx.inputs["corpus"].path)
        langs = self._langs(corpus)
        reference = self._reference(ctx, langs)
        kenlm = import_kenlm()
        lmplz, build_binary = kenlm_binary("lmplz"), kenlm_binary("build_binary")
        out = ctx.output("model")
        files, ranges = {}, {}
        for lang in langs:
            text = ctx.scratch("text") / f"{lang}.txt"
            lines = self._write_text(ctx, corpus, lang, text)
            if lines == 0:
                raise StepError(
                    f"{ctx.step_id}: no non-empty {lang} lines in {corpus.file(lang)} to train on"
                )
            arpa = ctx.scratch("arpa") / f"{lang}.arpa"
            log = ctx.scratch("logs") / f"{lang}.log"
            log.unlink(missing_ok=True)
            run_logged(self._lmplz(lmplz, text, arpa, ctx), log, f"{ctx.step_id}: lmplz ({lang})")
            binary = out / f"{lang}.binary"
            run_logged(
                [build_binary, "-s", "probing", str(arpa), str(binary)],
                log,
                f"{ctx.step_id}: build_binary ({lang})",
            )
            arpa.unlink()
            files[lang] = binary.name
            ranged = text
            if reference is not None:
                ranged = ctx.scratch("text") / f"{lang}.normalize.txt"
                if self._write_text(ctx, reference, lang, ranged) == 0:
                    raise StepError(
                        f"{ctx.step_id}: no non-empty {lang} lines in {reference.file(lang)} "
                        f"(input `normalize`) to take the perplexity range from"
                    )
            ranges[lang] = self._range(kenlm.Model(str(binary)), ranged)
            ctx.stats.add(f"sentences.{lang}", lines)
            ctx.metrics[f"median_log10_ppl.{lang}"] = ranges[lang]["median"]
        write_artifact_meta(
            out,
            type="kenlm",
            langs=langs,
            order=config.order,
            files=files,
            tokenization=TOKENIZATION,
            log10_ppl=ranges,
            log10_ppl_over="training" if reference is None else "normalize",
        )

    @staticmethod
    def _reference(ctx: StepContext, langs: list[str]) -> Corpus | None:
        """The corpus connected to ``normalize``, checked to hold every modelled language."""
        if "normalize" not in ctx.inputs:
            return None
        reference = Corpus.open(ctx.inputs["normalize"].path)
        missing = [lang for lang in langs if lang not in reference.langs]
        if missing:
            raise StepError(
                f"{ctx.step_id}: the `normalize` corpus ({list(reference.langs)}) lacks "
                f"{missing}, which this step models"
            )
        return reference

    def _langs(self, corpus: Corpus) -> list[str]:
        config = self.config
        if config.langs is None:
            return list(corpus.langs)
        missing = [lang for lang in config.langs if lang not in corpus.langs]
        if missing:
            raise StepError(
                f"kenlm: languages {missing} are not in the corpus (it has {list(corpus.langs)})"
            )
        return list(dict.fromkeys(config.langs))

    def _lmplz(self, lmplz: str, text: Path, arpa: Path, ctx: StepContext) -> list[str]:
        config = self.config
        cmd = [lmplz, "-o", str(config.order), "-S", config.memory, "-T", str(ctx.scratch("tmp"))]
        cmd += ["--text", str(text), "--arpa", str(arpa)]
        if config.prune is not None:
            cmd += ["--prune", *map(str, config.prune)]
        if config.discount_fallback:
            cmd.append("--discount_fallback")
        return cmd

    @staticmethod
    def _write_text(ctx: StepContext, corpus: Corpus, lang: str, path: Path) -> int:
        """Tokenized non-empty lines of ``lang``, tokenized in the executor's workers."""
        column = corpus.langs.index(lang)

        def chunks() -> Iterator[tuple[str, list[str]]]:
            chunk: list[str] = []
            for pair in corpus:
                chunk.append(pair[column])
                if len(chunk) == CHUNK:
                    yield lang, chunk
                    chunk = []
            if chunk:
                yield lang, chunk

        written = 0
        with (
            open(path, "w", encoding="utf-8", newline="\n") as handle,
            ctx.progress(corpus.count(), f"tokenize {lang}") as bar,
        ):
            for lines in ctx.executor.map(tokenize_chunk, chunks()):
                for line in lines:
                    if line:
                        handle.write(line + "\n")
                        written += 1
                bar.update(len(lines))
        return written

    @staticmethod
    def _range(model: Any, text: Path) -> dict[str, float]:
        """min, median and max log10 perplexity of the (tokenized) lines of ``text``."""
        values = []
        with open(text, encoding="utf-8") as handle:
            for line in handle:
                values.append(log10_perplexity(model, line.rstrip("\n")))
        values.sort()
        return {"min": values[0], "median": values[len(values) // 2], "max": values[-1]}
