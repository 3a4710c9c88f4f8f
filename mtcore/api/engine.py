"""Provisional names of the plugin API: what only the built-in plugins use.

The sharded engines behind the built-in steps (filter, processor and selection chains, ranked
cuts, scores), the text kernels, process plumbing and the job runner. They may change or go
without deprecation: a third-party plugin that imports one pins the mtcore release it was
written for. The stable names are :mod:`mtcore.api`'s; ``tests/test_lint.py`` lets the
built-in plugins, and no example package, import this module.

The names load on first use (PEP 562), as :mod:`mtcore.api`'s do; ``_WHERE`` and the
``TYPE_CHECKING`` block below list the same names (``tests/test_lint.py`` checks it).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

#: Each provisional name and the module that defines it.
_WHERE: dict[str, str] = {
    "clean_corpus": "mtcore.chain.cleaning",
    "score_corpus": "mtcore.chain.cleaning",
    "ComponentSpec": "mtcore.chain.components",
    "built": "mtcore.chain.components",
    "component_specs": "mtcore.chain.components",
    "field_specs": "mtcore.chain.components",
    "ENGINE_KEYS": "mtcore.chain.filtering",
    "check_chain": "mtcore.chain.filtering",
    "make_specs": "mtcore.chain.filtering",
    "KeepSpec": "mtcore.chain.ranking",
    "ranked_cut": "mtcore.chain.ranking",
    "PROCESSOR_KEYS": "mtcore.chain.rewriting",
    "ShardOutput": "mtcore.chain.rewriting",
    "check_processor_langs": "mtcore.chain.rewriting",
    "checked_codes": "mtcore.chain.rewriting",
    "checked_lines": "mtcore.chain.rewriting",
    "encode_lines": "mtcore.chain.rewriting",
    "process_shard": "mtcore.chain.rewriting",
    "rewrite_corpus": "mtcore.chain.rewriting",
    "rewrite_shard": "mtcore.chain.rewriting",
    "Budget": "mtcore.chain.selection",
    "select_pool": "mtcore.chain.selection",
    "ComponentField": "mtcore.contracts.components",
    "check_components": "mtcore.contracts.components",
    "component_fields": "mtcore.contracts.components",
    "entry_dict": "mtcore.contracts.components",
    "entry_name": "mtcore.contracts.components",
    "entry_settings": "mtcore.contracts.components",
    "identity_dict": "mtcore.contracts.identity",
    "ignored_when": "mtcore.contracts.identity",
    "CatalogEntry": "mtcore.contracts.kinds",
    "CorpusFit": "mtcore.contracts.kinds",
    "NBest": "mtcore.contracts.kinds",
    "suggest": "mtcore.contracts.registry",
    "Resources": "mtcore.contracts.resources",
    "cores": "mtcore.contracts.resources",
    "largest": "mtcore.contracts.resources",
    "parse_time": "mtcore.contracts.resources",
    "total": "mtcore.contracts.resources",
    "Ended": "mtcore.contracts.scheduler",
    "Job": "mtcore.contracts.scheduler",
    "ModelExport": "mtcore.contracts.step",
    "thread_count": "mtcore.contracts.step",
    "find_member": "mtcore.data.archives",
    "Input": "mtcore.data.corpus",
    "InputPolicy": "mtcore.data.corpus",
    "batched": "mtcore.data.corpus",
    "read_parallel": "mtcore.data.corpus",
    "write_corpus_meta": "mtcore.data.corpus",
    "read_sgm": "mtcore.data.formats",
    "read_ted": "mtcore.data.formats",
    "read_wmt_xml": "mtcore.data.formats",
    "ingest": "mtcore.data.ingest",
    "read_tsv": "mtcore.data.read",
    "same_file": "mtcore.exec.files",
    "PARENT_ENV": "mtcore.exec.process",
    "die_with_parent": "mtcore.exec.process",
    "run_logged": "mtcore.exec.process",
    "safe_torch_loads": "mtcore.exec.process",
    "tail": "mtcore.exec.process",
    "current_task": "mtcore.exec.ranks",
    "publish_ranks": "mtcore.exec.ranks",
    "rank_exits": "mtcore.exec.ranks",
    "AppendLog": "mtcore.exec.shards",
    "shard_saved": "mtcore.exec.shards",
    "worker_forget": "mtcore.exec.shards",
    "conversions_home": "mtcore.recipe.hashing",
    "hash_file": "mtcore.recipe.hashing",
    "hash_json": "mtcore.recipe.hashing",
    "LOCK_ENV": "mtcore.run.cache",
    "open_lock": "mtcore.run.cache",
    "job_command": "mtcore.run.jobs",
    "job_state": "mtcore.run.jobs",
    "record_requeue": "mtcore.run.jobs",
    "requeue_count": "mtcore.run.jobs",
    "run_job": "mtcore.run.jobs",
    "run_task": "mtcore.run.jobs",
    "build_metrics": "mtcore.system.metrics",
    "check_lengths": "mtcore.system.metrics",
    "evaluate": "mtcore.system.metrics",
    "read_segments": "mtcore.system.metrics",
    "code_table": "mtcore.text.block",
    "line_of_offsets": "mtcore.text.block",
    "lines_of_codes": "mtcore.text.block",
    "INNER_BREAKS": "mtcore.text.chars",
    "BAD_CHARS": "mtcore.text.kernels",
    "SPACE_LUT": "mtcore.text.kernels",
    "encode_utf8": "mtcore.text.kernels",
    "first_fault": "mtcore.text.kernels",
    "line_changes": "mtcore.text.kernels",
}
__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(
            f"mtcore.api.engine has no {name!r}: its names are mtcore.api.engine.__all__ "
            "(and the stable ones mtcore.api.__all__)"
        )
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
        select_pool as select_pool,
    )
    from mtcore.contracts.components import (
        ComponentField as ComponentField,
        check_components as check_components,
        component_fields as component_fields,
        entry_dict as entry_dict,
        entry_name as entry_name,
        entry_settings as entry_settings,
    )
    from mtcore.contracts.identity import (
        identity_dict as identity_dict,
        ignored_when as ignored_when,
    )
    from mtcore.contracts.kinds import (
        CatalogEntry as CatalogEntry,
        CorpusFit as CorpusFit,
        NBest as NBest,
    )
    from mtcore.contracts.registry import (
        suggest as suggest,
    )
    from mtcore.contracts.resources import (
        Resources as Resources,
        cores as cores,
        largest as largest,
        parse_time as parse_time,
        total as total,
    )
    from mtcore.contracts.scheduler import (
        Ended as Ended,
        Job as Job,
    )
    from mtcore.contracts.step import (
        ModelExport as ModelExport,
        thread_count as thread_count,
    )
    from mtcore.data.archives import (
        find_member as find_member,
    )
    from mtcore.data.corpus import (
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
        rank_exits as rank_exits,
    )
    from mtcore.exec.shards import (
        AppendLog as AppendLog,
        shard_saved as shard_saved,
        worker_forget as worker_forget,
    )
    from mtcore.recipe.hashing import (
        conversions_home as conversions_home,
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
    from mtcore.system.metrics import (
        build_metrics as build_metrics,
        check_lengths as check_lengths,
        evaluate as evaluate,
        read_segments as read_segments,
    )
    from mtcore.text.block import (
        code_table as code_table,
        line_of_offsets as line_of_offsets,
        lines_of_codes as lines_of_codes,
    )
    from mtcore.text.chars import (
        INNER_BREAKS as INNER_BREAKS,
    )
    from mtcore.text.kernels import (
        BAD_CHARS as BAD_CHARS,
        SPACE_LUT as SPACE_LUT,
        encode_utf8 as encode_utf8,
        first_fault as first_fault,
        line_changes as line_changes,
    )
