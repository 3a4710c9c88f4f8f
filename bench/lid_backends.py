"""Language-ID backends side by side on raw WMT test sets: what each keeps of clean lines,
what it drops of a close third language put in the same column, and how fast it is.

For each language pair, up to ``--lines`` clean pairs (WMT21-23 sources and references, both
directions; en-liv: WMT22's) and as many sentences of a close third language per side (cs or hr
in an English column, zh in a Japanese one, ja in a Chinese one, ru in a Ukrainian one, hr in a
Czech one; none for Livonian). Every backend of the ``langid`` filter (langid.py, fastText
lid.176, heliport; a fastText model file with ``--fasttext-model PATH``) scores them among every
language it knows, through the filter itself, one core. Printed per pair, side and backend:
clean lines kept and third-language lines dropped at ``max_odds`` 1, 3 and 10, the smallest
``max_odds`` that keeps >= 97 % of the clean lines, and lines/s. Needs ../shared/data.

    .venv/bin/python bench/lid_backends.py [--pairs en-ja,zh-en,...] [--lines 2000]
        [--fasttext-model lid201-model.bin]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import time
from pathlib import Path

import numpy as np
from _cleaning_data import THIRD, human_pairs, monolingual

PAIRS = ("en-ja", "zh-en", "uk-en", "cs-en", "en-hr", "en-liv")
ODDS = (1.0, 3.0, 10.0)
LADDER = (1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 30.0, 100.0, 1000.0)
KEEP = 0.97


def third_language(lang: str, pair: tuple[str, str]) -> str | None:
    return next((x for x in THIRD.get(lang, ()) if x not in pair), None)


def backends(fasttext_model: str | None) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {
        "langid.py": {"backend": "langid"},
        "lid.176": {"backend": "fastlangdetect"},
        "heliport": {"backend": "heliport"},
    }
    if fasttext_model:
        digest = hashlib.sha256(Path(fasttext_model).read_bytes()).hexdigest()
        name = Path(fasttext_model).name
        out[name] = {"backend": "fasttext", "model": fasttext_model, "sha256": digest}
    return out


def expected_probs(plugin: object, texts: list[str]) -> tuple[np.ndarray, float]:
    """(len(texts), n) probabilities of the allowed labels and the seconds they took."""
    start = time.perf_counter()
    probs = plugin.probabilities(texts)  # type: ignore[attr-defined]
    return probs, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--pairs", default=",".join(PAIRS))
    parser.add_argument("--lines", type=int, default=2000)
    parser.add_argument("--fasttext-model", default=None)
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from mtcore.contracts.registry import load_registry
    from mtcore_plugins.filters.langid import expected_scores

    registry = load_registry()
    chosen = backends(args.fasttext_model)
    summary: list[str] = []
    for pair_name in args.pairs.split(","):
        a, b = pair_name.split("-")
        pairs = human_pairs(a, b)[: args.lines]
        print(f"\n== {a}-{b}: {len(pairs)} clean pairs", flush=True)
        print(
            f"   {'side':5} {'backend':12} {'label':6} "
            + " ".join(f"{'keep@' + format(o, 'g'):>8}" for o in ODDS)
            + f" {'third':>6} "
            + " ".join(f"{'drop@' + format(o, 'g'):>8}" for o in ODDS)
            + f" {'odds>=97%':>9} {'lines/s':>9}"
        )
        for side, lang in enumerate((a, b)):
            clean = [p[side] for p in pairs]
            other = third_language(lang, (a, b))
            third = monolingual(other)[: args.lines] if other else []
            for label, config in chosen.items():
                plugin = registry.load("filters", "langid").from_dict(config)
                try:
                    plugin.setup((a, b))
                except Exception:  # a backend without this language
                    print(f"   {lang:5} {label:12} -  (no label for {a} or {b})")
                    continue
                plugin.probabilities(clean[:20])  # load the model before timing
                column = plugin.allowed.index(plugin.expected[side])
                probs, seconds = expected_probs(plugin, clean)
                kept = [float((expected_scores(probs, column, o) > 0).mean()) for o in ODDS]
                enough = next(
                    (o for o in LADDER if (expected_scores(probs, column, o) > 0).mean() >= KEEP),
                    None,
                )
                dropped = ["-"] * len(ODDS)
                if third:
                    third_probs, _ = expected_probs(plugin, third)
                    dropped = [
                        f"{100 * (expected_scores(third_probs, column, o) == 0).mean():7.1f}%"
                        for o in ODDS
                    ]
                print(
                    f"   {lang:5} {label:12} {plugin.expected[side]:6} "
                    + " ".join(f"{100 * k:7.1f}%" for k in kept)
                    + f" {other or '-':>6} "
                    + " ".join(f"{d:>8}" for d in dropped)
                    + f" {format(enough, 'g') if enough else '>1000':>9}"
                    + f" {len(clean) / seconds:9.0f}",
                    flush=True,
                )
                summary.append(
                    f"{a}-{b} {lang} {label}: keep@1 {100 * kept[0]:.1f} %, "
                    f"odds for 97 % {format(enough, 'g') if enough else '>1000'}"
                )
    print("\nsummary:")
    for line in summary:
        print(f"  {line}")


if __name__ == "__main__":
    main()
