"""The ``train`` entry (:mod:`mtcore_plugins.steps._fairseq_entry`) for fairseq language models:

    python -m mtcore_plugins.steps._lm_entry train [entry options] -- FAIRSEQ_TRAIN_ARGS...

fairseq 0.12's ``TokenBlockDataset`` (every ``language_modeling`` dataset) asks numpy for
``np.compat.long``, which numpy 2 removed; the alias (``int64``, what it named on 64-bit
platforms) is put back before fairseq runs.
"""

from __future__ import annotations

import types


def restore_numpy_compat() -> None:
    import numpy

    if "compat" not in vars(numpy):
        numpy.compat = types.SimpleNamespace(long=numpy.int64)  # type: ignore[attr-defined]


def main() -> None:
    restore_numpy_compat()
    from mtcore_plugins.steps._fairseq_entry import main as entry

    entry()


if __name__ == "__main__":
    main()
