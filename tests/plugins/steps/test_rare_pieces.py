"""The binarize step's rare-subword filter (Xiaomi §4.1, ``min_piece_count``) on the IWSLT20
Zh-Ja pairs: which pairs go, what is counted, and that the setting stays out of the hash of
binarize steps that leave it at 1."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from mtcore.contracts.registry import load_registry
from mtcore.contracts.step import Artifact
from mtcore.data.corpus import CorpusWriter
from mtcore_plugins.steps.binarize import BinarizeStep, mmap_length
from mtcore_plugins.steps.spm import SentencePieceStep
from tests.support.data import SHARED
from tests.support.steps import make_ctx

IWSLT = SHARED / "zh-ja" / "didi+iwslt2020_open_domain_translation" / "eval" / "data"
pytestmark = pytest.mark.skipif(not IWSLT.is_dir(), reason=f"real data not found at {IWSLT}")


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """The 5,304 pairs (less 300 for validation) and a joint BPE model of 4,000 pieces (3,000
    of them characters): 47 % of the pairs hold a piece that occurs fewer than 6 times."""
    root = tmp_path_factory.mktemp("rare")
    zh = (IWSLT / "ref.zh").read_text(encoding="utf-8").splitlines()
    ja = (IWSLT / "ref.ja").read_text(encoding="utf-8").splitlines()
    for name, rows in (("train", slice(300, None)), ("valid", slice(0, 300))):
        with CorpusWriter(root / name, ("zh", "ja")) as writer:
            writer.write_all(zip(zh[rows], ja[rows], strict=True))
    step = SentencePieceStep.from_dict({"model_type": "bpe", "vocab_size": 4000})
    step.run(make_ctx(root / "spm", "spm", corpus=root / "train"))
    return root / "train", root / "valid", root / "spm" / "model"


def test_pairs_with_a_rare_piece_on_either_side_are_dropped(
    prepared: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    import sentencepiece as spm

    train, valid, model_dir = prepared
    model = spm.SentencePieceProcessor(model_file=str(model_dir / "spm.model"))
    sides = {
        lang: (train / f"corpus.{lang}").read_text(encoding="utf-8").splitlines()
        for lang in ("zh", "ja")
    }
    pieces = {lang: model.encode(lines, out_type=str) for lang, lines in sides.items()}
    counts = {lang: Counter(p for line in pieces[lang] for p in line) for lang in pieces}
    rare = {lang: {p for p, n in counts[lang].items() if n < 6} for lang in counts}
    keep = [
        i
        for i, (zh, ja) in enumerate(zip(pieces["zh"], pieces["ja"], strict=True))
        if not rare["zh"].intersection(zh) and not rare["ja"].intersection(ja)
    ]
    total = len(sides["zh"])
    # the case is worth testing: both kinds of pair are many
    assert 0.2 * total < total - len(keep) < 0.8 * total, (len(keep), total)

    ctx = make_ctx(tmp_path, "binarize", train=train, valid=valid, spm=model_dir)
    BinarizeStep.from_dict({"src": "zh", "tgt": "ja", "min_piece_count": 6}).run(ctx)
    data = tmp_path / "data"
    meta = Artifact.open(data).meta
    assert meta["lines"] == {"train": len(keep), "valid": 300}
    assert meta["rare_pieces"] == {"min_count": 6, "pairs_dropped": total - len(keep)}
    assert mmap_length(data / "train.zh-ja.zh.idx") == len(keep)
    assert ctx.stats["binarize.rare_piece_pairs_dropped"] == total - len(keep)
    assert ctx.stats["binarize.rare_pieces.zh"] == len(rare["zh"])
    assert ctx.stats["binarize.rare_pieces.ja"] == len(rare["ja"])
    encoded = tmp_path / ".scratch" / "encoded"
    for lang in ("zh", "ja"):
        written = (encoded / f"train.{lang}").read_text(encoding="utf-8").splitlines()
        assert written == [" ".join(pieces[lang][i]) for i in keep]
    # the dictionary is built from the kept pairs: no rare piece of either side is in it
    dictionary = (data / "dict.zh.txt").read_text(encoding="utf-8").splitlines()
    entries = {line.split()[0] for line in dictionary}
    held = {p for lang in ("zh", "ja") for i in keep for p in pieces[lang][i]}
    gone = (rare["zh"] | rare["ja"]) - held
    assert held <= entries and gone and not gone & entries


def test_min_piece_count_is_hashed_only_when_set() -> None:
    registry = load_registry()
    plain = BinarizeStep.from_dict({"src": "zh", "tgt": "ja"}).identity(registry)
    one = BinarizeStep.from_dict({"src": "zh", "tgt": "ja", "min_piece_count": 1})
    six = BinarizeStep.from_dict({"src": "zh", "tgt": "ja", "min_piece_count": 6})
    assert "min_piece_count" not in str(plain) and one.identity(registry) == plain
    assert six.identity(registry) != plain
    with pytest.raises(ValueError, match="min_piece_count"):
        BinarizeStep.from_dict({"src": "zh", "tgt": "ja", "min_piece_count": 0})
