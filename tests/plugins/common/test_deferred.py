"""fairseq imported with its statistics libraries deferred (plugins/common/fairseq/deferred.py):
they are not loaded by the import, every deferred name still works when used, and the real modules
are what a later import gets."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import sys
from mtcore_plugins.common.fairseq.deferred import deferred
with deferred():
    import fairseq
loaded = sorted(m for m in ("sklearn", "sklearn.metrics", "scipy.stats") if m in sys.modules)
print("loaded:", loaded)
from fairseq.criterions import sentence_prediction as sp
from fairseq.tasks import audio_classification as ac
print(sp.f1_score([1, 0, 1], [1, 1, 1]))
print(round(float(sp.pearsonr([1, 2, 3], [1, 2, 4])[0]), 4))
print(ac.sklearn_metrics.roc_curve([0, 1], [0.1, 0.9])[0].tolist())
import scipy.stats
import sklearn.metrics
print(type(sys.modules["sklearn.metrics"]).__name__, type(scipy.stats).__name__)
"""


def test_fairseq_imports_without_its_statistics_libraries_and_they_work_when_used() -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert out == [
        "loaded: []",
        "0.8",  # F1 of [1,0,1] against [1,1,1]: precision 1, recall 2/3
        "0.982",
        "[0.0, 0.0, 1.0]",
        "module module",  # the real modules, not the stand-ins
    ]
