"""How a moldable step's time falls with its width (a data-parallel training, a step of
independent shards), and the widths it may run at."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from mtcore.contracts.errors import MtcoreError
from mtcore.contracts.resources import Resources

# Data-parallel efficiency per doubling of a training's width (its time at 2w GPUs over half
# its time at w). Megatron-LM (Shoeybi et al. 2019, arXiv:1909.08053, abstract and §5.1)
# sustains 76 % of linear scaling from one V100 to 512 (32 DGX-2H nodes): nine doublings,
# 0.76 ** (1 / 9) = 0.970 each, which is the default within a node (NVLink). Across nodes the
# all-reduce leaves NVLink for the network: NCCL's ring all-reduce moves 2 (n - 1) / n of the
# gradients over the slowest link (nccl-tests doc/PERFORMANCE.md, "bus bandwidth"), so the
# default there is lower, 0.95 a doubling, a conservative reading of the same figure (not a
# measurement). Ott et al. 2018 ("Scaling Neural Machine Translation", WMT, §3-4) train
# fairseq's Transformer-big on 16 machines of 8 V100s (128 GPUs) with gradients all-reduced
# while the backward pass runs, the setup a training here runs in; they report times to a
# BLEU, not throughput, so no per-doubling figure is taken from them.
NODE_EFFICIENCY = 0.97
CLUSTER_EFFICIENCY = 0.95
GPUS_PER_NODE = 8
# A step of independent shards (a translation, Step.widens_by_shards) exchanges nothing between
# its ranks: each loads the models once (tens of seconds against the hours of a paper volume)
# and decodes its share, so its time at w GPUs is its time on one over w (1.0 a doubling).
SHARD_EFFICIENCY = 1.0


@dataclass(frozen=True)
class Scaling:
    """How a moldable step's time falls with its width: ``node`` is the efficiency of one
    doubling of a training's GPUs within a machine, ``cluster`` of one doubling across machines
    (of ``gpus_per_node`` GPUs each), ``shards`` of one doubling of a step of independent
    shards."""

    node: float = NODE_EFFICIENCY
    cluster: float = CLUSTER_EFFICIENCY
    gpus_per_node: int = GPUS_PER_NODE
    shards: float = SHARD_EFFICIENCY

    @classmethod
    def parse(cls, text: str) -> Scaling:
        """``node=0.95,cluster=0.9,shards=1,gpus_per_node=8`` (any may be left out)."""
        values: dict[str, Any] = {}
        for part in text.split(","):
            key, sep, value = part.strip().partition("=")
            try:
                if key in ("node", "cluster", "shards") and sep and 0 < float(value) <= 1:
                    values[key] = float(value)
                    continue
                if key == "gpus_per_node" and sep and int(value) >= 1:
                    values[key] = int(value)
                    continue
            except ValueError:
                pass
            raise MtcoreError(
                f"--scaling {text!r}: {part.strip()!r} is not node=E, cluster=E, shards=E "
                "(0 < E <= 1) or gpus_per_node=N (e.g. --scaling node=0.95,cluster=0.9)"
            )
        return cls(**values)

    def efficiency(self, width: int, sharded: bool = False) -> float:
        """Speed at ``width`` GPUs over ``width`` times the speed at one; ``sharded``: of a
        step of independent shards (``shards`` a doubling, wherever the GPUs are)."""
        if sharded:
            return float(self.shards ** math.log2(max(1, width)))
        inside = min(width, self.gpus_per_node)
        across = max(1.0, width / self.gpus_per_node)
        return float(self.node ** math.log2(inside) * self.cluster ** math.log2(across))

    def seconds(self, seconds_at_1: float, width: int, sharded: bool = False) -> float:
        """A moldable step's seconds at ``width`` GPUs from its seconds on one."""
        return seconds_at_1 / (width * self.efficiency(width, sharded))


def valid_widths(
    need: Resources,
    batches: float | None,
    capacity_gpus: int,
    scaling: Scaling,
    sharded: bool = False,
) -> list[int]:
    """The widths a moldable step may run at, narrowest first: within its range and the GPUs
    there are, for a training dividing its batches of an update (each rank accumulates the same
    number), and across machines only whole machines. A training without ``batches`` (no
    ``batch_tokens``) or a step with a fixed width has only its own; a ``sharded`` step (of
    independent shards) any."""
    if not need.moldable or not (batches or sharded):
        return [need.gpus]
    per_node = scaling.gpus_per_node
    out = [
        w
        for w in range(need.gpus, min(need.gpus_max, capacity_gpus) + 1)
        if (sharded or int(batches or 1) % w == 0) and (w <= per_node or w % per_node == 0)
    ]
    return out or [need.gpus]
