"""Reranks an n-best list with weighted features (NT5 §5.1, Xiaomi §3.4).

Inputs: ``nbest`` (a translate step's ``nbest`` output), for tuning ``dev_nbest`` and
``dev_ref`` (the dev n-best and a corpus holding its references), and any other role a scorer
names (models, language models, a SentencePiece model). The step adds one feature column per
entry of ``features`` to every hypothesis of both n-bests, learns weights on the dev n-best
with the ``tuner`` (or takes fixed ``weights``), and outputs the hypothesis of each test line
that maximizes ``sum_j w_j f_j`` (NT5 eq. 1):

- ``hyp``: one line per n-best entry, the reranked 1-best;
- ``nbest``: the test n-best with every feature column;
- ``weights``: ``weights.json`` (the weights, the tuner, dev BLEU before and after) and the
  dev n-best with its features (``dev.nbest.jsonl``).

Features weighed: the ones ``weigh`` lists (the four recipes list their papers' features), else
every column: the scorers' and those the n-best already carries (the decoder's ``fwd``).
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from pydantic import Field, field_validator

from mtcore.api import (
    Corpus,
    CorpusWriter,
    DataError,
    Metric,
    PluginConfig,
    PluginError,
    Registry,
    Step,
    StepContext,
    StepError,
    Tuner,
    components,
    write_artifact_meta,
)
from mtcore.api.engine import component_specs, entry_name, entry_settings, field_specs
from mtcore_plugins.steps._features import STEP_KEYS, add_features
from mtcore_plugins.steps._nbest import Entry, NBestWriter, open_nbest
from mtcore_plugins.steps._translate_config import worker_threads

OWN_INPUTS = ("nbest", "dev_nbest", "dev_ref")


class RerankConfig(PluginConfig):
    features: list[dict[str, Any] | str] = Field(
        default_factory=list,
        description="scorer chain: each entry a name or {name: <scorer>, feature: <column "
        "name; default the scorer's name>, <scorer settings>}",
        json_schema_extra=components("scorers", reserved=STEP_KEYS[1:], label_key="feature"),
    )
    weigh: list[str] | None = Field(
        None,
        min_length=1,
        description="feature columns to weigh (the n-best's own, such as fwd, and the "
        "scorers'); default: every column",
    )
    tuner: str | dict[str, Any] = Field(
        "mert",
        description="tuner plugin (name or {name, settings}) fitted on dev_nbest/dev_ref: mert "
        "(NT5 §5.1), ranksvm (Xiaomi §3.4), random_search",
        json_schema_extra=components("tuners"),
    )
    weights: dict[str, float] | None = Field(
        None, description="fixed weights per feature instead of tuning (no dev inputs then)"
    )
    shard_size: int = Field(200, ge=1, le=1_000_000, description="n-best entries per shard")
    threads: int = Field(
        0, ge=0, le=512, description="torch threads per worker; 0 shares the cores out"
    )

    @field_validator("features")
    @classmethod
    def _labels(cls, value: list[dict[str, Any] | str]) -> list[dict[str, Any] | str]:
        labels = [
            spec.label for spec in component_specs("scorers", value, STEP_KEYS[1:], "feature")
        ]
        twice = sorted({label for label in labels if labels.count(label) > 1})
        if twice:
            raise ValueError(f"feature names {twice} are used twice; give each a `feature` name")
        return value


class RerankStep(Step[RerankConfig]):
    """n-best + features + weights -> reranked 1-best per line (see the module docstring)."""

    parallel = True  # its shards go through ctx.executor

    name = "rerank"
    inputs: ClassVar[dict[str, bool]] = {
        "nbest": True,
        "dev_nbest": False,
        "dev_ref": False,
        "*": False,
    }
    outputs: ClassVar[tuple[str, ...]] = ("hyp", "nbest", "weights")
    streams: ClassVar[tuple[str, ...]] = ("nbest",)

    def unused_components(self) -> set[str]:
        return {"tuner"} if self.config.weights is not None else set()  # fixed weights: no fit

    def run(self, ctx: StepContext) -> None:
        config = self.config
        test = open_nbest(ctx.inputs["nbest"], "nbest", ctx.step_id)
        src, tgt = str(test.meta["src"]), str(test.meta["tgt"])
        specs = field_specs(config, "features")
        clash = sorted({s.label for s in specs} & set(test.meta.get("features", [])))
        if clash:
            raise StepError(
                f"{ctx.step_id}: the n-best already has feature columns {clash}; name the "
                "scorers' columns otherwise (feature: ...)"
            )
        dev = self._dev_inputs(ctx, src, tgt)
        resources = tuple(
            sorted((r, str(a.path)) for r, a in ctx.inputs.items() if r not in OWN_INPUTS)
        )
        threads = worker_threads(config.threads, ctx.executor)
        weights_dir = ctx.output("weights")
        dev_entries: list[Entry] = []
        if dev is not None:
            dev_writer = NBestWriter(weights_dir, src, tgt, file="dev.nbest.jsonl")
            dev_entries = add_features(
                ctx, dev[0], dev_writer, specs, resources, config.shard_size, threads, "dev"
            )
            dev_writer.finish()
        test_writer = NBestWriter(ctx.output("nbest"), src, tgt)
        entries = add_features(
            ctx, test.file("file", "nbest.jsonl"), test_writer, specs, resources,
            config.shard_size, threads, "test",
        )  # fmt: skip
        test_writer.close(reranked=True)
        weigh = config.weigh or list(dict.fromkeys(test_writer.features))
        unknown = [f for f in weigh if f not in test_writer.features]
        if unknown:
            raise StepError(
                f"{ctx.step_id}: weigh names {unknown}, not columns of the n-best; its columns: "
                f"{', '.join(test_writer.features)}"
            )
        weights = self._weights(ctx, weigh, dev_entries, dev, tgt)
        self._write(ctx, entries, weights, tgt)
        report = {"weights": weights, "features": weigh}
        if dev is not None:
            report["dev_bleu"] = dev_report(ctx.registry, dev_entries, dev[1], weights, tgt)
            ctx.metrics["dev_bleu"] = report["dev_bleu"]
        if config.weights is None:
            report["tuner"] = str(entry_name(config.tuner))
        (weights_dir / "weights.json").write_text(json.dumps(report, indent=2) + "\n")
        write_artifact_meta(weights_dir, type="rerank-weights", weights=weights, src=src, tgt=tgt)
        ctx.metrics["weights"] = weights

    def for_new_text(self, finished: Path) -> tuple[Step[Any], tuple[str, ...]]:
        """The run's tuned weights, fixed: new text is reranked as the test set was, without
        tuning again on the dev n-best."""
        if self.config.weights is not None:
            return self, ()
        report = json.loads((finished / "weights" / "weights.json").read_text())
        settings = {**self.config.model_dump(mode="json"), "weights": report["weights"]}
        return RerankStep(RerankConfig.model_validate(settings)), ("dev_nbest", "dev_ref")

    def _dev_inputs(self, ctx: StepContext, src: str, tgt: str) -> tuple[Path, list[str]] | None:
        has = [role for role in ("dev_nbest", "dev_ref") if role in ctx.inputs]
        if self.config.weights is not None:
            if has:
                raise StepError(
                    f"{ctx.step_id}: fixed weights are set and {has} connected; either tune on "
                    "a dev set (leave weights out) or apply fixed weights (no dev inputs)"
                )
            return None
        if len(has) < 2:
            raise StepError(
                f"{ctx.step_id}: tuning needs both dev_nbest and dev_ref connected (have "
                f"{has or 'neither'}); or set fixed weights"
            )
        dev = open_nbest(ctx.inputs["dev_nbest"], "dev_nbest", ctx.step_id)
        if (dev.meta.get("src"), dev.meta.get("tgt")) != (src, tgt):
            raise DataError(
                f"{ctx.step_id}: dev_nbest is {dev.meta.get('src')}->{dev.meta.get('tgt')}, the "
                f"test n-best {src}->{tgt}"
            )
        ref = Corpus.open(ctx.inputs["dev_ref"].path)
        if tgt not in ref.langs:
            raise DataError(f"{ctx.step_id}: dev_ref {ref.path} has {list(ref.langs)}, not {tgt!r}")
        column = ref.langs.index(tgt)
        refs = [pair[column] for pair in ref]
        if len(refs) != dev.meta.get("lines"):
            raise DataError(
                f"{ctx.step_id}: dev_ref {ref.file(tgt)} has {len(refs)} lines, dev_nbest "
                f"{dev.meta.get('lines')} entries: a reference per n-best entry"
            )
        return dev.file("file", "nbest.jsonl"), refs

    def _weights(
        self,
        ctx: StepContext,
        weigh: list[str],
        dev_entries: list[Entry],
        dev: tuple[Path, list[str]] | None,
        tgt: str,
    ) -> dict[str, float]:
        if self.config.weights is not None:
            missing = sorted(set(weigh) - set(self.config.weights))
            if missing:
                raise StepError(f"{ctx.step_id}: weights has no value for features {missing}")
            return {f: float(self.config.weights[f]) for f in weigh}
        assert dev is not None
        tuner = _build_tuner(ctx.registry, self.config.tuner)
        nbest = [entry.hyps for entry in dev_entries]
        try:
            return tuner.fit(weigh, nbest, [dev[1]], tgt)
        except PluginError as exc:
            raise StepError(f"{ctx.step_id}: {exc}") from None

    def _write(
        self, ctx: StepContext, entries: list[Entry], weights: dict[str, float], tgt: str
    ) -> None:
        changed = 0
        with CorpusWriter(ctx.output("hyp"), (tgt,), name="hyp") as writer:
            for entry in entries:
                best = choose(entry, weights)
                changed += best != 0
                writer.write((entry.hyps[best][0],))
        ctx.stats.add("rerank.lines", len(entries))
        ctx.stats.add("rerank.changed", changed)


def choose(entry: Entry, weights: dict[str, float]) -> int:
    """Index of the hypothesis with the highest weighted sum (the first of equal ones)."""
    totals = [sum(w * scores.get(f, 0.0) for f, w in weights.items()) for _, scores in entry.hyps]
    return int(np.argmax(totals))


def dev_report(
    registry: Registry,
    entries: list[Entry],
    refs: list[str],
    weights: dict[str, float],
    tgt: str,
) -> dict[str, float]:
    """Dev BLEU (the ``bleu`` metric plugin's, from its segment statistics) of the decoder's
    1-best, of the reranked choice and of the oracle (the best sentence BLEU of each list)."""
    bleu = registry.load("metrics", "bleu").from_dict({})
    assert isinstance(bleu, Metric)
    texts = [text for e in entries for text, _ in e.hyps]
    of = [s for s, e in enumerate(entries) for _ in e.hyps]
    stats = np.asarray(bleu.segment_statistics(texts, [refs], tgt, of))
    offsets = np.cumsum([0] + [len(e.hyps) for e in entries])
    first = offsets[:-1]
    chosen = first + np.array([choose(e, weights) for e in entries], dtype=np.int64)
    sentence = bleu.score_statistics(stats, sentence=True)
    oracle = np.array([a + int(np.argmax(sentence[a:b])) for a, b in itertools.pairwise(offsets)])
    summed = np.stack([stats[rows].sum(axis=0) for rows in (first, chosen, oracle)])
    scores = [round(float(x), 4) for x in bleu.score_statistics(summed)]
    return dict(zip(("first", "reranked", "oracle_sentence_bleu"), scores, strict=True))


def _build_tuner(registry: Registry, entry: str | dict[str, Any]) -> Tuner:
    name = str(entry_name(entry))
    plugin = registry.load("tuners", name).from_dict(entry_settings(entry))
    if not isinstance(plugin, Tuner):
        raise PluginError(f"tuner {name!r} is not a Tuner")
    return plugin
