"""Language-specific adapters (Bapna & Firat, 2019; Yishu §2.2.1): after every encoder and
decoder layer, a residual bottleneck ``x + W_up ReLU(W_down LN(x))``, one set of adapters per
translation direction. The up-projection starts at zero, so adding adapters to a trained model
leaves its outputs unchanged until the adapters are trained."""

from __future__ import annotations

from collections.abc import Sequence

import torch.nn.functional as F
from fairseq.modules import LayerNorm
from torch import Tensor, nn

YISHU_BOTTLENECK = (
    4096  # Yishu §2.2.1: "a language-specific adapter with a dense layer dimension of 4096"
)


def direction_key(direction: str) -> str:
    """``en-ja`` -> ``en_ja`` (a module name: no dots, stable in checkpoints)."""
    key = direction.strip().replace("-", "_")
    if not key or "." in key or not key.replace("_", "").isalnum():
        raise ValueError(f"invalid adapter direction {direction!r}: expected SRC-TGT like 'en-ja'")
    return key


class Adapter(nn.Module):
    """One residual bottleneck adapter."""

    def __init__(self, dim: int, bottleneck: int) -> None:
        super().__init__()
        self.layer_norm = LayerNorm(dim)
        self.down = nn.Linear(dim, bottleneck)
        self.up = nn.Linear(bottleneck, dim)
        nn.init.xavier_uniform_(self.down.weight)
        nn.init.zeros_(self.down.bias)
        nn.init.zeros_(self.up.weight)  # identity at initialisation
        nn.init.zeros_(self.up.bias)

    def forward(self, x: Tensor) -> Tensor:
        return x + self.up(F.relu(self.down(self.layer_norm(x))))


class AdapterBank(nn.Module):
    """``layers`` adapters for each direction; ``active`` picks the set that runs."""

    def __init__(
        self, dim: int, bottleneck: int, layers: int, directions: Sequence[str], active: str
    ) -> None:
        super().__init__()
        keys = list(dict.fromkeys(direction_key(d) for d in directions))
        self.sets = nn.ModuleDict(
            {key: nn.ModuleList(Adapter(dim, bottleneck) for _ in range(layers)) for key in keys}
        )
        self.active = ""
        self.select(active)

    def select(self, direction: str) -> None:
        key = direction_key(direction)
        if key not in self.sets:
            known = ", ".join(k.replace("_", "-") for k in self.sets)
            raise ValueError(f"no adapters for direction {direction!r}; the model has: {known}")
        self.active = key

    def forward(self, index: int, x: Tensor) -> Tensor:
        return self.sets[self.active][index](x)  # type: ignore[index]
