"""Neural language-model fluency of the hypothesis under a ``train_lm`` step's fairseq
``transformer_lm`` (Xiaomi §3.4 "the perplexity score for the translation candidates with a
neural LM based on the Transformer"). The hypothesis is read as the LM was trained on each
sentence: ``</s>`` first as context, its SentencePiece pieces, then ``</s>`` predicted last.
Natural-log probability per token (``token``, ``</s>`` counted: minus the log perplexity) or
for the sentence (``sum``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from mtcore.api import NOT_IDENTITY, Artifact, PluginConfig, PluginError, Scorer


class NeuralLMConfig(PluginConfig):
    lm: str = Field(
        "lm", min_length=1, description="the rerank step's input role of a train_lm step"
    )
    spm: str = Field("spm", min_length=1, description="input role of the SentencePiece model")
    normalize: Literal["token", "sum"] = Field(
        "token", description="token: log-probability per token (</s> counted); sum: sentence"
    )
    max_tokens: int = Field(
        8192, ge=16, le=1_000_000, description="padded tokens per batch",
        json_schema_extra=NOT_IDENTITY,
    )  # fmt: skip


class NeuralLMScorer(Scorer[NeuralLMConfig]):
    """Score: ln P_LM(hypothesis), per token or summed."""

    name = "neural_lm"

    def setup(self, src: str, tgt: str, resources: Mapping[str, Path] | None = None) -> None:
        from mtcore_plugins.common.fairseq.setup import add_safe_globals, importing_fairseq

        with importing_fairseq():
            from fairseq import checkpoint_utils
        from mtcore_plugins.common.text.spm import load_spm

        super().setup(src, tgt, resources)
        config = self.config
        lm = Artifact.open(self.resource(config.lm))
        if lm.type != "fairseq-lm":
            raise PluginError(
                f"scorer 'neural_lm': input {config.lm!r} ({lm.path}) is not a train_lm step's "
                f"model (artifact type {lm.type!r})"
            )
        if lm.meta.get("lang") != tgt:
            raise PluginError(
                f"scorer 'neural_lm': the LM in {lm.path} models {lm.meta.get('lang')!r}, not "
                f"the target language {tgt!r}"
            )
        add_safe_globals()
        models, _cfg, task = checkpoint_utils.load_model_ensemble_and_task(
            [str(lm.file("checkpoint", "checkpoint.pt"))],
            arg_overrides={"data": str(lm.path)},
        )
        self.model = models[0].eval()
        self.dictionary = task.source_dictionary
        self.spm = load_spm(self.resource(config.spm))
        self.limit = int(self.model.max_positions() or 1024)

    def score(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        import numpy as np

        config = self.config
        if not pairs:
            return []
        tokens = [self._ids(p) for p in self.spm.encode([h for _, h in pairs], out_type=str)]
        sums = np.zeros(len(tokens))
        for batch in self._batches(tokens):
            sums[batch] = self._batch([tokens[i] for i in batch])
        counts = np.array([len(t) for t in tokens], dtype=np.float64)
        values = sums / counts if config.normalize == "token" else sums
        return [float(v) for v in values]

    def _ids(self, pieces: list[str]) -> Any:
        ids = self.dictionary.encode_line(" ".join(pieces), add_if_not_exist=False).long()
        if len(ids) > self.limit:
            ids = ids[: self.limit].clone()
            ids[-1] = self.dictionary.eos()
        return ids

    def _batches(self, tokens: list[Any]) -> list[list[int]]:
        config = self.config
        batches: list[list[int]] = []
        batch: list[int] = []
        for index in sorted(range(len(tokens)), key=lambda i: (len(tokens[i]), i)):
            if batch and len(tokens[index]) * (len(batch) + 1) > config.max_tokens:
                batches.append(batch)
                batch = []
            batch.append(index)
        if batch:
            batches.append(batch)
        return batches

    def _batch(self, targets: list[Any]) -> Any:
        import torch
        from fairseq.data import data_utils

        pad, eos = self.dictionary.pad(), self.dictionary.eos()
        target = data_utils.collate_tokens(targets, pad, eos, left_pad=False)
        previous = data_utils.collate_tokens(
            targets, pad, eos, left_pad=False, move_eos_to_beginning=True
        )
        with torch.inference_mode():
            logits = self.model(previous)[0].float()
            chosen = logits.gather(-1, target.unsqueeze(-1)).squeeze(-1)
            picked = (chosen - torch.logsumexp(logits, dim=-1)).masked_fill(target.eq(pad), 0.0)
        return picked.sum(dim=1).double().numpy()
