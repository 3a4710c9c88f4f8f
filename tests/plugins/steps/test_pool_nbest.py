"""The pool_nbest step (Xiaomi §3.4: the L2R and R2L ensembles' n-best lists pooled before
reranking) on n-best lists of real Zh-Ja pairs: order, duplicates, counts, errors, and a rerank
step reading the pool."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mtcore.contracts.errors import DataError
from mtcore.contracts.registry import load_registry
from mtcore.contracts.step import Artifact, StepContext
from mtcore_plugins.executors.local import LocalExecutor
from mtcore_plugins.steps._nbest import Entry, NBestWriter, read_nbest
from mtcore_plugins.steps.pool_nbest import PoolNBestStep
from mtcore_plugins.steps.rerank import RerankStep
from tests.support.data import SHARED

IWSLT = SHARED / "zh-ja" / "didi+iwslt2020_open_domain_translation" / "eval" / "data"
pytestmark = pytest.mark.skipif(not IWSLT.is_dir(), reason=f"real data not found at {IWSLT}")


def pairs(n: int) -> tuple[list[str], list[str]]:
    zh = (IWSLT / "ref.zh").read_text(encoding="utf-8").splitlines()[:n]
    ja = (IWSLT / "ref.ja").read_text(encoding="utf-8").splitlines()[:n]
    return zh, ja


def write_nbest(path: Path, sources: list[str], lists: list[list[str]], tgt: str = "ja") -> Path:
    writer = NBestWriter(path, "zh", tgt)
    for i, (source, texts) in enumerate(zip(sources, lists, strict=True)):
        writer.write(Entry(i, source, [(t, {"fwd": -0.1 * rank}) for rank, t in enumerate(texts)]))
    writer.close(n=max(len(t) for t in lists))
    return path


def context(work: Path, step_id: str = "pool", **inputs: Path) -> StepContext:
    return StepContext(
        step_id=step_id,
        kind=step_id,
        step_hash="x",
        work=work,
        inputs={role: Artifact.open(path) for role, path in inputs.items()},
        executor=LocalExecutor(LocalExecutor.Config(workers=1)),
        registry=load_registry(),
        show_progress=False,
    )


def variants(ja: str) -> list[str]:
    """Four hypotheses of a Japanese reference: itself, cut at the end, cut at the start and
    with its last character doubled (the ways an L2R and an R2L decoder differ)."""
    return [ja, ja[:-2], ja[2:], ja + ja[-1:]]


def test_pool_keeps_each_text_once_in_list_order(tmp_path: Path) -> None:
    zh, ja = pairs(40)
    l2r = [variants(line)[:3] for line in ja]  # reference, end cut, start cut
    r2l = [[v[2], v[3], v[0]] for v in map(variants, ja)]  # start cut, doubled, reference
    ctx = context(
        tmp_path / "out",
        nbest=write_nbest(tmp_path / "l2r", zh, l2r),
        nbest2=write_nbest(tmp_path / "r2l", zh, r2l),
    )
    PoolNBestStep.from_dict({}).run(ctx)
    entries = list(read_nbest(tmp_path / "out/nbest/nbest.jsonl"))
    assert [e.source for e in entries] == zh
    distinct = 0
    for entry, line, a, b in zip(entries, ja, l2r, r2l, strict=True):
        texts = [text for text, _ in entry.hyps]
        expected = list(dict.fromkeys(a + b))  # the L2R list's first, then the R2L list's new
        assert texts == expected and texts[0] == line
        assert all(scores == {} for _, scores in entry.hyps)  # no half-known columns
        distinct += len(texts)
    assert ctx.stats["pool.lines"] == 40
    assert ctx.stats["pool.hyps.nbest"] == ctx.stats["pool.hyps.nbest2"] == 120
    assert ctx.stats["pool.hyps_out"] == distinct
    assert ctx.stats["pool.duplicates"] == 240 - distinct
    # every line has two texts in both lists (some lines are short enough for more to collide)
    assert 80 <= ctx.stats["pool.duplicates"] < 120
    meta = Artifact.open(tmp_path / "out/nbest").meta
    assert meta["type"] == "nbest" and meta["lines"] == 40 and meta["pooled"] == ["nbest", "nbest2"]
    assert meta["features"] == [] and meta["n"] == max(len(e.hyps) for e in entries)


@pytest.mark.parametrize(
    ("second", "error"),
    [
        # another direction's n-best
        ("ja_zh", "is zh->zh with 10 entries, nbest zh->ja with 10"),
        # the n-best of another corpus (different sources at entry 0)
        ("other", "entry 0 translates"),
        # fewer entries
        ("short", "with 9 entries, nbest zh->ja with 10"),
        # a corpus where an n-best list belongs
        ("corpus", "is not an n-best list"),
    ],
)
def test_pool_errors(second: str, error: str, tmp_path: Path) -> None:
    zh, ja = pairs(20)
    lists = [variants(line) for line in ja]
    first = write_nbest(tmp_path / "a", zh[:10], lists[:10])
    made: dict[str, Any] = {
        "ja_zh": lambda: write_nbest(tmp_path / "b", zh[:10], lists[:10], tgt="zh"),
        "other": lambda: write_nbest(tmp_path / "b", zh[10:20], lists[10:20]),
        "short": lambda: write_nbest(tmp_path / "b", zh[:9], lists[:9]),
        "corpus": lambda: _corpus(tmp_path / "b", zh[:10], ja[:10]),
    }
    with pytest.raises(DataError, match=error):
        PoolNBestStep.from_dict({}).run(
            context(tmp_path / "out", nbest=first, nbest2=made[second]())
        )


def _corpus(path: Path, zh: list[str], ja: list[str]) -> Path:
    from mtcore.data.corpus import CorpusWriter

    with CorpusWriter(path, ("zh", "ja")) as writer:
        writer.write_all(zip(zh, ja, strict=True))
    return path


def test_rerank_scores_every_pooled_hypothesis(tmp_path: Path) -> None:
    """The rerank step on a pool: each feature is computed for each hypothesis of both lists
    (none of them inherits a 0 for a column its list did not have), and the choice can come
    from the second list."""
    zh, ja = pairs(30)
    l2r = [[line[: len(line) // 2]] for line in ja]  # half the reference
    r2l = [[line] for line in ja]  # the reference: more characters per source character
    PoolNBestStep.from_dict({}).run(
        context(
            tmp_path / "pool",
            nbest=write_nbest(tmp_path / "l2r", zh, l2r),
            nbest2=write_nbest(tmp_path / "r2l", zh, r2l),
        )
    )
    step = RerankStep.from_dict(
        {"features": [{"name": "length_ratio", "unit": "char"}], "weights": {"length_ratio": 1}}
    )
    ctx = context(tmp_path / "rr", "rerank", nbest=tmp_path / "pool/nbest")
    step.run(ctx)
    entries = list(read_nbest(tmp_path / "rr/nbest/nbest.jsonl"))
    assert all(set(scores) == {"length_ratio"} for e in entries for _, scores in e.hyps)
    hyp = (tmp_path / "rr/hyp/hyp.ja").read_text(encoding="utf-8").splitlines()
    best = [max(e.hyps, key=lambda h: h[1]["length_ratio"])[0] for e in entries]
    assert hyp == best == ja  # every choice from the second list
    report = json.loads((tmp_path / "rr/weights/weights.json").read_text())
    assert report["features"] == ["length_ratio"]
