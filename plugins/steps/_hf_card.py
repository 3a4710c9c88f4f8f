"""The model card (``README.md``) of a ``mtcore export --format huggingface`` directory: the
Hub's metadata (languages, licence, pipeline, the stage's scores with their sacrebleu
signatures as a ``model-index``), how to translate with it, and what the export leaves out."""

from __future__ import annotations

from pathlib import Path
from typing import Any

CARD = "README.md"


def write_card(out: Path, info: dict[str, Any]) -> None:
    """``README.md`` in ``out`` from the export's record (``mtcore_export.json``'s content)."""
    (out / CARD).write_text(model_card(info), encoding="utf-8")


def metadata(info: dict[str, Any]) -> dict[str, Any]:
    """The card's YAML header: what the Hub indexes."""
    src, tgt = info["src"], info["tgt"]
    scores = {k: v for k, v in info.get("scores", {}).items() if isinstance(v, dict)}
    metrics = [
        {
            "type": name.lower(),
            "name": name,
            "value": round(float(score["score"]), 2),
            "args": {"signature": score.get("signature", "")},
        }
        for name, score in scores.items()
        if "score" in score
    ]
    test = info.get("test_set") or "test"
    return {
        "language": [src, tgt],
        "license": "other",
        "license_name": "training-data-licences",
        "library_name": "transformers",
        "pipeline_tag": "translation",
        "tags": ["translation", "mtcore", *(["fairseq"] if "fairseq" in info else [])],
        "model-index": [
            {
                "name": f"{info['recipe']}-{info['stage']}-{src}-{tgt}",
                "results": [
                    {
                        "task": {"type": "translation", "name": f"Translation {src}-{tgt}"},
                        "dataset": {"type": test, "name": test},
                        "metrics": metrics,
                    }
                ],
            }
        ],
    }


def model_card(info: dict[str, Any]) -> str:
    """The card's text: YAML metadata, then Markdown."""
    import yaml

    src, tgt, search = info["src"], info["tgt"], info["search"]
    check = info.get("quantization_check", {})
    rows = [
        f"| {name} | {score['score']:.2f} | `{score.get('signature', '')}` |"
        for name, score in info.get("scores", {}).items()
        if isinstance(score, dict) and "score" in score
    ]
    outside = [f"- `{s['id']}` ({s['kind']})" for s in info.get("not_included", [])]
    cap = f"floor({search['max_len_a']} * source ids + {search['max_len_b']})"
    notes = limits(info)
    lines = [
        "---",
        yaml.safe_dump(metadata(info), allow_unicode=True, sort_keys=False).strip(),
        "---",
        "",
        f"# {info['recipe']}: stage {info['stage']}, {src} → {tgt}",
        "",
        f"The model of step `{info['step']}` of mtcore's recipe `{info['recipe']}` (profile "
        f"`{info['profile']}`, mtcore {info['mtcore']}), as transformers' "
        f"`{info['architecture']}` in {info['quantization']}, exported by `mtcore export "
        "--format huggingface`. Its tokenizer and search are the run's: ids, beam search and "
        "output equal the step's own decoding (checked at export on a probe).",
        "",
        "## Scores",
        "",
        f"The stage's scores on its test set `{info.get('test_set') or 'test'}` (the whole "
        "stage, with the steps listed under *Not included*):",
        "",
        "| metric | score | sacrebleu signature |",
        "|---|---|---|",
        *rows,
        "",
        f"This directory alone, through `generate`, on the same {check.get('lines', '?')} "
        f"lines as the run fed the step, before the steps after it: BLEU "
        f"{check.get('exported', '?')} (the step's model unquantized, through CTranslate2: "
        f"{check.get('unquantized', '?')}; `{check.get('signature', '')}`).",
        "",
        "## Use",
        "",
        "```python",
        "from transformers import pipeline",
        "",
        'translate = pipeline("translation", model="PATH/TO/THIS/DIRECTORY")',
        'print(translate("…")[0]["translation_text"])',
        "```",
        "",
        f"Needs transformers {info['transformers']} or later, torch and sentencepiece. "
        f"`generation_config.json` holds the search: beam {search['beam_size']}, length "
        f"penalty {search['length_penalty']}, n-gram block {search['no_repeat_ngram_size']}. "
        f"The run capped each output at {cap} tokens; transformers' generate reads no such "
        f"rule: pass `max_new_tokens` = that cap + 1 for the run's, else the cap is "
        "`max_length`.",
        "",
        "## Not included",
        "",
        "Steps of the stage outside this model: its input must be what the ones before it "
        "make, and its output is what the ones after it take.",
        "",
        *(outside or ["- none"]),
        "",
        "## Limits",
        "",
        *notes,
        "",
        "## Training data",
        "",
        f"The corpora of recipe `{info['recipe']}`: their licences bind this model; mtcore "
        "records none (hence `license: other`).",
        "",
    ]
    return "\n".join(lines)


def limits(info: dict[str, Any]) -> list[str]:
    """Where a transformers user's translations part from the run's, as Markdown items."""
    search = info["search"]
    return [
        *(
            [
                "- A greedy search: transformers' translation pipeline searches with 4 beams "
                "unless given `num_beams=1` (generation_config.json's 1 is the default value "
                "the pipeline replaces)."
            ]
            if search["beam_size"] == 1
            else []
        ),
        "- An empty line: the run translates it to nothing; `generate` writes something.",
        *(
            ["- A right-to-left model: its output pieces are in reverse order."]
            if info.get("direction") == "r2l"
            else []
        ),
        *(
            [
                "- `save_pretrained` of the loaded model leaves out the position table (Marian's "
                "class takes it for its own sinusoids); copy the files, or set "
                "`model._keys_to_ignore_on_save = None` first.",
                "- A line that starts with `>>…<<` loses that part to MarianTokenizer (Marian's "
                "language codes), and MarianTokenizer strips the output's outer spaces.",
            ]
            if info.get("architecture") == "MarianMTModel"
            else []
        ),
    ]
