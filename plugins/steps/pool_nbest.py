"""Pools the n-best lists of several decoders of the same source lines into one (Xiaomi §3.4:
"We first use the S2T-L2R and S2T-R2L ensemble systems to generate more diverse translation
hypotheses for a source sentence").

Inputs ``nbest`` and ``nbest2`` ... ``nbest4``: translate steps' ``nbest`` outputs of the same
corpus in the same direction (an R2L decoder's are already in reading order). Entry ``i`` of the
output holds the hypotheses of entry ``i`` of every input, the inputs in role order, each list
in its decoder's order; a text that an earlier list (or the same list) already holds is kept
once, where it first came.

The pooled hypotheses carry no score columns: each list's ``fwd`` is its own decoder's score,
which the other list's hypotheses lack, and a column known for some hypotheses only would weigh
as 0 for the others. The rerank step that reads the pool computes every feature for every
hypothesis by forced decoding (the ``forward`` scorer with each decoder's models).

Counts: ``pool.lines``, ``pool.hyps.<role>`` (read), ``pool.duplicates`` (dropped as equal to an
earlier text), ``pool.hyps_out``.
"""

from __future__ import annotations

from itertools import zip_longest
from typing import ClassVar

from mtcore.api import DataError, PluginConfig, Step, StepContext
from mtcore_plugins.steps._nbest import Entry, NBestWriter, open_nbest, read_nbest

ROLES = ("nbest", "nbest2", "nbest3", "nbest4")


class PoolNBestStep(Step[PluginConfig]):
    """n-best lists of one corpus -> one n-best list of their distinct hypotheses per line (no
    settings)."""

    name = "pool_nbest"
    inputs: ClassVar[dict[str, bool]] = {"nbest": True, "nbest2": True, "nbest3": False,
                                         "nbest4": False}  # fmt: skip
    outputs: ClassVar[tuple[str, ...]] = ("nbest",)
    streams: ClassVar[tuple[str, ...]] = ROLES

    def run(self, ctx: StepContext) -> None:
        roles = [role for role in ROLES if role in ctx.inputs]
        lists = [open_nbest(ctx.inputs[role], role, ctx.step_id) for role in roles]
        first = lists[0].meta
        for role, artifact in zip(roles[1:], lists[1:], strict=True):
            meta = artifact.meta
            if (meta.get("src"), meta.get("tgt"), meta.get("lines")) != (
                first.get("src"), first.get("tgt"), first.get("lines"),
            ):  # fmt: skip
                raise DataError(
                    f"{ctx.step_id}: {role} is {meta.get('src')}->{meta.get('tgt')} with "
                    f"{meta.get('lines')} entries, nbest {first.get('src')}->{first.get('tgt')} "
                    f"with {first.get('lines')}: pool n-best lists of one corpus and direction"
                )
        writer = NBestWriter(ctx.output("nbest"), str(first["src"]), str(first["tgt"]))
        readers = [read_nbest(a.file("file", "nbest.jsonl")) for a in lists]
        widest = 0
        for entries in zip_longest(*readers):
            if any(entry is None for entry in entries):
                raise DataError(f"{ctx.step_id}: the n-best files have different entry counts")
            pooled = pool(ctx, roles, entries)
            widest = max(widest, len(pooled.hyps))
            writer.write(pooled)
        writer.close(n=widest, pooled=roles)
        ctx.stats.add("pool.lines", writer.lines)


def pool(ctx: StepContext, roles: list[str], entries: tuple[Entry, ...]) -> Entry:
    """One entry of the distinct texts of ``entries`` (one per role), first occurrence first."""
    head = entries[0]
    for role, entry in zip(roles[1:], entries[1:], strict=True):
        if entry.source != head.source:
            raise DataError(
                f"{ctx.step_id}: entry {head.id} translates {head.source[:60]!r} in nbest and "
                f"{entry.source[:60]!r} in {role}: the lists come from different corpora"
            )
    seen: dict[str, None] = {}
    for role, entry in zip(roles, entries, strict=True):
        ctx.stats.add(f"pool.hyps.{role}", len(entry.hyps))
        for text, _ in entry.hyps:
            if text in seen:
                ctx.stats.add("pool.duplicates")
            seen.setdefault(text)
    ctx.stats.add("pool.hyps_out", len(seen))
    return Entry(head.id, head.source, [(text, {}) for text in seen])
