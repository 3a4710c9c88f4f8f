"""R-Drop (Wu et al., 2021; HW-TSC §3.2) as the fairseq criterion ``mtcore_rdrop``.

Each batch runs twice through the model (concatenated, so one forward pass; dropout makes the
two copies differ). Per target token, as in Wu et al. Eq. (3):

    loss = LS-CE(P1) + LS-CE(P2) + alpha * 0.5 * (KL(P1 || P2) + KL(P2 || P1))

summed over non-padding tokens and normalised by the token count of one copy, like the
authors' fairseq criterion. The logged ``nll_loss`` is the mean of the two passes (comparable
with plain label-smoothed cross-entropy). In evaluation, with dropout off, the two passes are
identical, so validation computes the plain single-pass loss.
"""

from __future__ import annotations

from dataclasses import field, make_dataclass
from typing import Any

import torch
from fairseq.criterions import CRITERION_REGISTRY, register_criterion
from fairseq.criterions.label_smoothed_cross_entropy import (
    LabelSmoothedCrossEntropyCriterion,
    LabelSmoothedCrossEntropyCriterionConfig,
    label_smoothed_nll_loss,
)
from fairseq.logging import metrics
from torch import Tensor

CRITERION_NAME = "mtcore_rdrop"
HWTSC_ALPHA = 5.0  # HW-TSC §4: "R-Drop is used in model training, and we set parameter λ to 5"


# Built with make_dataclass: fairseq reads the field types at runtime, and this module's
# ``from __future__ import annotations`` would turn class-body annotations into strings.
RDropConfig = make_dataclass(
    "RDropConfig",
    [
        (
            "alpha",
            float,
            field(
                default=HWTSC_ALPHA,
                metadata={"help": "weight of the symmetric KL between the two dropout passes"},
            ),
        )
    ],
    bases=(LabelSmoothedCrossEntropyCriterionConfig,),
)


def symmetric_kl(lprobs_a: Tensor, lprobs_b: Tensor, pad_mask: Tensor) -> Tensor:
    """0.5 * (KL(a || b) + KL(b || a)) summed over the positions where ``pad_mask`` is False;
    inputs are log-probabilities (N, V), ``pad_mask`` (N,)."""
    a_to_b = (lprobs_a.exp() * (lprobs_a - lprobs_b)).sum(-1)
    b_to_a = (lprobs_b.exp() * (lprobs_b - lprobs_a)).sum(-1)
    return (0.5 * (a_to_b + b_to_a)).masked_fill(pad_mask, 0.0).sum()


def doubled(net_input: dict[str, Any]) -> dict[str, Any]:
    """The batch concatenated with itself along the batch dimension."""
    return {
        key: torch.cat([value, value], dim=0) if isinstance(value, Tensor) else value
        for key, value in net_input.items()
    }


class RDropCriterion(LabelSmoothedCrossEntropyCriterion):
    """Label-smoothed cross-entropy on two dropout passes plus alpha x symmetric KL."""

    def __init__(
        self,
        task: Any,
        sentence_avg: bool,
        label_smoothing: float,
        ignore_prefix_size: int = 0,
        report_accuracy: bool = False,
        alpha: float = HWTSC_ALPHA,
    ) -> None:
        super().__init__(task, sentence_avg, label_smoothing, ignore_prefix_size, report_accuracy)
        if alpha < 0:
            raise ValueError(f"--alpha must be >= 0, got {alpha}")
        self.alpha = alpha

    def forward(self, model: Any, sample: dict[str, Any], reduce: bool = True) -> Any:
        if not model.training:
            return super().forward(model, sample, reduce=reduce)
        net_output = model(**doubled(sample["net_input"]))
        lprobs = model.get_normalized_probs(net_output, log_probs=True)
        target = model.get_targets(sample, net_output)
        if self.ignore_prefix_size > 0:
            lprobs = lprobs[:, self.ignore_prefix_size :, :].contiguous()
            target = target[:, self.ignore_prefix_size :].contiguous()
        first, second = lprobs.chunk(2, dim=0)
        vocab = lprobs.size(-1)
        target = target.reshape(-1)
        ce_loss, nll_loss = label_smoothed_nll_loss(
            lprobs.reshape(-1, vocab),
            torch.cat([target, target]),
            self.eps,
            ignore_index=self.padding_idx,
            reduce=True,
        )
        kl_loss = symmetric_kl(
            first.reshape(-1, vocab), second.reshape(-1, vocab), target.eq(self.padding_idx)
        )
        loss = ce_loss + self.alpha * kl_loss
        sample_size = sample["target"].size(0) if self.sentence_avg else sample["ntokens"]
        logging_output = {
            "loss": loss.data,
            "nll_loss": nll_loss.data / 2,
            "kl_loss": kl_loss.data,
            "ntokens": sample["ntokens"],
            "nsentences": sample["target"].size(0),
            "sample_size": sample_size,
        }
        return loss, sample_size, logging_output

    @classmethod
    def reduce_metrics(cls, logging_outputs: list[dict[str, Any]]) -> None:
        super().reduce_metrics(logging_outputs)
        kl_sum = sum(float(log.get("kl_loss", 0)) for log in logging_outputs)
        ntokens = sum(log.get("ntokens", 0) for log in logging_outputs)
        if ntokens > 0 and any("kl_loss" in log for log in logging_outputs):
            metrics.log_scalar("kl_loss", kl_sum / ntokens, ntokens, round=4)


def register_rdrop() -> None:
    if CRITERION_NAME not in CRITERION_REGISTRY:
        register_criterion(CRITERION_NAME, dataclass=RDropConfig)(RDropCriterion)
