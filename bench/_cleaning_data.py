"""Labeled pairs for the cleaning-quality bench: clean human translations from ../shared/data
and copies of them with one injected defect each.

Every defect generator is a pure function of its inputs and a ``numpy`` random generator, so a
seed gives the same pairs. Generators that touch one side alternate between the two columns
(even rows the first, odd rows the second), so that both languages of a pair are exercised.
"""

from __future__ import annotations

import glob
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
WMT = "wmt-conference+wmt2[123]-news-systems"
ZHJA = DATA / "zh-ja" / "didi+iwslt2020_open_domain_translation" / "eval" / "data"
UNSPACED = frozenset({"ja", "zh"})
THIRD: dict[str, tuple[str, ...]] = {"en": ("cs", "hr"), "ja": ("zh", "en"), "zh": ("ja", "en")}
THIRD.update(uk=("ru",), ru=("uk",), cs=("hr", "en"))
"""Languages put in a column instead of its own, first one not in the pair: a close language
(same script) where there is one, as crawled data mixes them up."""
TRUNCATE_TO = 0.3
MARKUP = (
    ' <a href="https://example.com/news?id=17&amp;ref=home">Read more</a>',
    ' <div class="caption">',
    "<br/>",
    ' <span style="font-weight:bold">Photo</span>',
    "</p><p>",
    ' <img src="/images/logo.png" alt="">',
)
Pair = tuple[str, str]
_BREAKS = ("\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029", "\x00")


def _lines(path: str | Path) -> list[str]:
    return Path(path).read_text(encoding="utf-8").split("\n")[:-1]


def wmt_pairs(a: str, b: str) -> list[Pair]:
    """Source and first reference of the WMT21-23 news/general test sets, both directions, as
    (a, b) pairs."""
    pairs: list[Pair] = []
    for src, tgt in ((a, b), (b, a)):
        folder = f"{src}-{tgt}"
        for source in sorted(glob.glob(str(DATA / folder / WMT / "txt/sources/*"))):
            test = Path(source).name.split(".")[0]
            refs = sorted(
                glob.glob(str(Path(source).parents[1] / "references" / f"{test}.{folder}.ref.*"))
            )
            if not refs:
                continue
            for x, y in zip(_lines(source), _lines(refs[0]), strict=True):
                pairs.append((x, y) if src == a else (y, x))
    return pairs


def human_pairs(a: str, b: str) -> list[Pair]:
    """The clean pool of a pair: WMT test sets, or IWSLT20's zh-ja evaluation set; stripped
    (OpusFilter strips trailing spaces when it writes), exact duplicates and pairs with an
    empty side or an inner line break removed."""
    if {a, b} == {"zh", "ja"}:
        zh, ja = _lines(ZHJA / "ref.zh"), _lines(ZHJA / "ref.ja")
        raw = list(zip(zh, ja, strict=True)) if a == "zh" else list(zip(ja, zh, strict=True))
    else:
        raw = wmt_pairs(a, b)
    seen: set[Pair] = set()
    pairs = []
    for x, y in raw:
        pair = (x.strip(), y.strip())
        if not all(pair) or pair in seen or any(c in x + y for c in _BREAKS):
            continue
        seen.add(pair)
        pairs.append(pair)
    return pairs


def third_language(lang: str, pair: Sequence[str]) -> str:
    return next(x for x in THIRD.get(lang, ("en", "cs")) if x not in pair)


def monolingual(lang: str, limit: int = 5000) -> list[str]:
    """Up to ``limit`` distinct sentences in ``lang``: WMT sources and references."""
    files = glob.glob(str(DATA / "*" / WMT / "txt" / "sources" / f"*.{lang}"))
    files += glob.glob(str(DATA / "*" / WMT / "txt" / "references" / f"*.ref.*.{lang}"))
    found: dict[str, None] = {}
    for path in sorted(files):
        for line in _lines(path):
            line = line.strip()
            if line and not any(c in line for c in _BREAKS):
                found[line] = None
        if len(found) >= limit:
            break
    return list(found)[:limit]


# --- defects: each takes clean pairs and returns the same number of defective ones -----------


@dataclass(frozen=True)
class DefectContext:
    """What generators may need besides the pairs: languages, the clean pool and, per
    column, sentences of a third language."""

    langs: tuple[str, str]
    pool: Sequence[Pair] = ()
    others: tuple[Sequence[str], Sequence[str]] = ((), ())


def _sep(lang: str) -> str:
    return "" if lang.split("-")[0] in UNSPACED else " "


def _set(pair: Pair, side: int, text: str) -> Pair:
    return (text, pair[1]) if side == 0 else (pair[0], text)


def third_language_side(
    pairs: Sequence[Pair], ctx: DefectContext, rng: np.random.Generator
) -> list[Pair]:
    """One side replaced by a sentence of another language."""
    picks = [rng.permutation(len(ctx.others[side])) for side in (0, 1)]
    return [_set(p, i % 2, ctx.others[i % 2][picks[i % 2][i // 2]]) for i, p in enumerate(pairs)]


def copy_source(pairs: Sequence[Pair], ctx: DefectContext, rng: np.random.Generator) -> list[Pair]:
    """One side copied over the other (an untranslated segment)."""
    return [(p[0], p[0]) if i % 2 == 0 else (p[1], p[1]) for i, p in enumerate(pairs)]


def misaligned(pairs: Sequence[Pair], ctx: DefectContext, rng: np.random.Generator) -> list[Pair]:
    """The second side taken from another pair of the batch (rotated by a random shift, so no
    pair keeps its own; a single pair takes one from the pool)."""
    donors = list(pairs) if len(pairs) > 1 else list(ctx.pool)
    shift = int(rng.integers(1, len(donors))) if len(donors) > 1 else 0
    out = []
    for k, pair in enumerate(pairs):
        # the same translation in two pairs: take the next donor
        order = ((k + shift + step) % len(donors) for step in range(len(donors)))
        j = next((j for j in order if donors[j][1] != pair[1]), k % len(donors))
        out.append((pair[0], donors[j][1]))
    return out


def markup(pairs: Sequence[Pair], ctx: DefectContext, rng: np.random.Generator) -> list[Pair]:
    """An HTML tag (or a link, with an escaped ``&amp;``) appended to one side."""
    out = []
    for i, pair in enumerate(pairs):
        snippet = MARKUP[int(rng.integers(len(MARKUP)))]
        out.append(_set(pair, i % 2, pair[i % 2] + snippet))
    return out


def char_repetition(
    pairs: Sequence[Pair], ctx: DefectContext, rng: np.random.Generator
) -> list[Pair]:
    """A character repeated 8-15 times in a row (even rows), or a word - two characters in
    Chinese and Japanese - repeated 5-8 times (odd rows), inside one side."""
    out = []
    for i, pair in enumerate(pairs):
        side = i % 2
        text, lang = pair[side], ctx.langs[side]
        if i % 4 < 2:
            letters = [k for k, c in enumerate(text) if not c.isspace()]
            at = letters[int(rng.integers(len(letters)))]
            times = int(rng.integers(8, 16))
            text = text[: at + 1] + text[at] * times + text[at + 1 :]
        elif lang in UNSPACED or " " not in text:
            at = int(rng.integers(max(1, len(text) - 1)))
            times = int(rng.integers(5, 9))
            text = text[:at] + text[at : at + 2] * times + text[at + 2 :]
        else:
            words = text.split(" ")
            at = int(rng.integers(len(words)))
            words[at] = " ".join([words[at]] * int(rng.integers(5, 9)))
            text = " ".join(words)
        out.append(_set(pair, side, text))
    return out


def truncation(pairs: Sequence[Pair], ctx: DefectContext, rng: np.random.Generator) -> list[Pair]:
    """One side cut to 30 % of its characters (at least one, at most all but one)."""
    out = []
    for i, pair in enumerate(pairs):
        text = pair[i % 2]
        keep = min(len(text) - 1, max(1, round(TRUNCATE_TO * len(text))))
        out.append(_set(pair, i % 2, text[:keep].rstrip() or text[:keep]))
    return out


def repeated(pairs: Sequence[Pair], ctx: DefectContext, rng: np.random.Generator) -> list[Pair]:
    """One side followed by itself once or twice more (a crawled segment seen 2-3 times)."""
    out = []
    for i, pair in enumerate(pairs):
        side = i % 2
        times = int(rng.integers(2, 4))
        out.append(_set(pair, side, _sep(ctx.langs[side]).join([pair[side]] * times)))
    return out


def empty_side(pairs: Sequence[Pair], ctx: DefectContext, rng: np.random.Generator) -> list[Pair]:
    """One side empty."""
    return [_set(p, i % 2, "") for i, p in enumerate(pairs)]


def duplicate(pairs: Sequence[Pair], ctx: DefectContext, rng: np.random.Generator) -> list[Pair]:
    """Exact copies of the pairs (placed after them in the corpus)."""
    return list(pairs)


DefectFn = Callable[[Sequence[Pair], DefectContext, np.random.Generator], list[Pair]]
DEFECTS: dict[str, DefectFn] = {
    "third_language": third_language_side,
    "copy": copy_source,
    "misaligned": misaligned,
    "markup": markup,
    "char_repetition": char_repetition,
    "truncation": truncation,
    "repeated": repeated,
    "empty": empty_side,
    "duplicate": duplicate,
}


@dataclass
class Labeled:
    """Pairs in corpus order with a label each: ``clean`` or a defect name. Clean pairs come
    first, then the defects in ``DEFECTS`` order, duplicates last (so the copy, not the
    original, is the later one that deduplication drops)."""

    pairs: list[Pair] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)

    def add(self, label: str, pairs: Sequence[Pair]) -> None:
        self.pairs.extend(pairs)
        self.labels.extend([label] * len(pairs))


def build(
    pool: Sequence[Pair],
    ctx: DefectContext,
    clean: int,
    per_defect: int,
    seed: int = 1,
) -> Labeled:
    """``clean`` pairs of the pool and ``per_defect`` defective pairs per defect, each made
    from pool pairs outside the clean sample (duplicates: copies of clean pairs), so that a
    defect never shares a side with a clean pair by construction."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(pool))
    based = [d for d in DEFECTS if d != "duplicate"]
    clean = max(0, min(clean, len(pool) - per_defect * len(based)))
    labeled = Labeled()
    labeled.add("clean", [pool[i] for i in order[:clean]])
    rest = order[clean:]
    ctx = DefectContext(ctx.langs, pool, ctx.others)
    for number, name in enumerate(based):
        base = [pool[i] for i in rest[number * per_defect : (number + 1) * per_defect]]
        labeled.add(name, DEFECTS[name](base, ctx, rng))
    copies = sorted(int(i) for i in rng.permutation(clean)[:per_defect])
    labeled.add("duplicate", duplicate([labeled.pairs[i] for i in copies], ctx, rng))
    return labeled


# --- news-length corpora for the speed benches ----------------------------------------------


def system_pairs(a: str, b: str) -> list[Pair]:
    """Every WMT21-23 news/general source line paired with each submitted system's output of
    it, both directions, as (a, b) pairs: news-length sentences with real machine-translated
    sides. Pairs holding a line-break character are left out (OpusFilter reads text with
    universal newlines, which would split them), and sides are right-stripped (OpusFilter
    writes ``line.rstrip()``)."""
    pairs: list[Pair] = []
    for src, tgt in ((a, b), (b, a)):
        folder = f"{src}-{tgt}"
        for source in sorted(glob.glob(str(DATA / folder / WMT / "txt/sources/*"))):
            test = Path(source).name.split(".")[0]
            outputs = Path(source).parents[1] / "system-outputs"
            sources = _lines(source)
            for hyp in sorted(glob.glob(str(outputs / f"{test}.{folder}.hyp.*"))):
                lines = _lines(hyp)
                if len(lines) != len(sources):
                    continue
                for x, y in zip(sources, lines, strict=True):
                    if any(c in x + y for c in _BREAKS):
                        continue
                    pair = (x.rstrip(), y.rstrip())
                    pairs.append(pair if src == a else (pair[1], pair[0]))
    return pairs


CRAWL_DEFECTS = ("markup", "char_repetition", "truncation", "repeated", "empty", "copy")
"""The defects :func:`news_corpus` adds: the crawl-like ones that need no third language."""


def news_corpus(
    a: str, b: str, target: int, defect_share: float = 0.1, seed: int = 1
) -> tuple[list[Pair], int]:
    """At least ``target`` pairs: :func:`system_pairs` repeated, each repeat with another
    ``defect_share`` of its pairs given one crawl-like defect (a different random subset and
    defect per repeat, so repeats are not byte-identical); 0: one pass. Returns the pairs and
    the size of the real pool they were made from."""
    pool = system_pairs(a, b)
    if not pool:
        raise SystemExit(f"no WMT system outputs for {a}-{b} under {DATA}")
    target = target or len(pool)
    rng = np.random.default_rng(seed)
    ctx = DefectContext((a, b), pool)
    out: list[Pair] = []
    while len(out) < target:
        chunk = list(pool)
        picked = rng.permutation(len(chunk))[: int(defect_share * len(chunk))]
        per = np.array_split(picked, len(CRAWL_DEFECTS))
        for name, rows in zip(CRAWL_DEFECTS, per, strict=True):
            changed = DEFECTS[name]([chunk[i] for i in rows], ctx, rng)
            for i, pair in zip(rows, changed, strict=True):
                chunk[i] = (pair[0].rstrip(), pair[1].rstrip())
        out.extend(chunk)
    return out[:target], len(pool)
