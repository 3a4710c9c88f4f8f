"""fairseq's Transformer layers with the extension point's layer hooks: an extension may build
the layer's self-attention (relative positions) or replace its forward pass (B2T); with none
active the layer is fairseq's own, parameter for parameter and step for step."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fairseq.modules.transformer_layer import (
    TransformerDecoderLayerBase,
    TransformerEncoderLayerBase,
)

from mtcore_plugins.common.fairseq.model_extension import ModelExtension, first


def _forward(extensions: Sequence[ModelExtension], side: str) -> Any:
    found = [(e.name, f) for e in extensions if (f := e.layer_forward(side)) is not None]
    if len(found) > 1:
        names = ", ".join(name for name, _ in found)
        raise ValueError(f"model extensions {names} each replace the {side} layer's forward")
    return found[0][1] if found else None


class MtcoreEncoderLayer(TransformerEncoderLayerBase):
    """fairseq's encoder layer, with the active extensions' hooks."""

    def __init__(self, cfg: Any, extensions: Sequence[ModelExtension]) -> None:
        self.extensions = list(extensions)  # read by build_self_attention during init
        super().__init__(cfg)
        self.custom_forward = _forward(self.extensions, "encoder")

    def build_self_attention(self, embed_dim: int, cfg: Any) -> Any:
        module = first(self.extensions, "self_attention", "encoder", cfg, embed_dim)
        return module if module is not None else super().build_self_attention(embed_dim, cfg)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if self.custom_forward is not None:
            return self.custom_forward(self, *args, **kwargs)
        return super().forward(*args, **kwargs)


class MtcoreDecoderLayer(TransformerDecoderLayerBase):
    """fairseq's decoder layer, with the active extensions' hooks."""

    def __init__(
        self, cfg: Any, no_encoder_attn: bool, extensions: Sequence[ModelExtension]
    ) -> None:
        self.extensions = list(extensions)
        super().__init__(cfg, no_encoder_attn)
        self.custom_forward = _forward(self.extensions, "decoder")

    def build_self_attention(
        self, embed_dim: int, cfg: Any, add_bias_kv: bool = False, add_zero_attn: bool = False
    ) -> Any:
        module = first(self.extensions, "self_attention", "decoder", cfg, embed_dim)
        if module is not None:
            return module
        return super().build_self_attention(embed_dim, cfg, add_bias_kv, add_zero_attn)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if self.custom_forward is not None:
            return self.custom_forward(self, *args, **kwargs)
        return super().forward(*args, **kwargs)
