"""Language-specific adapters (Bapna & Firat, 2019; Yishu §2.2.1): after every encoder and
decoder layer, a residual bottleneck ``x + W_up ReLU(W_down LN(x))``, one set of adapters per
translation direction. The up-projection starts at zero, so adding adapters to a trained model
leaves its outputs unchanged until the adapters are trained."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch.nn.functional as F
from fairseq.modules import LayerNorm
from torch import Tensor, nn

from mtcore_plugins.common.fairseq.model_extension import ModelExtension

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


class AdapterExtension(ModelExtension):
    """``--adapter-dim B --adapter-directions en-ja,ja-en``: an adapter set per direction after
    every layer, the set chosen by the task's pair (or ``--adapter-direction``);
    ``--adapters-only`` freezes everything else (Yishu §2.2.1's adapter training)."""

    name = "adapters"
    order = 30
    ctranslate2 = "language adapters (an extra bottleneck after every layer)"
    needs_every_layer = True
    args = {
        "adapter_dim": ({"type": int, "metavar": "B", "help": "adapter bottleneck; 0 = none"}, 0),
        "adapter_directions": (
            {"type": str, "metavar": "SRC-TGT,...", "help": "one adapter set per direction"},
            "",
        ),
        "adapter_direction": (
            {"type": str, "metavar": "SRC-TGT", "help": "adapter set to use (default: task pair)"},
            "",
        ),
        "adapters_only": (
            {"action": "store_true", "help": "train the adapters only; freeze the base model"},
            False,
        ),
    }

    def active(self, args: Any) -> bool:
        return int(getattr(args, "adapter_dim", 0) or 0) > 0 or bool(
            getattr(args, "adapters_only", False)
        )

    def check(self, args: Any, active: Sequence[str]) -> None:
        if getattr(args, "adapters_only", False) and not getattr(args, "adapter_dim", 0):
            raise ValueError("--adapters-only needs --adapter-dim > 0")

    def prepare(self, args: Any, task: Any) -> None:
        args.adapter_active = active_direction(args, task)

    def attach(self, side: str, stack: Any, cfg: Any) -> None:
        dim = stack.embed_tokens.embedding_dim if side == "encoder" else stack.embed_dim
        active = getattr(cfg, "adapter_active", "") or cfg.adapter_direction
        listed = tuple(d for d in (cfg.adapter_directions or "").split(",") if d.strip())
        stack.adapters = AdapterBank(
            dim, cfg.adapter_dim, len(stack.layers), listed or (active,), active
        )

    def after_layer(self, stack: Any, index: int, states: list[Any], x: Any) -> Any:
        return stack.adapters(index, x)

    def built(self, model: Any, args: Any) -> None:
        if getattr(args, "adapters_only", False):
            freeze_all_but_adapters(model)

    def fill_state(self, model: Any, state: dict[str, Any]) -> dict[str, Any]:
        """A checkpoint without adapters (the base model, Yishu §2.2.1: adapters are added
        after training the bilingual model) loads with the adapters as initialised."""
        own = model.state_dict()
        missing = [k for k in own if ".adapters." in k and k not in state]
        if not missing:
            return state
        return {**state, **{k: own[k] for k in missing}}


def set_adapter_direction(model: Any, direction: str) -> None:
    """Switch both adapter banks of ``model`` to ``direction`` (``en-ja``)."""
    for side in (model.encoder, model.decoder):
        if getattr(side, "adapters", None) is None:
            raise ValueError("this model has no adapters (--adapter-dim 0)")
        side.adapters.select(direction)


def active_direction(args: Any, task: Any) -> str:
    """The task's ``src-tgt`` when the model has adapters for it, else ``--adapter-direction``."""
    cfg = getattr(task, "cfg", None)
    src = getattr(cfg, "source_lang", None) or getattr(args, "source_lang", None)
    tgt = getattr(cfg, "target_lang", None) or getattr(args, "target_lang", None)
    pair = f"{src}-{tgt}" if src and tgt else ""
    directions = [d.strip() for d in (args.adapter_directions or "").split(",") if d.strip()]
    if pair and (not directions or pair in directions):
        return pair
    if args.adapter_direction:
        return str(args.adapter_direction)
    raise ValueError(
        f"no adapter set for the task's direction {pair or '(unknown)'}: the model has "
        f"{', '.join(directions) or 'none'}; pass --adapter-direction"
    )


def freeze_all_but_adapters(model: Any) -> None:
    """Adapters-only training: fairseq's trainer optimises only parameters that require grad."""
    for name, param in model.named_parameters():
        param.requires_grad = ".adapters." in f".{name}"
