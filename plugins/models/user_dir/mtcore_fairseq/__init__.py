"""fairseq ``--user-dir`` for mtcore: registers every mtcore architecture (``mtcore_*``), the
``mtcore_transformer`` model and the ``mtcore_rdrop`` criterion, and allows ``argparse.Namespace``
in torch's weights-only checkpoint loader (fairseq 0.12 keeps a legacy architecture's settings
as one), so plain ``fairseq-train`` / ``fairseq-generate --user-dir <this dir>`` load mtcore
checkpoints in a fresh process. fairseq imports this package by its directory name."""

from __future__ import annotations

from mtcore_plugins.common.fairseq.setup import add_safe_globals
from mtcore_plugins.models.presets import register_everything

register_everything()
add_safe_globals()
