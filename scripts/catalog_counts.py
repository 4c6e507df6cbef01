"""The parameter-count check of docs/models.md, as Markdown tables.

    python scripts/catalog_counts.py              # every catalog model: analytic, transformers, published
    python scripts/catalog_counts.py --uncovered  # default configs of other model types: counted or refused
    python scripts/catalog_counts.py --covered    # default config of every covered model type: exact

The transformers count is `sum(p.numel())` of the model built from the same config on the meta
device (tied weights once); for bert, the encoder with its pooler, as gpuhours counts it. Needs
transformers and torch (the package's `torch` extra).
"""

from __future__ import annotations

import argparse
from typing import Any

import torch
import transformers

from gpuhours import catalog
from gpuhours.errors import InputError
from gpuhours.estimate.arch import COVERED_MODEL_TYPES, from_hf_config
from gpuhours.estimate.arch_remote import REMOTE_CODE_MODEL_TYPES
from gpuhours.estimate.params import count_params

#: model types outside the analytic model, at their transformers default configs
UNCOVERED = ("olmo", "olmo2", "cohere", "gemma3_text",
             "bamba", "zamba2", "granitemoeshared", "phimoe",
             "deepseek_v32")
#: covered types whose transformers default config leaves out a field the estimate needs
DEFAULT_FIXES: dict[str, dict[str, Any]] = {"deepseek_v2": {"num_experts_per_tok": 6}}


def built_count(config: dict[str, Any]) -> int:
    with torch.device("meta"):
        if config["model_type"] == "bert":
            fields = {k: v for k, v in config.items() if k != "model_type"}
            model = transformers.BertModel(transformers.BertConfig(**fields))
        elif config["model_type"] in ("qwen2_vl", "qwen2_5_vl", "llava", "llava_next", "gemma3",
                                      "llama4", "qwen3_5", "qwen3_5_moe"):  # tower and LM
            hf_config = transformers.AutoConfig.for_model(**config)
            model = transformers.AutoModelForImageTextToText.from_config(hf_config)
        else:
            hf_config = transformers.AutoConfig.for_model(**config)
            model = transformers.AutoModelForCausalLM.from_config(hf_config)
    return sum(p.numel() for p in model.parameters())


def catalog_table() -> list[str]:
    rows = ["| catalog name | model_type | analytic | transformers | exact | published | "
            "analytic vs published |", "|---|---|---:|---:|:-:|---:|---:|"]
    for entry in catalog.models():
        _, config = catalog.model(entry.name)
        counts = count_params(from_hf_config(config, entry.name))
        analytic = counts.total
        # a card that sizes the language model alone (published_params_scope): compared without
        # the vision tower
        lm_only = entry.published_params_scope == "language_model"
        gap = (analytic - (counts.vision if lm_only else 0) - entry.published_params
               ) / entry.published_params
        if config["model_type"] in REMOTE_CODE_MODEL_TYPES:  # no transformers class to build
            rows.append(f"| {entry.name} | {config['model_type']} | {analytic:,} | remote code "
                        f"| hand count (tests/test_qwen1.py) | {entry.published_params:,.0f} | "
                        f"{gap:+.2%} |")
            continue
        real = built_count(config)
        rows.append(f"| {entry.name} | {config['model_type']} | {analytic:,} | {real:,} | "
                    f"{'yes' if analytic == real else 'NO'} | {entry.published_params:,.0f}"
                    f"{' (language model)' if lm_only else ''} | {gap:+.2%} |")
    return rows


def uncovered_table() -> list[str]:
    rows = [f"| model_type (transformers {transformers.__version__} default config) | "
            "transformers | gpuhours |", "|---|---:|---|"]
    for model_type in UNCOVERED:
        config = transformers.AutoConfig.for_model(model_type).to_dict()
        real = built_count({**config, "model_type": config.get("model_type", model_type)})
        try:
            arch = from_hf_config(config, model_type)
            generic = count_params(arch).total - arch.extra_params
            verdict = (f"counted on the meta device; the generic shape is {generic - real:+,} "
                       f"({(generic - real) / real:+.3%}) off, carried as extra")
        except InputError as e:
            reason = e.message.split(": transformers builds")[-1]
            verdict = "refused: " + (reason.split(", so its shape")[0].split(", and ")[-1]
                                     if "reading its fields" in reason or "cannot be read" in reason
                                     else reason)
        rows.append(f"| {model_type} | {real:,} | {verdict} |")
    return rows


def covered_table() -> list[str]:
    rows = [f"| model_type (transformers {transformers.__version__} default config) | gpuhours | "
            "transformers | exact |", "|---|---:|---:|:-:|"]
    for model_type in sorted(COVERED_MODEL_TYPES):
        config = {**transformers.AutoConfig.for_model(model_type).to_dict(),
                  **DEFAULT_FIXES.get(model_type, {})}
        analytic = count_params(from_hf_config(config, model_type)).total
        real = built_count({**config, "model_type": model_type})
        rows.append(f"| {model_type} | {analytic:,} | {real:,} | "
                    f"{'yes' if analytic == real else 'NO'} |")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--uncovered", action="store_true",
                        help="other model types at their default configs instead of the catalog")
    parser.add_argument("--covered", action="store_true",
                        help="every covered model type at its default config")
    args = parser.parse_args()
    transformers.logging.set_verbosity_error()
    table = (uncovered_table() if args.uncovered else covered_table() if args.covered
             else catalog_table())
    print("\n".join(table))


if __name__ == "__main__":
    main()
