"""Write the tests' tiny random COMET-22 and CometKiwi models (tests/support/tiny_comet.py) to a
directory, for a small-profile run where no real model can be had (docs/results.md):

    .venv/bin/python scripts/tiny_metrics.py /tmp/tm
    .venv/bin/mtcore run recipes/hwtsc.yaml -p small \\
        --set vars.comet22=/tmp/tm/comet --set vars.comet22_encoder=/tmp/tm/encoder \\
        --set vars.cometkiwi=/tmp/tm/cometkiwi --set vars.cometkiwi_encoder=/tmp/tm/encoder

Their scores are those of random weights (hidden size 32): they show that every stage is
scored, not how good a stage is. The encoder's SentencePiece model is trained on WMT22 lines
from ../shared/data.
"""

from __future__ import annotations

import sys
from pathlib import Path


def main() -> None:
    if len(sys.argv) != 2:
        raise SystemExit("usage: tiny_metrics.py DIR")
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from tests.support import tiny_comet

    for kind, path in tiny_comet.build_all(Path(sys.argv[1]).resolve()).items():
        print(f"{kind}: {path}")


if __name__ == "__main__":
    main()
