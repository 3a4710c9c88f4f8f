"""KenLM glue shared by the kenlm step, the lm and moore_lewis filters, the moore_lewis selector
and the ngram_lm scorer: the text KenLM sees, a kenlm step's output, loading a model once per
process, perplexity."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mtcore.api import Artifact, PluginError, worker_memo

TOKENIZATION = "mtcore-segmenter-1"
"""Names :func:`lm_line`'s rules in ``artifact.json``; a filter refuses a model whose training
text was tokenized differently."""


# KenLM's own symbols: lmplz refuses them inside the text (and `--skip_symbols` would silently
# turn them into spaces), so they are dropped from training and query text alike.
SPECIAL = frozenset({"<s>", "</s>", "<unk>"})


def lm_line(text: str, lang: str) -> str:
    """The space-joined tokens KenLM sees for ``text``: segmenter words for ja/zh
    (:func:`mtcore_plugins.common.text.tokens.tokens`), whitespace words otherwise."""
    from mtcore_plugins.common.text.tokens import tokens

    # Re-split: KenLM splits on ASCII whitespace only, so no token may carry other spaces.
    words = (w for t in tokens(text, lang) for w in t.split())
    return " ".join(w for w in words if w not in SPECIAL)


def log10_perplexity(model: Any, line: str) -> float:
    """log10 of the perplexity of an already tokenized line, ``</s>`` included (as
    ``kenlm.Model.perplexity``, without the round trip through ``10**``)."""
    words = line.count(" ") + 1 if line else 0  # lm_line joins single spaces
    return float(-model.score(line, bos=True, eos=True) / (words + 1))


def load_model(path: Path) -> Any:
    """A ``kenlm.Model``, loaded once per process (the binary is memory-mapped)."""
    key = str(path)

    def build() -> Any:
        try:
            import kenlm
        except ImportError:
            raise PluginError(
                "filter 'lm' needs the `kenlm` Python module; build it with "
                "`bash scripts/build_kenlm.sh .venv`"
            ) from None
        return kenlm.Model(key)

    return worker_memo(("kenlm", key), build)


def kenlm_meta(folder: Path, role: str, plugin: str = "filter 'lm'") -> dict[str, Any]:
    """The ``artifact.json`` of a kenlm step's output connected to ``role``; a clear error
    naming ``plugin`` when it is not one, or when its text was tokenized otherwise."""
    meta_file = folder / "artifact.json"
    artifact = Artifact.open(folder)
    meta = artifact.meta
    if meta.get("type") != "kenlm":
        raise PluginError(
            f"{plugin}: {folder} is not the output of a kenlm step (artifact type "
            f"{meta.get('type')!r}); connect the role {role!r} to a kenlm step"
        )
    if meta.get("tokenization") != TOKENIZATION:
        raise PluginError(
            f"{plugin}: {meta_file} was trained on {meta.get('tokenization')!r} tokens, "
            f"queries are {TOKENIZATION!r} tokens; rerun the kenlm step"
        )
    artifact.files()
    artifact.names("langs")
    return meta
