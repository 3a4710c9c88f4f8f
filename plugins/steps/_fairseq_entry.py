"""Runs fairseq in a subprocess after registering mtcore model plugins, plus the helpers the
fairseq steps share (safe checkpoint loading, plugin registration).

    python -m mtcore_plugins.steps._fairseq_entry train [--models a,b] [--threads N] \
        [--too-long error|skip] [--nproc N] [--label-smoothing X] [--r2l] [--keep-best N] \
        -- FAIRSEQ_TRAIN_ARGS...

registers the named ``mtcore.models`` plugins, allows the types fairseq checkpoints hold for
torch's safe (``weights_only``) loader, then runs ``fairseq_cli.train`` with ARGS; with
``--nproc N`` > 1 it first starts N copies of itself through torchrun (one per rank).
``--label-smoothing`` reaches fairseq only when the chosen criterion has that setting. Nothing
here imports torch or fairseq at module level.

Where ``MTCORE_SAVE_SIGNAL`` names a signal (the Slurm scheduler sets it: the one sent before a
job's time limit or on its preemption), that signal or SIGTERM makes the training finish its
current update, save checkpoint_last.pt (where the epoch's iterator stands) and exit with
:data:`PREEMPTED_STATUS`; run again, it resumes from there as if never stopped.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

from mtcore.api.engine import PARENT_ENV, die_with_parent
from mtcore_plugins.common.fairseq.deferred import deferred
from mtcore_plugins.common.fairseq.setup import (
    add_safe_globals,
    register_models,
)

MODULE = "mtcore_plugins.steps._fairseq_entry"  # __name__ is __main__ under python -m
WORKER_ARGV = "MTCORE_FAIRSEQ_ARGV"
SAVE_SIGNAL_ENV = "MTCORE_SAVE_SIGNAL"
PREEMPTED_STATUS = 75  # EX_TEMPFAIL: saved on a signal, to be resumed


def _signalled() -> list[int]:
    """From now on, the signal ``MTCORE_SAVE_SIGNAL`` names and SIGTERM are noted, not fatal;
    the list they are noted in (empty where no signal is named)."""
    import signal

    noted: list[int] = []
    name = os.environ.get(SAVE_SIGNAL_ENV, "")
    if not name:
        return noted

    def note(signum: int, frame: Any) -> None:
        noted.append(signum)

    for signum in {
        signal.Signals[name if name.startswith("SIG") else "SIG" + name],
        signal.SIGTERM,
    }:
        signal.signal(signum, note)
    return noted


def _save_and_exit_when_signalled(noted: list[int]) -> None:
    """After each update (fairseq's ``validate_and_save``), a signal noted by any rank makes
    every rank stop there: checkpoint_last.pt is saved and the process exits with
    :data:`PREEMPTED_STATUS`. The ranks agree on it, so all stop after the same update."""
    from fairseq import checkpoint_utils
    from fairseq.distributed import utils as distributed_utils
    from fairseq_cli import train

    validate_and_save = train.validate_and_save

    def or_stop(cfg: Any, trainer: Any, *args: Any, **kwargs: Any) -> Any:
        valid_losses, should_stop = validate_and_save(cfg, trainer, *args, **kwargs)
        stop = bool(noted)
        if trainer.data_parallel_world_size > 1:
            import torch

            flag = torch.tensor([float(stop)], device=trainer.device)
            flag = distributed_utils.all_reduce(
                flag, group=trainer.data_parallel_process_group, op="max"
            )
            stop = bool(flag.item() > 0)
        if should_stop or not stop:
            return valid_losses, should_stop
        epoch_itr = args[1] if len(args) > 1 else kwargs["epoch_itr"]
        checkpoint_utils.save_checkpoint(cfg.checkpoint, trainer, epoch_itr, valid_losses[0])
        logging.getLogger("mtcore").info(
            "signalled (%s): saved checkpoint_last.pt after update %d; exiting with status %d "
            "to be resumed",
            ",".join(str(n) for n in noted) or "another rank",
            trainer.get_num_updates(),
            PREEMPTED_STATUS,
        )
        sys.stdout.flush()
        sys.exit(PREEMPTED_STATUS)

    train.validate_and_save = or_stop


def _refuse_long_examples() -> None:
    """fairseq's trainer skips training examples longer than the model's positions (or than
    max_tokens) with only a warning; make that an error before the first update instead."""
    from fairseq.tasks.fairseq_task import FairseqTask

    def strict(
        self: Any, indices: Any, dataset: Any, max_positions: Any = None, *args: Any, **kw: Any
    ) -> Any:
        kept, ignored = dataset.filter_indices_by_size(indices, max_positions)
        if len(ignored) > 0:
            raise SystemExit(
                f"mtcore: {len(ignored)} examples are longer than max_positions={max_positions} "
                f"(source, target; max_tokens counts too), first ids {list(ignored[:10])}. "
                "Filter long pairs before binarize, raise max_tokens, or set too_long: skip."
            )
        return kept

    FairseqTask.filter_indices_by_size = strict  # type: ignore[method-assign]


def _reverse_targets() -> None:
    """R2L training (``direction: r2l``): every target sentence of every split is read
    right-to-left, its end-of-sentence marker kept last. Done here, at train time, on the same
    binarized data an L2R model trains on, so one ``binarize`` step serves both directions."""
    from fairseq.data import BaseWrapperDataset
    from fairseq.tasks.translation import TranslationTask

    class ReversedTokens(BaseWrapperDataset):  # type: ignore[misc]
        def __init__(self, dataset: Any, eos: int) -> None:
            super().__init__(dataset)
            self.eos = eos

        def __getitem__(self, index: int) -> Any:
            return reverse_tokens(self.dataset[index], self.eos)

    load = TranslationTask.load_dataset

    def load_reversed(self: Any, split: str, *args: Any, **kwargs: Any) -> None:
        load(self, split, *args, **kwargs)
        dataset = self.datasets[split]
        if dataset.tgt is not None:
            dataset.tgt = ReversedTokens(dataset.tgt, self.tgt_dict.eos())
            logging.getLogger("mtcore").info("targets of %s read right to left (r2l)", split)

    TranslationTask.load_dataset = load_reversed  # type: ignore[method-assign]


def reverse_tokens(tokens: Any, eos: int) -> Any:
    """``a b c </s>`` -> ``c b a </s>`` (a torch tensor; a missing EOS is not added)."""
    import torch

    if len(tokens) and int(tokens[-1]) == eos:
        return torch.cat([tokens[:-1].flip(0), tokens[-1:]])
    return tokens.flip(0)


def _keep_best(save_dir: Path, n: int) -> None:
    """After every save that carries a validation score, keep the checkpoint among the best
    ``n`` (see :func:`mtcore_plugins.common.fairseq.checkpoints.keep_best`)."""
    from fairseq import checkpoint_utils

    from mtcore_plugins.common.fairseq.checkpoints import keep_best

    save = checkpoint_utils.save_checkpoint

    def save_and_keep(cfg: Any, trainer: Any, epoch_itr: Any, val_loss: Any) -> Any:
        saved = save(cfg, trainer, epoch_itr, val_loss)
        last = save_dir / "checkpoint_last.pt"
        if val_loss is not None and trainer.data_parallel_rank == 0 and last.exists():
            keep_best(
                save_dir,
                last,
                trainer.get_num_updates(),
                float(val_loss),
                n,
                bool(cfg.maximize_best_checkpoint_metric),
            )
        return saved

    checkpoint_utils.save_checkpoint = save_and_keep


def _empty_outputs_score_zero_bleu() -> None:
    """fairseq 0.12 derives the dev ``bleu`` only when some hypothesis has an n-gram; when every
    output is empty (a young model that emits EOS first) ``validate`` fails with KeyError
    'bleu'. Such a validation scores BLEU 0."""
    from fairseq_cli import train

    stats_of = train.get_valid_stats

    def with_bleu(cfg: Any, trainer: Any, stats: dict[str, Any], tracking_best: Any) -> Any:
        if cfg.checkpoint.best_checkpoint_metric == "bleu":
            stats.setdefault("bleu", 0.0)
        return stats_of(cfg, trainer, stats, tracking_best)

    train.get_valid_stats = with_bleu


def _dev_bleu_tokenized(tokenize: str) -> None:
    """fairseq 0.12 scores dev BLEU of decoded text with sacrebleu's default 13a tokenizer,
    which leaves a Japanese or Chinese sentence one word; the train step's ``bleu_tokenize``
    names the tokenizer the paper scores with (NT5 Table 5: ja-mecab for En->Ja)."""
    import sacrebleu

    original = sacrebleu.corpus_bleu

    def corpus_bleu(hyps: Any, refs: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("tokenize", tokenize)  # tokenize="none" (pieces) stays
        return original(hyps, refs, **kwargs)

    sacrebleu.corpus_bleu = corpus_bleu  # type: ignore[assignment]


def _bf16_on_cuda() -> None:
    """fairseq 0.12 reads ``--bf16`` as bf16 on a TPU (``options.py`` sets ``tpu``), and its
    trainer then asks torch_xla for a device: ``--bf16`` on a CUDA machine fails with
    "'NoneType' object has no attribute 'xla_device'" (seen on an H200). Without ``--tpu``, a
    bf16 run on a CUDA machine trains on the GPU, as ``--fp16`` does: the trainer casts the
    model to bf16 and keeps fp32 master weights (``FP16Optimizer``)."""
    from fairseq import options

    parse = options.parse_args_and_arch

    def on_cuda(*args: Any, **kwargs: Any) -> Any:
        parsed = parse(*args, **kwargs)
        (parsed[0] if isinstance(parsed, tuple) else parsed).tpu = False
        return parsed

    options.parse_args_and_arch = on_cuda


def _resumed_batches_as_in_epoch_one() -> None:
    """fairseq 0.12 makes a training set's batches once, with the first iterator, ordering the
    examples with the seed ``seed + epoch`` (``FairseqTask.get_batch_iterator``), and reuses them
    in every later epoch. A run resumed in epoch k > 1 made them with ``seed + k``: the same
    examples, but equal lengths in another order, so batches differ and the resumed training
    drifts from the run it continues (a kill in epoch 2 resumed to a slightly different model).
    Where the batches are reused across epochs, the first iterator of a resumed run is made as
    in epoch 1; the checkpoint's iterator state then sets its epoch and position."""
    import inspect

    from fairseq.tasks import FairseqTask

    original = FairseqTask.get_batch_iterator
    signature = inspect.signature(original)

    def first_epoch_batches(self: Any, *args: Any, **kwargs: Any) -> Any:
        call = signature.bind(self, *args, **kwargs)
        call.apply_defaults()
        given = call.arguments
        reused = (
            given["epoch"] > 1
            and not given["disable_iterator_cache"]
            and not given["update_epoch_batch_itr"]
            and not getattr(self.cfg, "rebuild_batches", False)
            and given["dataset"] not in self.dataset_to_epoch_iter
            and self.can_reuse_epoch_itr(given["dataset"])
        )
        if reused:
            given["epoch"] = 1
        return original(*call.args, **call.kwargs)

    FairseqTask.get_batch_iterator = first_epoch_batches  # type: ignore[method-assign]


def _criterion_takes(name: str, setting: str) -> bool:
    """Whether fairseq criterion ``name`` (registered by now) has the setting ``setting``."""
    from fairseq.criterions import CRITERION_DATACLASS_REGISTRY

    config = CRITERION_DATACLASS_REGISTRY.get(name)
    return config is not None and setting in getattr(config, "__dataclass_fields__", {})


def _option(args: list[str], flag: str, default: str) -> str:
    """The value of ``flag`` in fairseq arguments; the last one wins, as in argparse."""
    for i in range(len(args) - 2, -1, -1):
        if args[i] == flag:
            return args[i + 1]
    return default


def _distributed_args(rest: list[str]) -> list[str]:
    """Under torchrun (``--nproc``) each worker tells fairseq its rank explicitly: fairseq 0.12's
    own reading of the torchrun environment divides by ``torch.cuda.device_count()`` and fails
    on CPU. On CPU the collectives go through gloo, and fairseq's ``legacy_ddp`` replaces
    PyTorch's DistributedDataParallel (which fairseq hands a CUDA ``device_ids`` list).

    Every rank reads a checkpoint it starts or resumes from itself: fairseq otherwise loads it
    on rank 0 and sends it to the others as a pickle whose cfg is an OmegaConf ``DictConfig``,
    which torch's weights-only loader refuses (a continued model could not train on 8 GPUs)."""
    import torch

    if "WORLD_SIZE" not in os.environ or "--distributed-init-method" in rest:
        return []
    args = [
        "--distributed-init-method", "env://",
        "--distributed-world-size", os.environ["WORLD_SIZE"],
        "--distributed-rank", os.environ["RANK"],
        "--device-id", os.environ.get("LOCAL_RANK", "0"),
        "--distributed-no-spawn",
    ]  # fmt: skip
    if "--load-checkpoint-on-all-dp-ranks" not in rest:
        args.append("--load-checkpoint-on-all-dp-ranks")
    if not torch.cuda.is_available():
        if "--distributed-backend" not in rest:
            args += ["--distributed-backend", "gloo"]
        if "--ddp-backend" not in rest:
            args += ["--ddp-backend", "legacy_ddp"]
    return args


def _parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(prog="fairseq_entry train", add_help=False)
    parser.add_argument("--models", default="", help="comma-separated mtcore.models plugins")
    parser.add_argument("--threads", type=int, default=0, help="torch threads; 0 keeps torch's")
    parser.add_argument("--too-long", choices=("error", "skip"), default="error")
    parser.add_argument("--nproc", type=int, default=1, help="processes, through torchrun")
    parser.add_argument("--label-smoothing", type=float, default=None)
    parser.add_argument("--r2l", action="store_true", help="train on reversed targets")
    parser.add_argument("--keep-best", type=int, default=0, help="keep the best N checkpoints")
    parser.add_argument("--bleu-tokenize", default="", help="sacrebleu tokenizer of dev BLEU")
    split = argv.index("--") if "--" in argv else len(argv)
    return parser.parse_args(argv[:split]), argv[split + 1 :]


def _launch(nproc: int, argv: list[str]) -> None:
    """Runs ``nproc`` copies of this entry through torch's own launcher (torchrun, standalone
    rendezvous on this machine). The launcher runs in this process, which dies with the step;
    each worker dies with the launcher. The workers' arguments travel in the environment:
    torchrun's parser would otherwise read them too (``--nproc`` is "ambiguous" to it)."""
    from torch.distributed.run import main as torchrun

    os.environ[PARENT_ENV] = str(os.getpid())
    os.environ[WORKER_ARGV] = json.dumps(argv)
    standalone = ["--standalone", "--nnodes=1", f"--nproc-per-node={nproc}"]
    torchrun([*standalone, "-m", MODULE, "worker"])


def _train(argv: list[str]) -> None:
    ours, rest = _parse(argv)
    if ours.nproc > 1 and "LOCAL_RANK" not in os.environ:
        _launch(ours.nproc, ["train", *argv])
        return
    noted = _signalled()
    # fairseq_cli.train's own format, set before any fairseq import can configure the root
    # logger first; the train step parses these lines.
    logging.basicConfig(
        format="%(asctime)s | %(levelname)s | %(name)s | %(message)s",
        datefmt="%Y-%m-%d %H:%M:%S",
        level=logging.INFO,
        stream=sys.stdout,
        force=True,
    )
    with deferred():  # every fairseq import below finds it loaded
        import fairseq  # noqa: F401
    import torch

    if ours.threads > 0:
        torch.set_num_threads(ours.threads)
    register_models([m for m in ours.models.split(",") if m])
    add_safe_globals()
    if ours.too_long == "error":
        _refuse_long_examples()
    if ours.r2l:
        _reverse_targets()
    if ours.keep_best > 0:
        _keep_best(Path(_option(rest, "--save-dir", "checkpoints")), ours.keep_best)
    if "--eval-bleu" in rest:
        _empty_outputs_score_zero_bleu()
        if ours.bleu_tokenize:
            _dev_bleu_tokenized(ours.bleu_tokenize)
    _resumed_batches_as_in_epoch_one()
    if os.environ.get(SAVE_SIGNAL_ENV):
        _save_and_exit_when_signalled(noted)
    if "--bf16" in rest and "--tpu" not in rest and torch.cuda.is_available():
        _bf16_on_cuda()
    criterion = _option(rest, "--criterion", "cross_entropy")
    if ours.label_smoothing is not None and _criterion_takes(criterion, "label_smoothing"):
        rest += ["--label-smoothing", str(ours.label_smoothing)]
    from fairseq_cli import train

    sys.argv = ["fairseq-train", *rest, *_distributed_args(rest)]
    train.cli_main()


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv == ["worker"] and WORKER_ARGV in os.environ:  # a rank started by _launch
        argv = json.loads(os.environ[WORKER_ARGV])
    if not argv or argv[0] != "train":
        sys.exit(
            "usage: python -m mtcore_plugins.steps._fairseq_entry train [--models a,b] "
            "[--threads N] [--too-long error|skip] [--nproc N] [--label-smoothing X] [--r2l] "
            "[--keep-best N] -- FAIRSEQ_TRAIN_ARGS..."
        )
    die_with_parent()
    _train(argv[1:])


if __name__ == "__main__":
    main()
