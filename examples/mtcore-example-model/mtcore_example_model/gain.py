"""A model family in one file: a learned gain on the output of every encoder and decoder layer
(1 at initialisation, so a model starts as the plain Transformer), switched on by its own
fairseq argument ``--output-gain``, and two named architectures of ``mtcore_transformer``.

Everything fairseq-related is imported inside ``register()`` and the hooks, so ``mtcore
plugins models`` lists this plugin without importing torch or fairseq.
"""

from __future__ import annotations

from typing import Any

from mtcore_plugins.models.extension import ModelExtension, ModelFamily


class OutputGain(ModelExtension):
    name = "output_gain"
    args = {
        "output_gain": ({"action": "store_true", "help": "a learned gain per layer output"}, False)
    }
    # CTranslate2's converter has no such layer: decoding falls back to fairseq (backend auto)
    ctranslate2 = "a learned gain per layer output"

    def active(self, args: Any) -> bool:
        return bool(getattr(args, "output_gain", False))

    def attach(self, side: str, stack: Any, cfg: Any) -> None:
        import torch

        stack.output_gains = torch.nn.Parameter(torch.ones(len(stack.layers)))

    def after_layer(self, stack: Any, index: int, states: list[Any], x: Any) -> Any:
        return x * stack.output_gains[index]


SIZES = {
    # a Transformer-base shape, and a tiny twin for CPU tests
    "mtcore_example_gain_base": {"encoder_embed_dim": 512, "encoder_ffn_embed_dim": 2048,
                                 "encoder_attention_heads": 8, "encoder_layers": 6},
    "mtcore_example_gain_tiny": {"encoder_embed_dim": 64, "encoder_ffn_embed_dim": 128,
                                 "encoder_attention_heads": 4, "encoder_layers": 2},
}  # fmt: skip


def settings(size: dict[str, int]) -> dict[str, Any]:
    decoder = {key.replace("encoder_", "decoder_"): value for key, value in size.items()}
    return {**size, **decoder, "output_gain": True}


class OutputGainModels(ModelFamily):
    """Registers the output-gain extension and its architectures into ``mtcore_transformer``."""

    name = "output_gain"
    extensions = (OutputGain,)
    presets = {arch: settings(size) for arch, size in SIZES.items()}
