"""mtcore's public plugin API: everything a plugin (built-in or third-party) imports from mtcore.

A plugin imports from here and nowhere else in ``mtcore``: ``tests/test_lint.py`` fails on any
other import of ``mtcore`` in the built-in plugins and the example packages, so the core's
modules can move without breaking anyone's package. docs/plugins.md groups these names by what
they are for and states each plugin kind's contract.

The names load on first use (PEP 562): ``from mtcore.api import Filter`` costs what importing
``mtcore.contracts.plugin`` costs, not the whole core (NumPy, numba), so a step's process starts as
fast
as before. The ``TYPE_CHECKING`` block below is the one list of the public names: type
checkers read it as re-exports, and at run time this module reads it from its own source.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any


def _public() -> dict[str, str]:
    """Each public name and the module that defines it, from the ``TYPE_CHECKING`` block."""
    tree = ast.parse(Path(__file__).read_text(encoding="utf-8"))
    for node in tree.body:
        if not isinstance(node, ast.If) or not isinstance(node.test, ast.Name):
            continue
        if node.test.id == "TYPE_CHECKING":
            return {
                alias.name: str(stmt.module)
                for stmt in node.body
                if isinstance(stmt, ast.ImportFrom)
                for alias in stmt.names
            }
    raise ImportError(f"{__file__}: no TYPE_CHECKING block lists the public names")


_WHERE = _public()
__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"mtcore.api has no {name!r}: its public names are mtcore.api.__all__")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__


if TYPE_CHECKING:
    from mtcore.chain.cleaning import (
        clean_corpus as clean_corpus,
        score_corpus as score_corpus,
    )
    from mtcore.chain.components import (
        ComponentSpec as ComponentSpec,
        built as built,
        component_specs as component_specs,
        field_specs as field_specs,
    )
    from mtcore.chain.filtering import (
        ENGINE_KEYS as ENGINE_KEYS,
        check_chain as check_chain,
        make_specs as make_specs,
    )
    from mtcore.chain.ranking import (
        KeepSpec as KeepSpec,
        ranked_cut as ranked_cut,
    )
    from mtcore.chain.rewriting import (
        PROCESSOR_KEYS as PROCESSOR_KEYS,
        ShardOutput as ShardOutput,
        check_processor_langs as check_processor_langs,
        checked_codes as checked_codes,
        checked_lines as checked_lines,
        encode_lines as encode_lines,
        process_shard as process_shard,
        rewrite_corpus as rewrite_corpus,
        rewrite_shard as rewrite_shard,
    )
    from mtcore.chain.selection import (
        Budget as Budget,
        Selector as Selector,
        select_pool as select_pool,
    )
    from mtcore.contracts.errors import (
        DataError as DataError,
        MtcoreError as MtcoreError,
        PluginError as PluginError,
        StepError as StepError,
    )
    from mtcore.contracts.hooks import (
        hookimpl as hookimpl,
    )
    from mtcore.contracts.plugin import (
        HASHED_WHEN_SET as HASHED_WHEN_SET,
        NOT_IDENTITY as NOT_IDENTITY,
        Augmenter as Augmenter,
        CatalogEntry as CatalogEntry,
        ComponentField as ComponentField,
        ConfigT as ConfigT,
        CorpusFit as CorpusFit,
        Executor as Executor,
        Filter as Filter,
        Metric as Metric,
        Model as Model,
        NBest as NBest,
        Pair as Pair,
        PluginConfig as PluginConfig,
        Processor as Processor,
        Scorer as Scorer,
        Source as Source,
        Tuner as Tuner,
        check_components as check_components,
        component_fields as component_fields,
        components as components,
        entry_name as entry_name,
        identity_dict as identity_dict,
        ignored_when as ignored_when,
    )
    from mtcore.contracts.registry import (
        Registry as Registry,
        load_registry as load_registry,
        suggest as suggest,
    )
    from mtcore.contracts.scheduler import (
        Ended as Ended,
        Job as Job,
        Scheduler as Scheduler,
    )
    from mtcore.contracts.stats import (
        Stats as Stats,
    )
    from mtcore.contracts.step import (
        Artifact as Artifact,
        ModelExport as ModelExport,
        Step as Step,
        StepContext as StepContext,
        thread_count as thread_count,
        write_artifact_meta as write_artifact_meta,
    )
    from mtcore.data.archives import (
        find_member as find_member,
    )
    from mtcore.data.corpus import (
        INNER_BREAKS as INNER_BREAKS,
        Corpus as Corpus,
        CorpusWriter as CorpusWriter,
        Input as Input,
        InputPolicy as InputPolicy,
        batched as batched,
        read_parallel as read_parallel,
        write_corpus_meta as write_corpus_meta,
    )
    from mtcore.data.formats import (
        read_sgm as read_sgm,
        read_ted as read_ted,
        read_wmt_xml as read_wmt_xml,
    )
    from mtcore.data.ingest import (
        ingest as ingest,
    )
    from mtcore.data.read import (
        read_tsv as read_tsv,
    )
    from mtcore.exec.files import (
        same_file as same_file,
    )
    from mtcore.exec.process import (
        PARENT_ENV as PARENT_ENV,
        die_with_parent as die_with_parent,
        run_logged as run_logged,
        safe_torch_loads as safe_torch_loads,
        tail as tail,
    )
    from mtcore.exec.ranks import (
        current_task as current_task,
        publish_ranks as publish_ranks,
    )
    from mtcore.exec.shards import (
        AppendLog as AppendLog,
        map_shards as map_shards,
        worker_forget as worker_forget,
        worker_memo as worker_memo,
    )
    from mtcore.recipe.hashing import (
        cache_home as cache_home,
        content_hash as content_hash,
        hash_file as hash_file,
        hash_json as hash_json,
    )
    from mtcore.run.cache import (
        LOCK_ENV as LOCK_ENV,
        open_lock as open_lock,
    )
    from mtcore.run.jobs import (
        job_command as job_command,
        job_state as job_state,
        record_requeue as record_requeue,
        requeue_count as requeue_count,
        run_job as run_job,
        run_task as run_task,
    )
    from mtcore.run.resources import (
        Resources as Resources,
        cores as cores,
        largest as largest,
        parse_time as parse_time,
        total as total,
    )
    from mtcore.system.metrics import (
        Score as Score,
        build_metrics as build_metrics,
        check_lengths as check_lengths,
        evaluate as evaluate,
        read_segments as read_segments,
    )
    from mtcore.text.block import (
        BlockReader as BlockReader,
        RawBlock as RawBlock,
        TextBlock as TextBlock,
        TextColumn as TextColumn,
        code_table as code_table,
        line_of_offsets as line_of_offsets,
        lines_of_codes as lines_of_codes,
    )
    from mtcore.text.kernels import (
        BAD_CHARS as BAD_CHARS,
        SPACE_LUT as SPACE_LUT,
        encode_utf8 as encode_utf8,
        first_fault as first_fault,
        line_changes as line_changes,
    )
