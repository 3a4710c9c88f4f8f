"""The nine component plugin kinds and their contracts (sources, filters, processors,
augmenters, metrics, models, scorers, tuners, executors), the optional ability of a filter to
fit a corpus-level model (:class:`CorpusFit`), and the lookup of another step's artifact that
filters, metrics, scorers and selectors share (:func:`connected_input`, :class:`ReadsInputs`).
Steps are :mod:`mtcore.contracts.step`'s, schedulers :mod:`mtcore.contracts.scheduler`'s."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from mtcore.contracts.errors import PluginError
from mtcore.contracts.plugin import ConfigT, Pair, Plugin

if TYPE_CHECKING:
    import numpy as np


@dataclass(frozen=True)
class CatalogEntry:
    """One corpus a source can fetch by name (``mtcore datasets``): ``entry`` is the data
    entry that fetches it, ready to paste into a recipe (``{"mtdata": "Statmt-..."}``)."""

    source: str
    id: str
    langs: tuple[str, ...]
    entry: dict[str, Any]
    address: str = ""
    size: str = ""


class Source(Plugin[ConfigT]):
    """Yields a corpus. ``langs`` lists its languages in column order (one for monolingual).

    A source that names corpora by id from an index (``mtdata``, ``sacrebleu``) lists them in
    :meth:`catalogue`, which ``mtcore datasets L1-L2`` prints."""

    def dataset(self) -> str | None:
        """The corpus' id in a public index (``sacrebleu:wmt22:en-ja``,
        ``mtdata:Statmt-news_commentary-16-eng-jpn``), recorded in the fetched corpus' metadata
        (an evaluation names its test set with it); None for a file or address."""
        return None

    @classmethod
    def catalogue(cls, langs: tuple[str, ...], grep: str | None = None) -> list[CatalogEntry]:
        """The corpora of ``langs`` (one or two languages, either order) this source can fetch
        by name, those whose id or address contains ``grep``; none by default."""
        return []

    @abstractmethod
    def langs(self) -> tuple[str, ...]:
        raise NotImplementedError

    @abstractmethod
    def fingerprint(self) -> str:
        """A string that changes whenever the data this source yields would change."""
        raise NotImplementedError

    @abstractmethod
    def read(self, policy: Any, stats: Any) -> Iterator[Pair]:
        """Yield segments in order. File-reading sources read through
        :func:`mtcore.data.corpus.read_parallel` / :func:`mtcore.data.read.read_tsv` with ``policy``
        (an :class:`mtcore.data.corpus.InputPolicy`) and count what it handled in ``stats``; the
        fetch step additionally checks every yielded segment for newlines and NUL bytes."""
        raise NotImplementedError

    def line_files(self, stats: Any) -> list[Path] | None:
        """The corpus as line-aligned text files on disk (plain, ``.gz`` or ``.xz``), one per
        language in column order, downloaded first by a source that downloads. The fetch step
        then reads them sharded over the executor (:mod:`mtcore.data.ingest`) through the same input
        policy, giving what :meth:`read` would. None (the default): it iterates :meth:`read`."""
        return None

    def explain(self, exc: Exception) -> Exception:
        """``exc`` (a :class:`mtcore.contracts.errors.DataError` naming one of :meth:`line_files`)
        with
        what the source knows about that file added, e.g. the address it was downloaded
        from; by default ``exc`` itself."""
        return exc


def connected_input(inputs: Mapping[str, Path], role: str, owner: str) -> Path:
    """The artifact directory connected to the step input ``role``; a clear error naming
    ``owner`` (``filter 'lm'``) when the recipe did not connect it."""
    if role not in inputs:
        have = ", ".join(sorted(inputs)) or "none"
        raise PluginError(
            f"{owner} needs the step input {role!r} (connect it under the step's inputs; "
            f"connected: {have})"
        )
    return Path(inputs[role])


class ReadsInputs:
    """Mixin of the kinds whose plugins may read other steps' artifacts (filters, metrics,
    scorers): ``setup`` keeps the role -> directory mapping in ``resources``, and
    :meth:`resource` looks one up."""

    name: ClassVar[str]
    noun: ClassVar[str] = "plugin"
    resources: dict[str, Path]

    def resource(self, role: str) -> Path:
        """The artifact directory connected to the step's input ``role``; a clear error when
        the recipe did not connect it."""
        return connected_input(getattr(self, "resources", {}), role, f"{self.noun} {self.name!r}")


class Filter(ReadsInputs, Plugin[ConfigT]):
    """OpusFilter's split: ``score`` a batch, then ``accept`` each score.

    ``score`` receives a list of pairs and returns a list of the same length, in the same order;
    a score is a number or one number per side (or per side combination). A ``stateful``
    filter (deduplication) sees every pair of the corpus in order in one process; a stateless
    one may run on shards in parallel.

    Speed: the engine hands a filter a :class:`mtcore.text.block.TextBlock` (a shard as UTF-8
    buffers, code points and line offsets). ``score_block``/``accept_block`` default to the
    per-pair methods; a filter overrides them with array code to run at corpus speed.

    Ranking: ``higher_is_better`` says which way ``rank_key`` (one number per pair) points, so
    that a chain entry can keep a top fraction, a top k or a percentile band instead of using
    the filter's own threshold; ``None`` means the filter cannot be ranked.

    Resources: a filter that needs an artifact another step made (a language model, a
    dev/test set to exclude) names the clean step's input role in its settings; ``setup``
    receives the role -> artifact directory mapping.

    Fitting: a filter whose model is learnt from the data itself (an unsupervised word
    aligner) asks for a sample of the corpus with ``fit_size``; the engine calls ``fit`` on it
    once, before any shard is scored, and every scoring process reads the result through
    ``use_fit``, so a pair's score does not depend on the shard it is scored in.
    """

    noun = "filter"

    stateful: ClassVar[bool] = False
    higher_is_better: ClassVar[bool | None] = None
    vectorized: ClassVar[bool] = False
    """True when ``score_block`` is array code that is cheaper on a whole shard than on a
    subset: the engine then scores whole shards and indexes the pairs still alive. A class
    constant; a filter whose path depends on its settings or languages says so in
    :meth:`whole_blocks`."""
    char_classes: ClassVar[tuple[str, ...]] = ()
    """Sets of characters whose per-line counts the filter reads with
    ``TextColumn.count_chars(chars)``: the engine counts the sets of the whole chain in the
    pass that decodes a shard (eight at most; others are counted when asked)."""
    batch_dependent: ClassVar[bool] = False
    """True when a pair's score depends on the other pairs scored with it. A fitted filter
    (``fit_size``) may be so only when scored without its fit (called directly): the engine
    fits it once per corpus, so its scores do not depend on shards."""

    def setup(self, langs: tuple[str, ...], resources: Mapping[str, Path] | None = None) -> None:
        """Called once per process before the first batch, with the corpus languages."""
        self.langs = langs
        self.resources = dict(resources or {})

    def whole_blocks(self) -> bool:
        """Whether the engine scores whole shards with this filter (after :meth:`setup`); by
        default the class's ``vectorized``."""
        return type(self).vectorized

    def score(self, batch: Sequence[Pair]) -> Sequence[Any]:
        raise NotImplementedError

    @abstractmethod
    def accept(self, score: Any) -> bool:
        raise NotImplementedError

    def score_block(self, block: Any) -> Any:
        """Scores of every pair of a :class:`mtcore.text.block.TextBlock`: an array of shape
        (n,) or (n, k), or a list as ``score`` returns."""
        return self.score(block.pairs())

    def score_rows(self, block: Any, rows: Any) -> Any:
        """Vectorized filters: the scores of the pairs at ``rows`` (sorted indices, the pairs
        still alive in the chain) of ``block``, as ``score_block(block)[rows]``. A filter whose
        kernel works line by line overrides it to score those lines alone."""
        import numpy as np

        return np.asarray(self.score_block(block))[rows]

    def prepare_block(self, block: Any) -> Any:
        """Stateful filters only: the per-pair items (hashes, say) that ``score`` will see in
        the driver, computed in the workers. The default is the pairs themselves."""
        return block.pairs()

    def accept_block(self, scores: Any) -> Any:
        """A boolean array: which of ``scores`` (as ``score_block`` returned them) pass."""
        import numpy as np

        return np.fromiter((bool(self.accept(s)) for s in scores), dtype=bool, count=len(scores))

    def rank_key(self, scores: Any) -> Any:
        """One float per pair for ranking, ``higher_is_better`` giving the direction. The
        default takes the worst side of per-side scores."""
        import numpy as np

        values = np.asarray(scores, dtype=np.float64)
        if values.ndim == 1:
            return values
        return values.min(axis=1) if self.higher_is_better else values.max(axis=1)


class CorpusFit(ABC):
    """An optional ability of a filter: a corpus-level model learned once per step
    (``class AlignmentFilter(Filter[AlignmentConfig], CorpusFit)``). The engine
    (:mod:`mtcore.chain.fitting`) asks a filter with this ability for ``fit_size`` pairs,
    calls ``fit`` once, in the driver, and ``use_fit`` in every process that scores."""

    @abstractmethod
    def fit_size(self) -> int:
        """Pairs of the corpus that ``fit`` wants to learn from; 0: none, the filter is not
        fitted. The engine draws them evenly spaced over the whole corpus and passes on those
        the earlier filters of the chain keep, whatever the shard size."""

    @abstractmethod
    def fit(self, sample: Sequence[Pair], folder: Path) -> None:
        """Learns a corpus-level model from ``sample`` and writes it into the empty directory
        ``folder``. Called once per step, in the driver, before any shard is scored; the same
        sample must give the same model (a rerun may refit, or reuse a completed fit)."""

    @abstractmethod
    def use_fit(self, folder: Path) -> None:
        """Reads the model ``fit`` wrote; called after ``setup`` in every process that scores."""


class Processor(Plugin[ConfigT]):
    """Rewrites text: ``process(batch, lang) -> same-length list``.

    A processor may also have a compiled path, ``process_codes(codes, lang)``: the batch as a
    ``uint32`` array of code points, each line ended by ``\\n`` (a decoded column's layout),
    rewritten to the same layout and line count. The ``normalize`` step then never builds
    ``str`` lines for it. ``None`` (the default) means there is no such path."""

    @abstractmethod
    def process(self, batch: Sequence[str], lang: str) -> list[str]:
        raise NotImplementedError

    def process_codes(self, codes: np.ndarray, lang: str) -> np.ndarray | None:
        return None


class Augmenter(Plugin[ConfigT]):
    """Rewrites one side of a corpus line by line, reproducibly. ``augment(lines, lang,
    first_line)`` returns a list as long as ``lines``; line ``i`` is corpus line
    ``first_line + i`` (1-based) of the side in language ``lang``. Any randomness must come from
    the augmenter's settings and the line number alone (``random.Random`` seeded from both),
    never from the shard or the process, so the output is the same whatever the shard size,
    the worker count or a resumed run. The ``augment`` step chains augmenters."""

    @abstractmethod
    def augment(self, lines: Sequence[str], lang: str, first_line: int) -> list[str]:
        raise NotImplementedError


class Metric(ReadsInputs, Plugin[ConfigT]):
    """Corpus score with a reproducibility signature. A metric that decomposes into
    per-segment sufficient statistics (BLEU, as sacrebleu's base ``Metric`` does with
    ``_extract_corpus_statistics`` and ``_compute_score_from_stats``) also implements
    :meth:`segment_statistics` and :meth:`score_statistics`: a tuner or a reranker then scores
    any selection of hypotheses by summing rows instead of re-scoring text.

    A metric whose corpus score is the mean of segment scores (COMET, MetricX, sentence chrF)
    implements :meth:`segment_scores`: the evaluate step keeps them for paired bootstrap, and
    the ``mbr`` step uses any such metric as its utility.

    Class attributes: ``needs_source`` (``corpus_score`` takes ``sources=``), ``needs_reference``
    (False for quality estimation: the references are ignored), ``heavy`` (a neural model: the
    evaluate step runs it in its own worker process, so a crash or an out-of-memory kill names
    the metric and loses no other score). Resources: like a scorer, a metric that reads an
    artifact another step made (a model fetched by id) names the evaluate step's input role in
    its settings; ``setup`` receives the role -> artifact directory mapping before scoring."""

    noun = "metric"

    needs_source: ClassVar[bool] = False
    needs_reference: ClassVar[bool] = True
    heavy: ClassVar[bool] = False

    def setup(self, resources: Mapping[str, Path] | None = None) -> None:
        self.resources = dict(resources or {})

    def segment_scores(
        self,
        hyps: Sequence[str],
        refs: Sequence[Sequence[str]],
        lang: str,
        sources: Sequence[str] | None = None,
    ) -> list[float]:
        """One score per hypothesis (over the references, when there are several), in order;
        the corpus score is their mean. ``refs`` streams are as long as ``hyps`` (a reference
        may repeat: MBR scores every candidate against every other)."""
        raise PluginError(
            f"metric {self.name!r} has no segment scores (its corpus score is not a mean of "
            "segment scores); choose one that has, such as chrf or comet"
        )

    @abstractmethod
    def corpus_score(self, hyps: Sequence[str], refs: Sequence[Sequence[str]], lang: str) -> Any:
        """``refs`` is a list of reference streams, each as long as ``hyps``. Returns a
        :class:`mtcore.system.metrics.Score`."""
        raise NotImplementedError

    def segment_statistics(
        self,
        hyps: Sequence[str],
        refs: Sequence[Sequence[str]],
        lang: str,
        of: Sequence[int] | None = None,
    ) -> Any:
        """A (hypotheses, k) numpy array of sufficient statistics: the column sums over any
        selection of rows give that selection's corpus score through :meth:`score_statistics`.
        Hypothesis ``i`` is scored against segment ``of[i]`` of every reference stream (an
        n-best list scores several hypotheses against one segment); by default segment ``i``."""
        raise PluginError(
            f"metric {self.name!r} has no segment statistics (its corpus score is not a sum "
            "over segments); choose one that has, such as bleu"
        )

    def score_statistics(self, stats: Any, sentence: bool = False) -> Any:
        """The score of each row of ``stats`` (2-D: summed statistics, one selection a row);
        ``sentence`` gives the metric's sentence-level form (BLEU: effective order)."""
        raise PluginError(f"metric {self.name!r} has no segment statistics")


class Model(Plugin[ConfigT]):
    """Registers architectures, criteria or optimizers into fairseq's own registries.

    ``register()`` is called before fairseq parses arguments or loads a checkpoint;
    ``user_dir()`` names a directory fairseq's ``--user-dir`` can import in a subprocess.
    """

    @abstractmethod
    def register(self) -> None:
        raise NotImplementedError

    def user_dir(self) -> str | None:
        return None


class Scorer(ReadsInputs, Plugin[ConfigT]):
    """A rerank feature: ``score`` takes a batch of (source, hypothesis) pairs and returns one
    float per pair, same order; higher means better for the feature's own reading (a tuner
    learns the weight, and so the sign). The step names the feature column (the plugin's name
    unless the recipe gives another).

    Resources: like a filter, a scorer that needs an artifact another step made (a model, a
    language model) names the rerank step's input role in its settings; ``setup`` receives the
    languages and the role -> artifact directory mapping, once per process."""

    noun = "scorer"

    def setup(self, src: str, tgt: str, resources: Mapping[str, Path] | None = None) -> None:
        self.src, self.tgt = src, tgt
        self.resources = dict(resources or {})

    @abstractmethod
    def score(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        raise NotImplementedError


NBest = Sequence[Sequence[tuple[str, Mapping[str, float]]]]
"""Per source sentence, its hypotheses as (text, feature name -> value)."""


class Tuner(Plugin[ConfigT]):
    """Learns rerank weights on a dev n-best: a hypothesis scores ``sum_j w_j * f_j`` and the
    best-scoring one of each sentence is the output. ``fit`` receives the feature names to
    weigh, the n-best (every hypothesis carries every feature), the reference streams (each as
    long as the n-best) and the target language; it returns one weight per feature."""

    @abstractmethod
    def fit(
        self, features: Sequence[str], nbest: NBest, refs: Sequence[Sequence[str]], lang: str
    ) -> dict[str, float]:
        raise NotImplementedError


class Executor(Plugin[ConfigT]):
    """Runs tasks of a data step: ``map(fn, tasks)`` yields results in task order.
    ``workers`` is how many tasks may run at once (steps share the cores out by it)."""

    @property
    def workers(self) -> int:
        """The ``workers`` setting where the plugin has one and it is set, else 1."""
        value = getattr(self.config, "workers", None)
        return value if isinstance(value, int) and value > 0 else 1

    @property
    def shares_files(self) -> bool:
        """Whether workers read this machine's files at the driver's paths (a task may then
        name a file and a byte range instead of carrying the bytes)."""
        return True

    @abstractmethod
    def map(self, fn: Any, tasks: Any) -> Iterator[Any]:
        raise NotImplementedError

    def narrowed(self, workers: int) -> Executor[Any]:
        """This executor as one step may use it: at most ``workers`` of its tasks at once (the
        CPUs the step holds), sharing its workers with the steps beside it. By default the
        executor itself (one that does not run on the step's CPUs: a Ray cluster)."""
        return self

    def close(self) -> None:
        """Release workers."""

    def abort(self) -> None:
        """Stop at once, abandoning running tasks (the run was interrupted); by default the
        same as :meth:`close`."""
        self.close()
