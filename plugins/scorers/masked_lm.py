"""Masked-language-model pseudo-log-likelihood of the hypothesis (Salazar et al., 2020, "Masked
Language Model Scoring"): each token is masked in turn and the model's log-probability of the
true token at the mask is summed. NT5 §5.1 scored English with DeBERTa and Japanese with
RoBERTa this way and "normalized the PLLs by dividing them by token length" (``normalize:
token``, the default).

The model is any Hugging Face masked LM saved in a local directory, loaded with
``local_files_only`` (nothing is downloaded). It needs the ``transformers`` package, which is
optional: without it ``setup`` stops with an error that says how to install it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from mtcore.api import NOT_IDENTITY, PluginConfig, PluginError, Scorer

INSTALL = "pip install 'transformers>=4.30'"


class MaskedLMConfig(PluginConfig):
    model: str = Field(
        ...,
        min_length=1,
        description="local directory of a Hugging Face masked LM (NT5 §5.1: DeBERTa for "
        "English, RoBERTa for Japanese)",
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
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    if tokenizer.mask_token_id is None:
        raise PluginError(f"scorer 'masked_lm': the tokenizer in {path} has no mask token")
    model = AutoModelForMaskedLM.from_pretrained(path, local_files_only=True)
    return tokenizer, model.eval()


class MaskedLMScorer(Scorer[MaskedLMConfig]):
    """Score: the hypothesis' pseudo-log-likelihood (natural log), per token or summed."""

    name = "masked_lm"

    def setup(self, src: str, tgt: str, resources: Mapping[str, Path] | None = None) -> None:
        super().setup(src, tgt, resources)
        config = self.config
        self.tokenizer, self.model = load_masked_lm(config.model)
        import torch

        torch.set_num_threads(config.threads)

    def score(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        config = self.config
        out = []
        for _, hyp in pairs:
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
