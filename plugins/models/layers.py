"""fairseq Transformer layers with a B2T connection and relative-position self-attention.

B2T (Takase et al., 2022; NT5 §4.1): a Post-LN layer whose input ``x`` is added once more before
the layer's final LayerNorm, skipping every LayerNorm inside the layer:

    encoder:  h = LN1(x + Attn(x));                       y = LN2(h + FFN(h) + x)
    decoder:  h1 = LN1(x + SelfAttn(x)); h2 = LN2(h1 + EncAttn(h1));   y = LN3(h2 + FFN(h2) + x)

in every layer, the first included, as in the authors' implementation (takase/b2t_connection,
``--residual-bottom-to-top``). Their optional rescaled initialisation (every non-LayerNorm weight
times ``layers ** -0.5``) is ``--b2t-rescale-init``.
"""

from __future__ import annotations

from typing import Any

import torch
from fairseq.modules.transformer_layer import (
    TransformerDecoderLayerBase,
    TransformerEncoderLayerBase,
)
from torch import Tensor

from mtcore_plugins.models.rpe import RelativeSelfAttention


def rescale_init(module: torch.nn.Module, layers: int) -> None:
    """takase/b2t_connection ``rescaling_init``: weights (not LayerNorms) times layers^-0.5."""
    scale = layers**-0.5
    with torch.no_grad():
        for name, param in module.named_parameters():
            if "layer_norm" not in name and "weight" in name:
                param.mul_(scale)


class MtcoreEncoderLayer(TransformerEncoderLayerBase):
    """fairseq's encoder layer, plus ``b2t`` and relative positions (``rpe_max_distance``)."""

    def __init__(self, cfg: Any, b2t: bool, rpe_max_distance: int, rpe_values: bool) -> None:
        self.rpe = (rpe_max_distance, rpe_values)  # read by build_self_attention during init
        super().__init__(cfg)
        self.b2t = b2t
        if b2t and self.normalize_before:
            raise ValueError("B2T is a Post-LN connection: leave encoder_normalize_before off")

    def build_self_attention(self, embed_dim: int, cfg: Any) -> Any:
        distance, values = self.rpe
        if distance <= 0:
            return super().build_self_attention(embed_dim, cfg)
        return RelativeSelfAttention(
            embed_dim, cfg.encoder.attention_heads, distance, cfg.attention_dropout, values
        )

    def forward(  # type: ignore[override]
        self, x: Tensor, encoder_padding_mask: Tensor | None, attn_mask: Tensor | None = None
    ) -> Tensor:
        if not self.b2t:
            return super().forward(x, encoder_padding_mask, attn_mask)  # type: ignore[no-any-return]
        if attn_mask is not None:  # as fairseq: 1 -> large negative
            attn_mask = attn_mask.masked_fill(
                attn_mask.to(torch.bool), -1e8 if x.dtype == torch.float32 else -1e4
            )
        bottom = x
        h, _ = self.self_attn(
            query=x,
            key=x,
            value=x,
            key_padding_mask=encoder_padding_mask,
            need_weights=False,
            attn_mask=attn_mask,
        )
        h = self.self_attn_layer_norm(x + self.dropout_module(h))
        y = self.fc2(self.activation_dropout_module(self.activation_fn(self.fc1(h))))
        return self.final_layer_norm(h + self.dropout_module(y) + bottom)  # type: ignore[no-any-return]


class MtcoreDecoderLayer(TransformerDecoderLayerBase):
    """fairseq's decoder layer, plus ``b2t`` and relative positions in self-attention."""

    def __init__(
        self,
        cfg: Any,
        no_encoder_attn: bool,
        b2t: bool,
        rpe_max_distance: int,
        rpe_values: bool,
    ) -> None:
        self.rpe = (rpe_max_distance, rpe_values)
        super().__init__(cfg, no_encoder_attn)
        self.b2t = b2t
        if b2t and self.normalize_before:
            raise ValueError("B2T is a Post-LN connection: leave decoder_normalize_before off")

    def build_self_attention(
        self, embed_dim: int, cfg: Any, add_bias_kv: bool = False, add_zero_attn: bool = False
    ) -> Any:
        distance, values = self.rpe
        if distance <= 0:
            return super().build_self_attention(embed_dim, cfg, add_bias_kv, add_zero_attn)
        return RelativeSelfAttention(
            embed_dim, cfg.decoder.attention_heads, distance, cfg.attention_dropout, values
        )

    def forward(  # type: ignore[override]
        self,
        x: Tensor,
        encoder_out: Tensor | None = None,
        encoder_padding_mask: Tensor | None = None,
        incremental_state: dict[str, dict[str, Tensor | None]] | None = None,
        prev_self_attn_state: list[Tensor] | None = None,
        prev_attn_state: list[Tensor] | None = None,
        self_attn_mask: Tensor | None = None,
        self_attn_padding_mask: Tensor | None = None,
        need_attn: bool = False,
        need_head_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None, None]:
        if not self.b2t or prev_self_attn_state is not None or prev_attn_state is not None:
            return super().forward(  # type: ignore[no-any-return]
                x,
                encoder_out,
                encoder_padding_mask,
                incremental_state,
                prev_self_attn_state,
                prev_attn_state,
                self_attn_mask,
                self_attn_padding_mask,
                need_attn,
                need_head_weights,
            )
        need_attn = need_attn or need_head_weights
        bottom = x
        h, attn = self.self_attn(
            query=x,
            key=x,
            value=x,
            key_padding_mask=self_attn_padding_mask,
            incremental_state=incremental_state,
            need_weights=False,
            attn_mask=self_attn_mask,
        )
        h = self.self_attn_layer_norm(x + self.dropout_module(h))
        if self.encoder_attn is not None and encoder_out is not None:
            c, attn = self.encoder_attn(
                query=h,
                key=encoder_out,
                value=encoder_out,
                key_padding_mask=encoder_padding_mask,
                incremental_state=incremental_state,
                static_kv=True,
                need_weights=need_attn or (not self.training and self.need_attn),
                need_head_weights=need_head_weights,
            )
            h = self.encoder_attn_layer_norm(h + self.dropout_module(c))
        y = self.fc2(self.activation_dropout_module(self.activation_fn(self.fc1(h))))
        return self.final_layer_norm(h + self.dropout_module(y) + bottom), attn, None
