"""Format placeholders of UI strings (gettext catalogs): a translation must keep every
placeholder of its source, or the program formats it wrongly or crashes.

Placeholders recognised: printf conversions (``%s``, ``%d``, ``%'d``, ``%5.2f``, ``%ld``,
``%1$s``, ``%m``; position, flags, width and precision are dropped and conversions of one
argument type are the same, so ``%2$s %1$x`` matches ``%u %s``), Python
``%(name)s``, brace fields (``{}``, ``{0}``, ``{name}``, ``{0:.2f}``, ``{name!r}``), shell
variables (``$VAR``, ``${VAR}``) and Qt's ``%1``. ``%%``, ``{{`` and ``}}`` are escapes, not
placeholders.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np
from pydantic import Field

from mtcore.api import Filter, Pair, PluginConfig, PluginError

_PLACEHOLDER = re.compile(
    r"(?P<escape>%%|\{\{|\}\})"
    r"|%\((?P<named>\w+)\)[-+ 0#']*\d*(?:\.\d+)?(?P<named_conv>[diouxXeEfFgGcrsa])"
    r"|%(?:\d+\$)?[-+0#'I]*(?:\d+|\*(?:\d+\$)?)?(?:\.(?:\d+|\*(?:\d+\$)?))?"
    r"(?P<length>hh|h|ll|l|L|q|j|z|t|I64|I32)?(?P<conv>[diouxXeEfFgGaAcsSpnm])"
    r"|%(?P<qt>\d{1,2})(?!\d)"
    r"|\{(?P<field>\w*(?:\.\w+|\[\w+\])*)(?:![rsa])?(?::[^{}\n]*)?\}"
    r"|\$\{(?P<braced_var>\w+)\}|\$(?P<var>[A-Za-z_]\w*)"
)
# printf conversions that take the same argument type are the same placeholder (as msgfmt
# --check-format compares them): %x for %u, %G for %f.
_ARGUMENT = str.maketrans("ioxXEFgGaA", "duuuffffff")
# After removing placeholders: an accelerator suffix "(_F)" / "(&F)" or a mnemonic marker.
_ACCELERATOR = re.compile(r"[(（][_&][^\W_][)）]|[_&](?=[^\W_])")  # noqa: RUF001
_LETTER = re.compile(r"[^\W\d_]")


def placeholders(text: str) -> list[str]:
    """The placeholders of ``text`` in a canonical form, sorted."""
    found = []
    for m in _PLACEHOLDER.finditer(text):
        kind = m.lastgroup
        if kind == "escape":
            continue
        if kind == "named_conv":
            found.append(f"%({m['named']})")
        elif kind == "conv":
            found.append("%" + (m["length"] or "") + m["conv"].translate(_ARGUMENT))
        elif kind == "qt":
            found.append("%" + m["qt"])
        elif kind == "field":
            found.append("{" + m["field"] + "}")
        else:
            found.append("$" + (m["braced_var"] or m["var"]))
    return sorted(found)


def content_free(text: str) -> bool:
    """No letter once placeholders and accelerator marks are removed (``%s: %s``, ``(_F)``)."""
    return not _LETTER.search(_ACCELERATOR.sub("", _PLACEHOLDER.sub("", text)))


class PlaceholdersConfig(PluginConfig):
    max_unmatched: int = Field(
        0, ge=0, le=100, description="most placeholders on one side only that are kept"
    )
    reject_content_free: bool = Field(
        True,
        description="reject a pair where a side is nothing but placeholders, accelerators and "
        "punctuation (nothing to learn a translation from)",
    )


class PlaceholdersFilter(Filter[PlaceholdersConfig]):
    """Score: placeholders found on one side and not the other (as multisets); infinity for
    a content-free side with ``reject_content_free``."""

    name = "placeholders"
    higher_is_better = False

    def setup(self, langs: tuple[str, ...], resources: Any = None) -> None:
        if len(langs) != 2:
            raise PluginError(
                f"filter 'placeholders' compares the two sides of a pair, but the corpus has "
                f"{len(langs)} language(s) {list(langs)}: use it on a bilingual corpus"
            )
        super().setup(langs, resources)

    def score(self, batch: Sequence[Pair]) -> list[float]:
        free = self.config.reject_content_free
        out: list[float] = []
        for src, tgt in batch:
            if free and (content_free(src) or content_free(tgt)):
                out.append(math.inf)
                continue
            a, b = placeholders(src), placeholders(tgt)
            if a == b:
                out.append(0.0)
                continue
            ca, cb = Counter(a), Counter(b)
            out.append(float(sum((ca - cb).values()) + sum((cb - ca).values())))
        return out

    def accept(self, score: float) -> bool:
        return score <= self.config.max_unmatched

    def accept_block(self, scores: Any) -> np.ndarray:
        return np.asarray(scores, dtype=np.float64) <= self.config.max_unmatched
