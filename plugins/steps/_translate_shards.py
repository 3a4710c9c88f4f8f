"""One shard of a translation, as an executor's worker or a rank translates it: the source
lines in shards of ``chunk_lines`` and the task that decodes one with the models it loads once
per process (:mod:`~mtcore_plugins.steps.translate`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from mtcore.api import Artifact, Corpus, Stats, worker_memo
from mtcore_plugins.common.decoding.translator import DecodeJob, Hyp, Translator
from mtcore_plugins.common.hub.pretrained import ARTIFACT_TYPE, PretrainedTokens
from mtcore_plugins.steps._ct2_decoding import Ct2Translator
from mtcore_plugins.steps._pretrained_init import LanguageTokens
from mtcore_plugins.steps._translate_config import TranslateConfig

Shard = tuple[int, int, list[str]]
"""(shard number, index of its first line, its source lines)."""

ShardResult = tuple[list[str], list[list[Hyp]] | None, dict[str, int]]
"""1-best lines, n-best lists (when asked for) and counters of one shard."""


def read_shards(corpus: Corpus, column: int, size: int) -> Iterator[Shard]:
    """The source column in shards of ``size`` lines."""
    lines: list[str] = []
    number = first = 0
    for index, pair in enumerate(corpus):
        lines.append(pair[column])
        if len(lines) == size:
            yield number, first, lines
            number, first, lines = number + 1, index + 1, []
    if lines:
        yield number, first, lines


def pretrained(members: dict[str, Artifact]) -> bool:
    return members["model"].meta.get("type") == ARTIFACT_TYPE


def tagged(members: dict[str, Artifact]) -> bool:
    """A fairseq model continued from a pretrained M2M-100/NLLB model: its text carries
    language tokens (:mod:`~mtcore_plugins.steps._pretrained_init`)."""
    return "language_tokens" in members["model"].meta


def translate_shard(task: tuple[str, int, str, DecodeJob, Shard]) -> ShardResult:
    """Executor task: the 1-best (and n-best) translations of one shard, and its counters.
    ``ct2``: the converted model to decode with CTranslate2, or empty for fairseq."""
    import torch

    settings, threads, ct2, job, (number, _first, lines) = task
    if threads and torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    key = settings + ct2 + repr(sorted((r, str(a.path)) for r, a in job.inputs.items()))

    def load() -> Translator | Ct2Translator:
        config = TranslateConfig.model_validate_json(settings)
        if pretrained(job.inputs):
            tokens = PretrainedTokens.load(
                job.inputs["model"], config.src, config.tgt, config.src_token, config.tgt_token
            )
            return Ct2Translator(config, job, Path(ct2), threads, tokens)
        if tagged(job.inputs):
            model = job.inputs["model"]
            tags = LanguageTokens.load(model.path, model.meta)
            if not ct2:  # an ensemble
                return Translator(config, job, tags)
            return Ct2Translator(config, job, Path(ct2), threads, tags)
        return Ct2Translator(config, job, Path(ct2), threads) if ct2 else Translator(config, job)

    # loaded by the first shard, kept for the next ones; one translator per worker at a time
    translator: Translator | Ct2Translator = worker_memo(("translator", key), load, only=True)
    config = translator.config
    translator.ctx = DecodeJob(job.step_id, job.inputs)  # fresh counters for this shard
    if config.sampling:  # per shard: a resumed run draws what an uninterrupted one would
        torch.manual_seed(config.seed + number)
        translator.seed = config.seed + number
    if config.nbest:
        lists = translator.translate_nbest(lines, config.nbest)
        hyps = [found[0][0] for found in lists]
    else:
        lists, hyps = None, translator.translate(lines)
    stats: Stats = translator.ctx.stats
    return hyps, lists, stats.as_dict()
