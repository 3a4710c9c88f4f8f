"""Evolved Transformer cells (So et al., 2019, Figure 3; Xiaomi §3.1, which points to the
Tensor2Tensor implementation for the details followed here). All blocks are pre-norm:
``x + Dropout(Block(LN(x)))``; d = model size.

Encoder cell
  1. gated linear unit:  x + (W_v h) * sigmoid(W_g h)
  2. branched convs:     left = ReLU(Dense h -> 4d), right = ReLU(Conv 3x1 h -> d/2) padded to
                         4d; LN(left + right) -> Sep Conv 9x1 -> d/2, padded to d; added to x
  3. self-attention (encoder heads)
  4. feed-forward with ReLU
Decoder cell
  1. branches:           x + SelfAttn_16heads(h) + EncAttn(h)
  2. branched convs:     left = ReLU(Sep Conv 11x1 h -> 2d), right = Sep Conv 7x1 h -> d/2
                         padded to 2d; LN(left + right) -> Sep Conv 7x1 -> d; added to x
                         (convolutions are causal: left-padded, with a cache while decoding)
  3. self-attention (decoder heads)   4. encoder attention   5. feed-forward with Swish
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import torch
import torch.nn.functional as F
from fairseq.incremental_decoding_utils import with_incremental_state
from fairseq.modules import FairseqDropout, LayerNorm, MultiheadAttention
from torch import Tensor, nn

from mtcore_plugins.common.fairseq.model_extension import ModelExtension

BRANCH_HEADS = 16  # So et al. Figure 3: the decoder's left attention branch has 16 heads


class SeparableConv1d(nn.Module):
    """Depthwise convolution (one kernel per channel) then a pointwise projection; input and
    output (B, C, T). ``padding`` is applied on both sides (encoder) or none (caller pads)."""

    def __init__(self, channels: int, out_dim: int, kernel: int, padding: int = 0) -> None:
        super().__init__()
        self.depthwise = nn.Conv1d(
            channels, channels, kernel, padding=padding, groups=channels, bias=False
        )
        self.pointwise = nn.Conv1d(channels, out_dim, 1)

    def forward(self, x: Tensor) -> Tensor:
        return self.pointwise(self.depthwise(x))  # type: ignore[no-any-return]


def pad_channels(x: Tensor, size: int) -> Tensor:
    """Zero-pads the last dimension up to ``size`` (T2T pads the narrow branch)."""
    return F.pad(x, (0, size - x.size(-1)))


def masked(x: Tensor, padding_mask: Tensor | None) -> Tensor:
    """Zeroes padded positions of a (T, B, C) tensor so convolutions do not see them."""
    if padding_mask is None:
        return x
    return x.masked_fill(padding_mask.transpose(0, 1).unsqueeze(-1), 0.0)


class EvolvedEncoderCell(nn.Module):
    """Called like fairseq's encoder layer: ``(x, encoder_padding_mask) -> x`` on (T, B, C)."""

    def __init__(self, cfg: Any) -> None:
        super().__init__()
        d, ffn = cfg.encoder.embed_dim, cfg.encoder.ffn_embed_dim
        self.embed_dim = d
        self.dropout_module = FairseqDropout(cfg.dropout, module_name=type(self).__name__)
        self.glu_layer_norm = LayerNorm(d)
        self.glu_values = nn.Linear(d, d)
        self.glu_gates = nn.Linear(d, d)
        self.conv_layer_norm = LayerNorm(d)
        self.conv_left = nn.Linear(d, 4 * d)
        self.conv_right = nn.Conv1d(d, d // 2, 3, padding=1)
        self.conv_mid_layer_norm = LayerNorm(4 * d)
        self.conv_sep = SeparableConv1d(4 * d, d // 2, 9, padding=4)
        self.self_attn_layer_norm = LayerNorm(d)
        self.self_attn = MultiheadAttention(
            d, cfg.encoder.attention_heads, dropout=cfg.attention_dropout, self_attention=True
        )
        self.final_layer_norm = LayerNorm(d)
        self.fc1 = nn.Linear(d, ffn)
        self.fc2 = nn.Linear(ffn, d)

    def forward(
        self, x: Tensor, encoder_padding_mask: Tensor | None, attn_mask: Tensor | None = None
    ) -> Tensor:
        drop = self.dropout_module
        h = self.glu_layer_norm(x)
        x = x + drop(self.glu_values(h) * torch.sigmoid(self.glu_gates(h)))

        h = masked(self.conv_layer_norm(x), encoder_padding_mask)
        left = drop(F.relu(self.conv_left(h)))  # (T, B, 4d)
        right = drop(F.relu(self.conv_right(h.permute(1, 2, 0))).permute(2, 0, 1))  # (T, B, d/2)
        h = self.conv_mid_layer_norm(left + pad_channels(right, left.size(-1)))
        h = masked(h, encoder_padding_mask)
        h = self.conv_sep(h.permute(1, 2, 0)).permute(2, 0, 1)
        x = x + drop(pad_channels(h, self.embed_dim))

        h = self.self_attn_layer_norm(x)
        h, _ = self.self_attn(
            query=h,
            key=h,
            value=h,
            key_padding_mask=encoder_padding_mask,
            need_weights=False,
            attn_mask=attn_mask,
        )
        x = x + drop(h)

        h = self.final_layer_norm(x)
        return x + drop(self.fc2(drop(F.relu(self.fc1(h)))))

    def upgrade_state_dict_named(self, state_dict: dict[str, Any], name: str) -> None:
        """Nothing to rename (fairseq's encoder calls this on every layer)."""


@with_incremental_state
class EvolvedDecoderCell(nn.Module):
    """Called like fairseq's decoder layer; returns ``(x, attn, None)``."""

    WINDOW = 10  # the widest causal convolution (11x1) needs the 10 previous positions
    MID_WINDOW = 6  # the final 7x1 convolution needs 6

    def __init__(self, cfg: Any, branch_heads: int = BRANCH_HEADS) -> None:
        super().__init__()
        d, ffn = cfg.decoder.embed_dim, cfg.decoder.ffn_embed_dim
        heads, dropout = cfg.decoder.attention_heads, cfg.attention_dropout
        self.embed_dim = d
        self.need_attn = True
        self.dropout_module = FairseqDropout(cfg.dropout, module_name=type(self).__name__)
        self.branch_layer_norm = LayerNorm(d)
        self.branch_self_attn = MultiheadAttention(
            d, branch_heads, dropout=dropout, self_attention=True
        )
        self.branch_encoder_attn = self._encoder_attention(cfg, heads, dropout)
        self.conv_layer_norm = LayerNorm(d)
        self.conv_left = SeparableConv1d(d, 2 * d, 11)
        self.conv_right = SeparableConv1d(d, d // 2, 7)
        self.conv_mid_layer_norm = LayerNorm(2 * d)
        self.conv_final = SeparableConv1d(2 * d, d, 7)
        self.self_attn_layer_norm = LayerNorm(d)
        self.self_attn = MultiheadAttention(d, heads, dropout=dropout, self_attention=True)
        self.encoder_attn_layer_norm = LayerNorm(d)
        self.encoder_attn = self._encoder_attention(cfg, heads, dropout)
        self.final_layer_norm = LayerNorm(d)
        self.fc1 = nn.Linear(d, ffn)
        self.fc2 = nn.Linear(ffn, d)

    @staticmethod
    def _encoder_attention(cfg: Any, heads: int, dropout: float) -> MultiheadAttention:
        dim = cfg.encoder.embed_dim
        return MultiheadAttention(
            cfg.decoder.embed_dim,
            heads,
            kdim=dim,
            vdim=dim,
            dropout=dropout,
            encoder_decoder_attention=True,
        )

    def forward(
        self,
        x: Tensor,
        encoder_out: Tensor | None = None,
        encoder_padding_mask: Tensor | None = None,
        incremental_state: dict[str, dict[str, Tensor | None]] | None = None,
        prev_self_attn_state: Any = None,
        prev_attn_state: Any = None,
        self_attn_mask: Tensor | None = None,
        self_attn_padding_mask: Tensor | None = None,
        need_attn: bool = False,
        need_head_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None, None]:
        if encoder_out is None:
            raise ValueError("the Evolved Transformer decoder cell attends to an encoder")
        drop = self.dropout_module
        need_attn = need_attn or need_head_weights

        h = self.branch_layer_norm(x)
        left, _ = self.branch_self_attn(
            query=h,
            key=h,
            value=h,
            key_padding_mask=self_attn_padding_mask,
            incremental_state=incremental_state,
            need_weights=False,
            attn_mask=self_attn_mask,
        )
        right, _ = self.branch_encoder_attn(
            query=h,
            key=encoder_out,
            value=encoder_out,
            key_padding_mask=encoder_padding_mask,
            incremental_state=incremental_state,
            static_kv=True,
            need_weights=False,
        )
        x = x + drop(left) + drop(right)
        x = x + drop(self._convolutions(self.conv_layer_norm(x), incremental_state))

        h = self.self_attn_layer_norm(x)
        h, _ = self.self_attn(
            query=h,
            key=h,
            value=h,
            key_padding_mask=self_attn_padding_mask,
            incremental_state=incremental_state,
            need_weights=False,
            attn_mask=self_attn_mask,
        )
        x = x + drop(h)

        h = self.encoder_attn_layer_norm(x)
        h, attn = self.encoder_attn(
            query=h,
            key=encoder_out,
            value=encoder_out,
            key_padding_mask=encoder_padding_mask,
            incremental_state=incremental_state,
            static_kv=True,
            need_weights=need_attn or (not self.training and self.need_attn),
            need_head_weights=need_head_weights,
        )
        x = x + drop(h)

        h = self.final_layer_norm(x)
        return x + drop(self.fc2(drop(F.silu(self.fc1(h))))), attn, None

    def _convolutions(self, h: Tensor, incremental_state: Any) -> Tensor:
        """The causal convolution block on LN(x) (T, B, d) -> (T, B, d)."""
        drop = self.dropout_module
        steps = h.size(0)
        history = self._history(incremental_state, "conv_in", h, self.WINDOW)
        window = history.permute(1, 2, 0)  # (B, d, WINDOW + T)
        left = F.relu(self.conv_left(window))  # kernel 11: exactly T outputs
        right = self.conv_right(window[:, :, -(steps + 6) :])  # kernel 7
        right = F.pad(drop(right), (0, 0, 0, left.size(1) - right.size(1)))  # to 2d channels
        mid = self.conv_mid_layer_norm((drop(left) + right).permute(2, 0, 1))  # (T, B, 2d)
        mid_history = self._history(incremental_state, "mid_in", mid, self.MID_WINDOW)
        return self.conv_final(mid_history.permute(1, 2, 0)).permute(2, 0, 1)  # type: ignore[no-any-return]

    def _history(self, incremental_state: Any, key: str, h: Tensor, width: int) -> Tensor:
        """``h`` (T, B, C) preceded by the ``width`` positions before it: zeros at the start
        of a sequence, the cached positions while decoding step by step."""
        state = cast(Any, self)  # the methods with_incremental_state adds
        cached = None
        if incremental_state is not None:
            saved = state.get_incremental_state(incremental_state, key)
            cached = saved.get("window") if saved else None
        if cached is None:
            cached = h.new_zeros(width, h.size(1), h.size(2))
        history = torch.cat([cached, h], dim=0)
        if incremental_state is not None:
            state.set_incremental_state(incremental_state, key, {"window": history[-width:]})
        return history

    def reorder_incremental_state(self, incremental_state: Any, new_order: Tensor) -> None:
        """Beam search reordered the hypotheses: reorder the cached convolution inputs."""
        state = cast(Any, self)
        for key in ("conv_in", "mid_in"):
            saved = state.get_incremental_state(incremental_state, key)
            if saved and saved.get("window") is not None:
                saved["window"] = saved["window"].index_select(1, new_order)
                state.set_incremental_state(incremental_state, key, saved)

    def make_generation_fast_(self, need_attn: bool = False, **kwargs: Any) -> None:
        self.need_attn = need_attn


class EvolvedExtension(ModelExtension):
    """``--cell evolved``: Evolved Transformer cells instead of Transformer layers; only
    extensions that work between layers (adapters) combine with them."""

    name = "evolved"
    order = 50
    ctranslate2 = "evolved cells (convolution branches, not Transformer layers)"
    args = {
        "cell": ({"choices": ["transformer", "evolved"], "help": "layer type"}, "transformer"),
        "evolved_branch_heads": (
            {
                "type": int,
                "metavar": "N",
                "help": "heads of the Evolved decoder's branch attention",
            },
            BRANCH_HEADS,
        ),
    }
    combines_with = ("evolved", "adapters")

    def active(self, args: Any) -> bool:
        return getattr(args, "cell", "transformer") == "evolved"

    def check(self, args: Any, active: Sequence[str]) -> None:
        others = [name for name in active if name not in self.combines_with]
        if others:
            raise ValueError(
                f"--cell evolved combines with adapters only (not {', '.join(others)}): its "
                "cells replace the Transformer layers those change"
            )

    def layer(self, side: str, cfg: Any, no_encoder_attn: bool) -> Any:
        if side == "encoder":
            return EvolvedEncoderCell(cfg)
        return EvolvedDecoderCell(cfg, getattr(cfg, "evolved_branch_heads", BRANCH_HEADS))
