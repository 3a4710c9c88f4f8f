"""B2T connections (Takase et al., 2022; NT5 §4.1) as a ``mtcore_transformer`` extension: a
Post-LN layer whose input ``x`` is added once more before the layer's final LayerNorm,
skipping every LayerNorm inside the layer:

    encoder:  h = LN1(x + Attn(x));                       y = LN2(h + FFN(h) + x)
    decoder:  h1 = LN1(x + SelfAttn(x)); h2 = LN2(h1 + EncAttn(h1));   y = LN3(h2 + FFN(h2) + x)

in every layer, the first included, as in the authors' implementation (takase/b2t_connection,
``--residual-bottom-to-top``). Their optional rescaled initialisation (every non-LayerNorm weight
times ``layers ** -0.5``) is ``--b2t-rescale-init``. B2T adds no parameters: it replaces the
forward pass of fairseq's layers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from fairseq.modules.transformer_layer import TransformerDecoderLayerBase
from torch import Tensor

from mtcore_plugins.common.fairseq.model_extension import ModelExtension


class B2TExtension(ModelExtension):
    name = "b2t"
    order = 10
    ctranslate2 = "B2T connections (a bottom-to-top residual CTranslate2 layers lack)"
    args = {
        "b2t": ({"action": "store_true", "help": "B2T connection in every layer (Post-LN)"}, False),
        "b2t_rescale_init": (
            {
                "action": "store_true",
                "help": "scale non-LayerNorm weights by layers^-0.5 (B2T code)",
            },
            False,
        ),
    }

    def active(self, args: Any) -> bool:
        return bool(getattr(args, "b2t", False))

    def check(self, args: Any, active: Sequence[str]) -> None:
        for side in ("encoder", "decoder"):
            if getattr(args, f"{side}_normalize_before", False):
                raise ValueError(f"B2T is a Post-LN connection: leave {side}_normalize_before off")

    def layer_forward(self, side: str) -> Callable[..., Any]:
        return encoder_forward if side == "encoder" else decoder_forward

    def attach(self, side: str, stack: Any, cfg: Any) -> None:
        if getattr(cfg, "b2t_rescale_init", False):
            rescale_init(stack.layers, len(stack.layers))


def rescale_init(module: torch.nn.Module, layers: int) -> None:
    """takase/b2t_connection ``rescaling_init``: weights (not LayerNorms) times layers^-0.5."""
    scale = layers**-0.5
    with torch.no_grad():
        for name, param in module.named_parameters():
            if "layer_norm" not in name and "weight" in name:
                param.mul_(scale)


def encoder_forward(
    layer: Any, x: Tensor, encoder_padding_mask: Tensor | None, attn_mask: Tensor | None = None
) -> Tensor:
    if attn_mask is not None:  # as fairseq: 1 -> large negative
        attn_mask = attn_mask.masked_fill(
            attn_mask.to(torch.bool), -1e8 if x.dtype == torch.float32 else -1e4
        )
    bottom = x
    h, _ = layer.self_attn(
        query=x,
        key=x,
        value=x,
        key_padding_mask=encoder_padding_mask,
        need_weights=False,
        attn_mask=attn_mask,
    )
    h = layer.self_attn_layer_norm(x + layer.dropout_module(h))
    y = layer.fc2(layer.activation_dropout_module(layer.activation_fn(layer.fc1(h))))
    return layer.final_layer_norm(h + layer.dropout_module(y) + bottom)  # type: ignore[no-any-return]


def decoder_forward(
    layer: Any,
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
    if prev_self_attn_state is not None or prev_attn_state is not None:
        return TransformerDecoderLayerBase.forward(  # type: ignore[no-any-return]
            layer,
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
    h, attn = layer.self_attn(
        query=x,
        key=x,
        value=x,
        key_padding_mask=self_attn_padding_mask,
        incremental_state=incremental_state,
        need_weights=False,
        attn_mask=self_attn_mask,
    )
    h = layer.self_attn_layer_norm(x + layer.dropout_module(h))
    if layer.encoder_attn is not None and encoder_out is not None:
        c, attn = layer.encoder_attn(
            query=h,
            key=encoder_out,
            value=encoder_out,
            key_padding_mask=encoder_padding_mask,
            incremental_state=incremental_state,
            static_kv=True,
            need_weights=need_attn or (not layer.training and layer.need_attn),
            need_head_weights=need_head_weights,
        )
        h = layer.encoder_attn_layer_norm(h + layer.dropout_module(c))
    y = layer.fc2(layer.activation_dropout_module(layer.activation_fn(layer.fc1(h))))
    return layer.final_layer_norm(h + layer.dropout_module(y) + bottom), attn, None
