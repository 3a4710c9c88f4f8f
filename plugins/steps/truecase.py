"""Moses-style truecasing: train a model per language, truecase or detruecase a corpus.

NT5 §3.2: "we truecased both the bitext and monolingual data" with Moses ``truecase.perl``; NT5
§5.2: after decoding Ja→En "we detokenized and detruecased the sentences"; Xiaomi §2.3
post-processes with "rule-based de-truecasing".

The model is Moses' ``train-truecaser.perl`` model and file format: for every word, how often
each casing of it occurs where the case is not forced by a sentence start; the most frequent
casing is the word's true case. Unlike the Perl scripts, which expect tokenized input, words
here are whitespace tokens stripped of leading and trailing punctuation (``"Hello,`` is the
word ``Hello``), and only the case of letters ever changes: spacing and punctuation are kept
byte for byte, so the steps work on raw and on tokenized text alike.
"""

from __future__ import annotations

import shutil
import unicodedata
from collections import Counter
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field

from mtcore.api import (
    Artifact,
    BlockReader,
    Corpus,
    DataError,
    PluginConfig,
    RawBlock,
    Step,
    StepContext,
    StepError,
    map_shards,
    worker_memo,
    write_artifact_meta,
)
from mtcore.api.engine import ShardOutput, rewrite_corpus, rewrite_shard
from mtcore_plugins.common.text.truecasing import CASELESS, words

Casing = dict[str, dict[str, int]]
"""lower-cased word -> surface form -> count, forms in order of first occurrence."""


def cased_langs(langs: tuple[str, ...]) -> list[str]:
    return [lang for lang in langs if lang.replace("_", "-").split("-")[0] not in CASELESS]


def model_file(lang: str) -> str:
    return f"truecase-model.{lang}"


# --- the word scan shared by training, truecasing and detruecasing -------------------------


def count_casing(lines: list[str], lang: str, casing: Casing) -> int:
    """Adds the casings of every non-initial word to ``casing``; returns the words counted."""
    counted = 0
    for line in lines:
        for start, end, initial in words(line, lang):
            if initial:
                continue
            word = line[start:end]
            forms = casing.setdefault(word.lower(), {})
            forms[word] = forms.get(word, 0) + 1
            counted += 1
    return counted


class TruecaseModel:
    """``best``: the true case of each lower-cased word; ``known``: every casing seen."""

    def __init__(self, best: dict[str, str], known: frozenset[str], lang: str) -> None:
        self.best = best
        self.known = known
        self.lang = lang

    @classmethod
    def from_casing(cls, casing: Casing, lang: str) -> TruecaseModel:
        best = {lower: ranked(forms)[0][0] for lower, forms in casing.items()}
        known = frozenset(form for forms in casing.values() for form in forms)
        return cls(best, known, lang)

    @classmethod
    def load(cls, path: Path, lang: str) -> TruecaseModel:
        """Reads the Moses format: ``best (count/total) other (count) ...`` per line."""
        best: dict[str, str] = {}
        known: set[str] = set()
        with open(path, encoding="utf-8") as handle:
            for number, line in enumerate(handle, 1):
                fields = line.split()
                if not fields:
                    continue
                if len(fields) % 2 or not all(f.startswith("(") for f in fields[1::2]):
                    raise DataError(
                        f"{path}:{number}: not a truecaser model line (expected "
                        f"'word (count/total) other (count) ...'): {line.strip()[:80]!r}"
                    )
                forms = fields[0::2]
                best[forms[0].lower()] = forms[0]
                known.update(forms)
        return cls(best, frozenset(known), lang)

    def truecase(self, line: str) -> str:
        """truecase.perl: a sentence-initial word takes its true case; another keeps a casing
        seen in training and otherwise takes the true case; unknown words are left alone."""
        parts: list[str] = []
        done = 0
        for start, end, initial in words(line, self.lang):
            word = line[start:end]
            best = self.best.get(word.lower())
            if best is None or best == word or (not initial and word in self.known):
                continue
            parts += (line[done:start], best)
            done = end
        return "".join(parts) + line[done:] if parts else line


def _opening(char: str) -> bool:
    """An opening quote or bracket (Moses' delayed sentence start, any script), or the
    Spanish inverted marks."""
    return char in "\"'¿¡" or unicodedata.category(char) in ("Ps", "Pi", "Pf")


def detruecase(line: str, lang: str) -> str:
    """detruecase.perl: upper-case the first letter of each sentence-initial word. Moses
    upper-cases a token's first character, so a word led by anything but opening quotes and
    brackets (``%s``, ``#tag``, ``@user``, ``$x``) keeps its case; on detokenized text the
    quotes and brackets are part of the token and are skipped (``"hello`` -> ``"Hello``)."""
    parts: list[str] = []
    done = 0
    for start, _end, initial in words(line, lang):
        lead = start
        while lead > 0 and not line[lead - 1].isspace():
            lead -= 1
        if initial and line[start].islower() and all(map(_opening, line[lead:start])):
            parts += (line[done:start], line[start].upper())
            done = start + 1
    return "".join(parts) + line[done:] if parts else line


def ranked(forms: dict[str, int]) -> list[tuple[str, int]]:
    """Casings by count, most frequent first; ties keep the order of first occurrence."""
    return sorted(forms.items(), key=lambda item: -item[1])


def write_model(casing: Casing, path: Path) -> None:
    """The Moses ``train-truecaser.perl`` file, words sorted so the bytes are reproducible."""
    with open(path, "w", encoding="utf-8", newline="\n") as handle:
        for lower in sorted(casing):
            forms = ranked(casing[lower])
            total = sum(count for _, count in forms)
            cells = [f"{forms[0][0]} ({forms[0][1]}/{total})"]
            cells += [f"{form} ({count})" for form, count in forms[1:]]
            handle.write(" ".join(cells) + "\n")


# --- workers -------------------------------------------------------------------------------


def count_task(task: tuple[tuple[str, ...], tuple[str, ...], RawBlock]) -> dict[str, Any]:
    """Runs in a worker: the casing counts of one shard for each modelled language."""
    modelled, langs, raw = task
    block = raw.decode(langs)
    out: dict[str, Any] = {}
    for column, lang in zip(block.columns, langs, strict=True):
        if lang in modelled:
            casing: Casing = {}
            out[lang] = (casing, count_casing(column.lines, lang, casing))
    return out


def _model(path: str, lang: str) -> TruecaseModel:
    """The truecasing model of ``lang``, loaded once per worker."""
    model: TruecaseModel = worker_memo(
        ("truecase model", path, lang), lambda: TruecaseModel.load(Path(path), lang)
    )
    return model


def truecase_task(
    task: tuple[tuple[str, dict[str, str]], tuple[str, ...], RawBlock],
) -> ShardOutput:
    (mode, models), langs, raw = task

    def rewrite(lines: list[str], side: int, lang: str, counts: Counter[str]) -> list[str]:
        if lang not in models:
            return lines
        if mode == "detruecase":
            out = [detruecase(line, lang) for line in lines]
        else:
            model = _model(models[lang], lang)
            out = [model.truecase(line) for line in lines]
        counts[f"changed.{mode}.{lang}"] += sum(
            1 for a, b in zip(lines, out, strict=True) if a != b
        )
        return out

    return rewrite_shard(raw, langs, rewrite)


# --- steps ---------------------------------------------------------------------------------


class TrainTruecaserConfig(PluginConfig):
    langs: list[str] | None = Field(
        None,
        min_length=1,
        description="corpus languages to model; default every side whose script has case "
        "(not ja, zh, ko, ...)",
    )
    shard_size: int = Field(50_000, ge=1, le=10_000_000, description="pairs per shard")


class TrainTruecaserStep(Step[TrainTruecaserConfig]):
    """Outputs ``model``: ``truecase-model.<lang>`` per modelled language (Moses format)."""

    parallel = True  # its shards go through ctx.executor

    name = "truecaser"
    inputs: ClassVar[dict[str, bool]] = {"corpus": True}
    outputs: ClassVar[tuple[str, ...]] = ("model",)

    def run(self, ctx: StepContext) -> None:
        source = Corpus.open(ctx.inputs["corpus"].path)
        modelled = tuple(_sides(self.config.langs, source, "langs") or cased_langs(source.langs))
        if not modelled:
            raise StepError(
                f"no side of {source.path} ({', '.join(source.langs)}) has a cased script: "
                "set langs to the sides to model"
            )
        casing: dict[str, Casing] = {lang: {} for lang in modelled}
        results = map_shards(
            ctx.executor,
            count_task,
            BlockReader(source.files(), self.config.shard_size),
            lambda raw: (modelled, source.langs, raw),
            ctx.scratch("counts"),
        )
        for _, shard in results:
            for lang, (counts, counted) in shard.items():
                _merge(casing[lang], counts)
                ctx.stats.add(f"words.{lang}", counted)
        out = ctx.output("model")
        for lang in modelled:
            write_model(casing[lang], out / model_file(lang))
            ctx.stats.add(f"types.{lang}", len(casing[lang]))
        write_artifact_meta(
            out,
            type="truecaser",
            langs=list(modelled),
            files={lang: model_file(lang) for lang in modelled},
        )


def _merge(into: Casing, counts: Casing) -> None:
    for lower, forms in counts.items():
        target = into.setdefault(lower, {})
        for form, count in forms.items():
            target[form] = target.get(form, 0) + count


def _sides(langs: list[str] | None, source: Corpus, field: str) -> list[str]:
    if langs is None:
        return []
    missing = [lang for lang in langs if lang not in source.langs]
    if missing:
        raise StepError(
            f"{field} names {', '.join(missing)} but the corpus {source.path} has "
            f"{', '.join(source.langs)}"
        )
    return list(dict.fromkeys(langs))


class TruecaseConfig(PluginConfig):
    mode: Literal["truecase", "detruecase"] = Field(
        "truecase",
        description="truecase: words take their true case from the model; detruecase: "
        "upper-case the first letter of every sentence (post-processing output)",
    )
    langs: list[str] | None = Field(
        None,
        min_length=1,
        description="sides to rewrite; default the model's languages, or without a model "
        "(detruecase) every side whose script has case; other sides pass through unchanged",
    )
    shard_size: int = Field(20_000, ge=1, le=10_000_000, description="pairs per shard")


class TruecaseStep(Step[TruecaseConfig]):
    """Outputs ``corpus``: the input truecased (needs the ``model`` input) or detruecased."""

    name = "truecase"
    inputs: ClassVar[dict[str, bool]] = {"corpus": True, "model": False}
    outputs: ClassVar[tuple[str, ...]] = ("corpus",)
    streams: ClassVar[tuple[str, ...]] = ("corpus",)

    parallel = True  # its shards go through ctx.executor

    def run(self, ctx: StepContext) -> None:
        source = Corpus.open(ctx.inputs["corpus"].path)
        sides = _sides(self.config.langs, source, "langs")
        model = ctx.inputs.get("model")
        models: dict[str, str] = {}
        if self.config.mode == "truecase":
            models = self._models(model, sides or None, source)
        else:  # detruecasing is rule-based: a connected model only says which sides
            if not sides and model is not None:
                sides = [lang for lang in model.meta.get("langs", []) if lang in source.langs]
            models = {lang: "" for lang in sides or cased_langs(source.langs)}
        payload = (self.config.mode, models)
        rewrite_corpus(
            ctx, source, truecase_task, payload, self.config.shard_size, self.config.mode
        )

    def export_statement(self, inputs: dict[str, Artifact], out: Path) -> dict[str, Any]:
        """The model files (Moses' format, which sacremoses' ``MosesTruecaser(load_from=...)``
        reads) copied into ``out``, and the call that applies them; detruecasing as
        sacremoses' ``MosesDetruecaser``."""
        if self.config.mode == "detruecase":
            return {"client": "sacremoses.MosesDetruecaser().detruecase(line, return_str=True)",
                    "langs": self.config.langs}  # fmt: skip
        model = inputs.get("model")
        files: dict[str, str] = model.meta.get("files", {}) if model is not None else {}
        sides = self.config.langs or list(files)
        written = {}
        for lang in sides:
            if lang in files:
                shutil.copyfile(model.member(files[lang]), out / model_file(lang))  # type: ignore[union-attr]
                written[lang] = model_file(lang)
        return {
            "files": written,
            "format": "Moses truecase model (train-truecaser.perl): 'word (count/total) "
            "other (count) ...' per line",
            "client": "sacremoses.MosesTruecaser(load_from=FILE).truecase(line, return_str=True)",
            "differs": "mtcore truecases whitespace words stripped of leading and trailing "
            "punctuation and keeps the spacing; sacremoses truecases whitespace tokens as they "
            "are and joins them with single spaces",
        }

    @staticmethod
    def _models(model: Artifact | None, sides: list[str] | None, source: Corpus) -> dict[str, str]:
        """Model file per side to truecase: the requested sides, else every corpus side the
        model covers."""
        if model is None:
            raise StepError(
                "mode truecase needs a model: connect a truecaser step as input 'model'"
            )
        if model.type != "truecaser":
            raise StepError(f"{model.path} is not a truecaser model (artifact type {model.type!r})")
        files = model.files()
        wanted = sides if sides is not None else [lang for lang in source.langs if lang in files]
        lacking = [lang for lang in wanted if lang not in files]
        if lacking:
            raise StepError(
                f"the truecaser model {model.path} has no model for {', '.join(lacking)} "
                f"(it has {', '.join(files) or 'none'})"
            )
        return {lang: str(model.member(files[lang], f"{lang} model")) for lang in wanted}
