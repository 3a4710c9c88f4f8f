"""Dynamic linear combination of layers (DLCL; Wang et al., 2019, §3.2; Xiaomi §3.1).

The input of layer l+1 is a learned weighted sum of the embedding output y_0 and of every
earlier layer's output y_1..y_l:

    pre-norm:   x_{l+1} = sum_{k<=l} W[l, k] * LN_k(y_k)     (LN_0 = identity)
    post-norm:  x_{l+1} = LN_l(sum_{k<=l} W[l, k] * y_k)      (no LN for l = 0)

and the stack's output is row L of W. W is lower triangular, initialised to the average
(W[l, k] = 1/(l+1)), as in the authors' fairseq implementation (``init_value avg``).
"""

from __future__ import annotations

from typing import Any

import torch
from fairseq.modules import LayerNorm
from torch import Tensor, nn

from mtcore_plugins.common.fairseq.model_extension import ModelExtension


class LayerHistory(nn.Module):
    """Holds the outputs seen so far in a list the caller owns (one list per forward pass)."""

    def __init__(self, dim: int, layers: int, normalize_before: bool) -> None:
        super().__init__()
        self.normalize_before = normalize_before
        weight = torch.zeros(layers + 1, layers + 1)
        for row in range(layers + 1):
            weight[row, : row + 1] = 1.0 / (row + 1)
        self.weight = nn.Parameter(weight)
        # one LayerNorm per layer output (pre-norm) or per combination after a layer (post-norm)
        self.layer_norms = nn.ModuleList(LayerNorm(dim) for _ in range(layers))

    def push(self, states: list[Tensor], output: Tensor) -> None:
        """Adds y_k (k = len(states)); y_0 is the embedding output."""
        if states and self.normalize_before:
            output = self.layer_norms[len(states) - 1](output)
        states.append(output)

    def combine(self, states: list[Tensor]) -> Tensor:
        """The input of the next layer (or the stack's output after the last layer)."""
        count = len(states)
        weights = self.weight[count - 1, :count]
        out = states[0] * weights[0]
        for k in range(1, count):
            out = out + states[k] * weights[k]
        if count > 1 and not self.normalize_before:
            out = self.layer_norms[count - 2](out)
        return out


class DlclExtension(ModelExtension):
    """``--dlcl``: every layer's input is the learned combination of all earlier outputs."""

    name = "dlcl"
    order = 40
    ctranslate2 = "DLCL (layer inputs mix every earlier layer; CTranslate2 stacks plainly)"
    needs_every_layer = True
    args = {
        "dlcl": ({"action": "store_true", "help": "dynamic linear combination of layers"}, False)
    }

    def active(self, args: Any) -> bool:
        return bool(getattr(args, "dlcl", False))

    def attach(self, side: str, stack: Any, cfg: Any) -> None:
        dim = stack.embed_tokens.embedding_dim if side == "encoder" else stack.embed_dim
        pre_norm = (
            cfg.encoder.normalize_before if side == "encoder" else cfg.decoder.normalize_before
        )
        stack.history = LayerHistory(dim, len(stack.layers), pre_norm)

    def start(self, stack: Any, states: list[Tensor], x: Tensor) -> None:
        stack.history.push(states, x)

    def next_input(self, stack: Any, states: list[Tensor], x: Tensor) -> Tensor:
        return stack.history.combine(states)  # type: ignore[no-any-return]

    def after_layer(self, stack: Any, index: int, states: list[Tensor], x: Tensor) -> Tensor:
        stack.history.push(states, x)
        return x
