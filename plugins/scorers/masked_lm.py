"""Masked-language-model pseudo-log-likelihood of the hypothesis (Salazar et al., 2020, "Masked
Language Model Scoring"): each token is masked in turn and the model's log-probability of the
true token at the mask is summed. NT5 §5.1 scored English with DeBERTa and Japanese with
RoBERTa this way and "normalized the PLLs by dividing them by token length" (``normalize:
token``, the default).

The model is a Hugging Face masked LM: a model the recipe's ``models`` section fetched by id
(``model:`` names the rerank step's input it is connected to, e.g. ``{hf:
microsoft/deberta-v2-xxlarge}``), or a local directory. It is loaded with
``local_files_only`` and ``trust_remote_code=False`` (nothing is downloaded, no code of the
model's runs). It needs the ``transformers`` package, which is optional: without it ``setup``
stops with an error that says how to install it.

``pretokenize: words`` segments the hypothesis into words first (MeCab for Japanese, jieba for
Chinese: :mod:`~mtcore_plugins.common.text.tokens`), joined by spaces, for a model whose card asks
for pre-segmented input: NT5's Japanese RoBERTa (nlp-waseda/roberta-large-japanese) was trained
on Juman++ words; MeCab's IPA words stand in for Juman++, which is not on the package index.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from mtcore.api import HASHED_WHEN_SET, NOT_IDENTITY, Artifact, PluginConfig, PluginError, Scorer
from mtcore_plugins.common.text.tokens import tokens

INSTALL = "pip install 'transformers>=4.30'"


class MaskedLMConfig(PluginConfig):
    model: str = Field(
        ...,
        min_length=1,
        description="the rerank input connected to a models entry (a masked LM by id), or "
        "a local directory of a Hugging Face masked LM (NT5 §5.1: DeBERTa for English, RoBERTa "
        "for Japanese)",
    )
    pretokenize: Literal["none", "words"] = Field(
        "none",
        description="words: segment the hypothesis into the target language's words (MeCab, "
        "jieba) joined by spaces first, for a model trained on segmented text",
        json_schema_extra=HASHED_WHEN_SET,
    )
    normalize: Literal["token", "sum"] = Field(
        "token", description="token: PLL divided by the tokens scored (NT5 §5.1); sum: the PLL"
    )
    max_length: int = Field(512, ge=8, le=8192, description="model tokens kept per hypothesis")
    batch_size: int = Field(
        64, ge=1, le=4096, description="masked copies per forward pass",
        json_schema_extra=NOT_IDENTITY,
    )  # fmt: skip
    threads: int = Field(
        1, ge=1, le=256, description="torch threads", json_schema_extra=NOT_IDENTITY
    )


def load_masked_lm(path: str) -> tuple[Any, Any]:
    """(tokenizer, model) from a local directory; clear errors for a missing package, a
    missing directory or a model without a mask token."""
    if not Path(path).is_dir():
        raise PluginError(
            f"scorer 'masked_lm': model {path!r} is not a directory; give the local directory "
            "of a saved Hugging Face masked LM (model.save_pretrained(path) with its tokenizer)"
        )
    try:
        from transformers import AutoModelForMaskedLM, AutoTokenizer
    except ImportError:
        raise PluginError(
            "scorer 'masked_lm' needs the `transformers` package, which is not installed: "
            f"{INSTALL}"
        ) from None
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True, trust_remote_code=False)
    if tokenizer.mask_token_id is None:
        raise PluginError(f"scorer 'masked_lm': the tokenizer in {path} has no mask token")
    model = AutoModelForMaskedLM.from_pretrained(
        path, local_files_only=True, trust_remote_code=False
    )
    return tokenizer, model.eval()


def model_path(model: str, resources: Mapping[str, Path] | None) -> str:
    """The directory ``model`` names: a rerank input (a ``models`` entry: its artifact must be
    a masked LM), else a path."""
    if resources and model in resources:
        artifact = Artifact.open(Path(resources[model]))
        meta = artifact.meta
        if meta.get("type") == "pretrained-model" and meta.get("task") != "masked_lm":
            raise PluginError(
                f"scorer 'masked_lm': input {model!r} is a {meta.get('model_type')} "
                f"{meta.get('task')} model ({meta.get('id')}), not a masked LM"
            )
        return str(artifact.path)
    return model


class MaskedLMScorer(Scorer[MaskedLMConfig]):
    """Score: the hypothesis' pseudo-log-likelihood (natural log), per token or summed."""

    name = "masked_lm"

    def setup(self, src: str, tgt: str, resources: Mapping[str, Path] | None = None) -> None:
        super().setup(src, tgt, resources)
        config = self.config
        self.tokenizer, self.model = load_masked_lm(model_path(config.model, resources))
        import torch

        torch.set_num_threads(config.threads)

    def score(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        config = self.config
        out = []
        for _, hyp in pairs:
            if config.pretokenize == "words":
                hyp = " ".join(tokens(hyp, self.tgt))
            total, count = self.pll(hyp)
            out.append(total / max(count, 1) if config.normalize == "token" else total)
        return out

    def pll(self, text: str) -> tuple[float, int]:
        """(summed log-probability of each token with that token masked, tokens scored)."""
        import torch

        config = self.config
        encoded = self.tokenizer(
            text, truncation=True, max_length=config.max_length, return_special_tokens_mask=True
        )
        ids = torch.tensor(encoded["input_ids"])
        positions = [i for i, special in enumerate(encoded["special_tokens_mask"]) if not special]
        total = 0.0
        with torch.inference_mode():
            for start in range(0, len(positions), config.batch_size):
                chunk = torch.tensor(positions[start : start + config.batch_size])
                batch = ids.repeat(len(chunk), 1)
                batch[torch.arange(len(chunk)), chunk] = self.tokenizer.mask_token_id
                logits = self.model(input_ids=batch).logits
                rows = logits[torch.arange(len(chunk)), chunk].float().log_softmax(dim=-1)
                total += float(rows.gather(1, ids[chunk].unsqueeze(1)).sum())
        return total, len(positions)
