"""n-gram language-model fluency of the hypothesis under the ``kenlm`` step's model for the
target language (Yishu's LM reranking; Xiaomi §2.2.2 trains the same 5-gram KenLM models).
Text is tokenized as the ``kenlm`` step tokenized its training text; scores are natural-log
probabilities (KenLM's log10 times ln 10), ``</s>`` included, per token (``token``) or for the
sentence (``sum``)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal

from pydantic import Field

from mtcore.api import Artifact, PluginConfig, PluginError, Scorer


class NgramLMConfig(PluginConfig):
    lm: str = Field("lm", min_length=1, description="the rerank step's input role of a kenlm step")
    normalize: Literal["token", "sum"] = Field(
        "token", description="token: log-probability per token (</s> counted); sum: sentence"
    )


class NgramLMScorer(Scorer[NgramLMConfig]):
    """Score: ln P_LM(hypothesis), per token or summed."""

    name = "ngram_lm"

    def setup(self, src: str, tgt: str, resources: Mapping[str, Path] | None = None) -> None:
        from mtcore_plugins.common.lm.ngram import kenlm_meta, load_model

        super().setup(src, tgt, resources)
        config = self.config
        folder = self.resource(config.lm)
        meta = kenlm_meta(folder, config.lm, "scorer 'ngram_lm'")
        if tgt not in meta.get("files", {}):
            raise PluginError(
                f"scorer 'ngram_lm': {folder} has models for {sorted(meta.get('files', {}))}, "
                f"not the target language {tgt!r} (set langs on the kenlm step)"
            )
        self.model = load_model(Artifact(folder, meta).member(meta["files"][tgt], f"{tgt} model"))

    def score(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        from mtcore_plugins.common.lm.ngram import lm_line

        config = self.config
        out = []
        for _, hyp in pairs:
            line = lm_line(hyp, self.tgt)
            words = line.count(" ") + 1 if line else 0
            log10 = float(self.model.score(line, bos=True, eos=True))
            total = log10 * math.log(10)
            out.append(total / (words + 1) if config.normalize == "token" else total)
        return out
