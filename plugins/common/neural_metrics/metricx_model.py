"""MetricX's regression model (google-research/metricx, ``metricx24/models.py``) and a predictor
that scores formatted inputs with it, read from a local directory as data only.

``MT5ForRegression`` is the released class, built from transformers' own mT5 blocks
(``MT5PreTrainedModel``, ``MT5Stack``): an mT5 encoder-decoder run for one decoder step from the
input id 0, whose score is one logit of the language-model head::

    decoder_input_ids = torch.LongTensor([0]).repeat(batch_size).reshape(-1, 1)
    ...
    if self.config.tie_word_embeddings:
      sequence_output = sequence_output * (self.model_dim**-0.5)
    lm_logits = self.lm_head(sequence_output)
    # 250089 = <extra_id_10>
    predictions = lm_logits[:, 0, 250089]
    # Clip to 0 to 25
    predictions = torch.clamp(predictions, 0, 25)

Loading refuses anything that would run the model's own code: ``config.json`` with an
``auto_map`` or of another model type, and pickled weights other than plain tensors
(``torch.load(weights_only=True)``); safetensors are preferred. The tokenizer is mT5's: a
directory with ``tokenizer_config.json`` loads as the released ``predict.py`` loads it
(``AutoTokenizer``, the fast tokenizer), one with only ``spiece.model`` (as ``fetch_model``
leaves it) as mT5's fast tokenizer over that SentencePiece model.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from transformers import MT5Config
from transformers.modeling_outputs import ModelOutput
from transformers.models.mt5.modeling_mt5 import MT5PreTrainedModel, MT5Stack

from mtcore.api import DataError, PluginError
from mtcore.api.engine import thread_count
from mtcore_plugins.common.neural_metrics.metricx_config import (
    MAX_SCORE,
    REGRESSION_ID,
    MetricXConfig,
    read_small_json,
    resolve,
    tokenizer_dir,
    weight_files,
)
from mtcore_plugins.common.runtime.isolated import report


@dataclass
class MT5ForRegressionOutput(ModelOutput):  # type: ignore[misc]
    loss: torch.Tensor | None = None
    predictions: torch.Tensor | None = None


class MT5ForRegression(MT5PreTrainedModel):  # type: ignore[misc]
    """The released MetricX model: mT5's encoder and decoder, the score read from one logit.

    As released but for two points that change no number: the decoder's input follows the
    encoder's device (the released code moves it to CUDA whenever CUDA exists, so it fails on
    the CPU of a GPU machine), and the one-step decoder keeps no cache."""

    def __init__(self, config: MT5Config) -> None:
        super().__init__(config)
        self.model_dim = config.d_model
        self.shared = nn.Embedding(config.vocab_size, config.d_model)
        encoder_config = copy.deepcopy(config)
        encoder_config.is_decoder = False
        encoder_config.use_cache = False
        encoder_config.is_encoder_decoder = False
        self.encoder = MT5Stack(encoder_config, self.shared)
        decoder_config = copy.deepcopy(config)
        decoder_config.is_decoder = True
        decoder_config.is_encoder_decoder = False
        decoder_config.num_layers = config.num_decoder_layers
        self.decoder = MT5Stack(decoder_config, self.shared)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.shared

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
    ) -> MT5ForRegressionOutput:
        hidden_states = self.encoder(
            input_ids=input_ids, attention_mask=attention_mask, return_dict=True
        ).last_hidden_state
        # One step of dummy input for the decoder (id 0, mT5's pad and decoder start).
        decoder_input_ids = torch.zeros(
            (input_ids.size(0), 1), dtype=torch.long, device=input_ids.device
        )
        sequence_output = self.decoder(
            input_ids=decoder_input_ids,
            encoder_hidden_states=hidden_states,
            encoder_attention_mask=attention_mask,
            use_cache=False,
            return_dict=True,
        ).last_hidden_state
        if self.config.tie_word_embeddings:
            # Rescale before projecting on the vocabulary, as mesh-tensorflow does.
            sequence_output = sequence_output * (self.model_dim**-0.5)
        lm_logits = self.lm_head(sequence_output)
        predictions = torch.clamp(lm_logits[:, 0, REGRESSION_ID], 0, MAX_SCORE)
        loss = None
        if labels is not None:
            loss = nn.MSELoss()(predictions.view(-1), labels.to(predictions.device).view(-1))
        return MT5ForRegressionOutput(loss=loss, predictions=predictions)


def read_json(path: Path) -> dict[str, Any]:
    """A configuration file as data, refused when it names code to run (``auto_map``)."""
    data = read_small_json(path)
    if "auto_map" in data:
        raise DataError(
            f"{path} has an auto_map (code of the model's own to run); MetricX is a plain mT5 "
            "and is never loaded with trust_remote_code"
        )
    return data


def read_config(model_dir: Path) -> MT5Config:
    path = model_dir / "config.json"
    if not path.is_file():
        raise PluginError(f"{model_dir} has no config.json: not a MetricX model directory")
    values = read_json(path)
    if values.get("model_type") != "mt5":
        raise DataError(
            f"{path}: model_type is {values.get('model_type')!r}; a MetricX model is an mT5 "
            "(model_type mt5)"
        )
    config = MT5Config.from_dict(values)
    if config.vocab_size <= REGRESSION_ID:
        raise DataError(
            f"{path}: vocab_size {config.vocab_size} has no id {REGRESSION_ID}, the logit "
            "MetricX reads its score from"
        )
    return config


def read_weights(model_dir: Path) -> dict[str, torch.Tensor]:
    """Every tensor of the checkpoint, on the CPU, read as data only."""
    from safetensors.torch import load_file

    state: dict[str, torch.Tensor] = {}
    for path in weight_files(model_dir):
        if path.suffix == ".safetensors":
            state.update(load_file(str(path), device="cpu"))
            continue
        try:
            loaded = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as exc:  # weights_only refuses any global outside plain tensors
            raise DataError(
                f"{path}: not plain tensors, refused (torch.load(weights_only=True): "
                f"{str(exc).splitlines()[0]}); give model.safetensors"
            ) from None
        if not isinstance(loaded, dict):
            raise DataError(f"{path}: not a state dict")
        state.update(loaded)
    return state


def load_model(model_dir: Path, precision: str, device: str) -> MT5ForRegression:
    """The model in eval mode on ``device``: built on the meta device (no random init of
    billions of weights), then given the checkpoint's tensors."""
    config = read_config(model_dir)
    state = read_weights(model_dir)
    with torch.device("meta"):
        model = MT5ForRegression(config)
    shared = state.get("shared.weight")
    if shared is not None:  # save_pretrained keeps the shared embedding once
        for alias in ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight"):
            state.setdefault(alias, shared)
        if config.tie_word_embeddings:
            state["lm_head.weight"] = shared
    expected = set(model.state_dict())
    missing, unexpected = sorted(expected - set(state)), sorted(set(state) - expected)
    if missing or unexpected:
        raise DataError(
            f"{model_dir}: not a MetricX (MT5ForRegression) checkpoint: missing "
            f"{missing[:5] or 'none'}, unexpected {unexpected[:5] or 'none'}"
        )
    model.load_state_dict(state, strict=True, assign=True)
    if config.tie_word_embeddings:
        model.lm_head.weight = model.shared.weight
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    nn.Module.to(model, device=device, dtype=dtype)  # in place (PreTrainedModel.to hides it)
    return model.eval()


def load_tokenizer(directory: Path) -> Any:
    """mT5's tokenizer from ``directory``, checked to end an input with ``</s>`` (the token the
    released code removes)."""
    from transformers import AutoTokenizer, T5TokenizerFast

    if (directory / "tokenizer_config.json").is_file():
        read_json(directory / "tokenizer_config.json")
        tokenizer = AutoTokenizer.from_pretrained(
            str(directory), local_files_only=True, trust_remote_code=False
        )
    elif (directory / "spiece.model").is_file():
        # As AutoTokenizer reads google/mt5-*'s tokenizer_config.json: extra_ids 0, the legacy
        # handling of text after special tokens (no "legacy" key there). Through
        # from_pretrained, not the constructor: T5TokenizerFast(vocab_file=...) converts with
        # add_prefix_space None, and transformers 4.57 then drops the "▁" SentencePiece puts
        # before the first word (other ids than the model was trained on).
        tokenizer = T5TokenizerFast.from_pretrained(
            str(directory), extra_ids=0, legacy=True, local_files_only=True
        )
    else:
        raise PluginError(
            f"{directory} holds no mT5 tokenizer (spiece.model or tokenizer_config.json)"
        )
    ids = tokenizer("a")["input_ids"]
    if tokenizer.eos_token_id is None or ids[-1] != tokenizer.eos_token_id:
        raise DataError(
            f"{directory}: the tokenizer does not end an input with an end-of-sequence token; "
            "MetricX needs mT5's (google/mt5-xl)"
        )
    return tokenizer


def pick_device(device: str) -> str:
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise PluginError("device: cuda, but torch sees no CUDA device; use cpu or auto")
    return device


class MetricXPredictor:
    """A loaded model and tokenizer; :meth:`predict` scores formatted input texts."""

    def __init__(self, model_dir: Path, tokenizer: Path, config: MetricXConfig) -> None:
        torch.set_num_threads(thread_count(config.threads))
        self.model_dir = model_dir
        self.device = pick_device(config.device)
        self.config = config
        self.tokenizer = load_tokenizer(tokenizer)
        self.model = load_model(model_dir, config.precision, self.device)

    def encode(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids as the released ``predict.py`` makes them: truncated to the length, then
        the last token (``</s>``, or the last kept one when truncated) dropped (``_remove_eos``:
        ``example["input_ids"] = example["input_ids"][:-1]``)."""
        encoded = self.tokenizer(
            list(texts), max_length=self.config.input_length(), truncation=True, padding=False
        )
        return [list(ids[:-1]) for ids in encoded["input_ids"]]

    def predict(self, texts: Sequence[str]) -> list[float]:
        """One score per text, in order. Identical texts are scored once; the others go in
        batches of similar length (longest first), so padding costs little."""
        unique = list(dict.fromkeys(texts))
        ids = self.encode(unique)
        order = sorted(range(len(unique)), key=lambda i: -len(ids[i]))
        scores = [0.0] * len(unique)
        size = self.config.batch_size
        for start in range(0, len(order), size):
            rows = order[start : start + size]
            for row, score in zip(rows, self._forward([ids[i] for i in rows]), strict=True):
                scores[row] = score
            report(start + len(rows), len(order))
        where = {text: i for i, text in enumerate(unique)}
        return [scores[where[text]] for text in texts]

    def _forward(self, batch: list[list[int]]) -> list[float]:
        width = max(len(ids) for ids in batch)
        pad = self.tokenizer.pad_token_id or 0
        input_ids = torch.full((len(batch), width), pad, dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for row, ids in enumerate(batch):
            input_ids[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
            mask[row, : len(ids)] = 1
        with torch.inference_mode():
            out = self.model(input_ids.to(self.device), attention_mask=mask.to(self.device))
        return [float(x) for x in out.predictions.float().cpu()]


def load_predictor(
    config: MetricXConfig, resources: Mapping[str, Path], what: str
) -> MetricXPredictor:
    """The predictor of ``config``'s model and tokenizer, each a step input or a path."""
    model_dir = resolve(config.model, resources, what)
    if not model_dir.is_dir():
        raise PluginError(f"{what}: the MetricX model {model_dir} is not a directory")
    tokenizer = (
        resolve(config.tokenizer, resources, what) if config.tokenizer else tokenizer_dir(model_dir)
    )
    return MetricXPredictor(model_dir, tokenizer, config)
