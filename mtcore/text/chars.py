"""Characters a corpus line is checked for: the byte-order mark and the line breaks other than
``\\n`` that some reader would split a line at."""

from __future__ import annotations

import re

BOM = "\ufeff"
# Characters some reader treats as a line end (Python's universal newlines, str.splitlines).
INNER_BREAKS = re.compile("[\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")
