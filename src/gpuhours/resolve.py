"""Turn what a user typed (a model name or config path, a GPU name or its numbers) into the
architecture and accelerator the estimator needs, with the basis of each. Reads the catalog
only: a GPU measured into the ledger is gpuhours.api.gpu_spec's."""

from __future__ import annotations

import math
import os
import re
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuhours import catalog
from gpuhours.catalog._names import base_names, close_keys, normalise
from gpuhours.catalog.schema import USER_BANDWIDTH_SOURCE, DenseTflops, GpuSpec
from gpuhours.errors import FieldError, UnknownNameError
from gpuhours.estimate.arch import ModelArch, from_hf_config, heads_split_problem, standard_shape

if TYPE_CHECKING:
    from gpuhours.setup import ConfigValue


#: a Hugging Face Hub repository id: owner/name
_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")


def hf_hub_cache_dir() -> Path:
    """The local Hugging Face hub cache, as huggingface_hub finds it: $HF_HUB_CACHE, else
    $HF_HOME/hub, else ~/.cache/huggingface/hub ($XDG_CACHE_HOME in place of ~/.cache)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path("~/.cache").expanduser())
    return Path(cache) / "huggingface" / "hub"


def cached_hub_config(hub_id: str) -> Path | None:
    """The config.json of `hub_id` in the local Hugging Face cache, or None: the snapshot that
    refs/main names (what `from_pretrained` loads), else the newest snapshot holding one. The
    cache layout is huggingface_hub's: models--{owner}--{name}/snapshots/{revision}/."""
    repo = hf_hub_cache_dir() / ("models--" + hub_id.replace("/", "--"))
    snapshots = repo / "snapshots"
    main = repo / "refs" / "main"
    try:
        if main.is_file():
            pinned = snapshots / main.read_text(encoding="utf-8").strip() / "config.json"
            if pinned.is_file():
                return pinned
        found = [p for p in snapshots.glob("*/config.json") if p.is_file()]
    except OSError:
        return None
    return max(found, key=lambda p: p.stat().st_mtime) if found else None


def _catalog_key(name: str) -> str | None:
    """The catalog name whose name, alias or hf_id has the key of `name`, or None."""
    key = normalise(name)
    for entry in catalog.models():
        if key in {normalise(n) for n in (entry.name, *entry.aliases, entry.hf_id)}:
            return entry.name
    return None


def _tuned_to_base(model: str) -> tuple[str, str] | None:
    """(catalog name, note) for a tuned release's name (an -Instruct/-Chat/-it id, with or
    without its owner) whose base is in the catalog, or None."""
    short = model.rsplit("/", 1)[-1]
    for name in (short, *base_names(short)):
        found = _catalog_key(name)
        if found is not None:
            same = normalise(name) == normalise(short)
            note = (f"{model} read as the catalog's {found}" if same else
                    f"{model} mapped to the catalog's {found}: a tuned release ({short}) has "
                    f"its base model's architecture")
            return found, note
    return None


def _unknown_model(model: str) -> UnknownNameError:
    keys = {normalise(n): entry.name for entry in catalog.models()
            for n in (entry.name, *entry.aliases, entry.hf_id)}
    close: list[str] = []
    for key in close_keys(model.rsplit("/", 1)[-1], keys) + close_keys(model, keys):
        if keys[key] not in close:
            close.append(keys[key])
    e = UnknownNameError("model", model, close[:3],
                         "Give a catalog name (`gpuhours catalog models`), a path to a "
                         "config.json or a model directory, or a Hugging Face id whose "
                         f"config.json is in the local cache ({hf_hub_cache_dir()}; "
                         "`huggingface-cli download ID config.json` puts it there).")
    e.where, e.fields = "model", ("model",)
    return e


def _find_model(model: str) -> tuple[Any, dict[str, Any], str, str]:
    """(catalog entry or None, config, display name, basis) of what the user typed: a catalog
    name, alias or Hub id; a config.json or model directory; a Hub id in the local Hugging Face
    cache; a tuned release of a catalog model (-Instruct, -Chat, -it). Else UnknownNameError
    (keyed by `model`) with close names."""
    is_path = Path(model).expanduser().exists()
    hub = (bool(_HUB_ID.match(model)) and not is_path and not model.lower().endswith(".json")
           and _catalog_key(model) is None)
    if hub:
        path = cached_hub_config(model)
        if path is not None:
            _, cfg = catalog.model(path)
            return None, cfg, model, (f"config.json of {model} in the local Hugging Face "
                                      f"cache ({path})")
    elif not is_path:
        try:
            entry, cfg = catalog.model(model)
            return entry, cfg, entry.name if entry else model, ""
        except UnknownNameError:
            pass
    else:
        _, cfg = catalog.model(Path(model).expanduser())
        return None, cfg, model, f"config.json {model}"
    mapped = _tuned_to_base(model)
    if mapped is None:
        raise _unknown_model(model)
    entry, cfg = catalog.model(mapped[0])
    return entry, cfg, model, mapped[1]


def model_config(model: str, overrides: dict[str, ConfigValue] | None = None
                 ) -> tuple[dict[str, Any], str, str]:
    """(config dict with `overrides` applied, display name, basis) of a catalog name, a
    config.json path or model directory, or a Hugging Face id (see _find_model). Errors are
    keyed by the field `model`."""
    if not model.strip():
        raise FieldError("model", "expected a catalog name or a path to a config.json, got ''.")
    entry, cfg, name, found = _find_model(model)
    overrides = overrides or {}
    check_overrides(cfg, overrides, name)
    cfg = {**cfg, **overrides}
    if entry is not None:
        basis = f"catalog config of {entry.hf_id} ({entry.config_file})"
        if found:
            basis = f"{found}; {basis}"
    else:
        basis = found or f"config.json {model}"
    if overrides:
        basis += " with " + ", ".join(f"{k}={v}" for k, v in overrides.items())
    return cfg, name, basis


#: config fields a model may set although its config.json leaves them out (transformers then
#: uses its default): the optional fields gpuhours.estimate.arch reads, and the common
#: PretrainedConfig fields. Checked without importing transformers (the light path).
OPTIONAL_CONFIG_KEYS = frozenset({
    "num_key_value_heads", "head_dim", "tie_word_embeddings", "attention_bias", "mlp_bias",
    "max_position_embeddings", "num_local_experts", "num_experts", "num_experts_per_tok",
    "moe_intermediate_size", "shared_expert_intermediate_size", "intermediate_size",
    "rope_theta", "rope_scaling", "sliding_window", "use_sliding_window", "max_window_layers",
    "attention_dropout", "hidden_dropout", "hidden_act", "rms_norm_eps", "layer_norm_eps",
    "initializer_range", "use_cache", "torch_dtype", "dtype", "bos_token_id", "eos_token_id",
    "pad_token_id", "output_router_logits", "router_aux_loss_coef",
})
#: size fields: a whole number >= 1 when set (names as transformers' configs spell them,
#: gpt2's n_* and mpt's d_model/n_* included)
SIZE_CONFIG_KEYS = frozenset({
    "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
    "head_dim", "intermediate_size", "vocab_size", "max_position_embeddings",
    "num_local_experts", "num_experts", "num_experts_per_tok", "moe_intermediate_size",
    "n_embd", "n_head", "n_layer", "n_positions", "n_inner", "d_model", "n_heads", "n_layers",
    "max_seq_len",
})
#: (hidden size, attention heads, key-value heads) under each spelling
_SHAPE_KEYS = (("hidden_size", "num_attention_heads", "num_key_value_heads"),
               ("n_embd", "n_head", None), ("d_model", "n_heads", None))


def check_overrides(cfg: dict[str, Any], overrides: dict[str, ConfigValue], model: str
                    ) -> None:
    """Reject `--set` overrides that transformers would not read or that cannot run, before
    any model is built: a key that is neither a field of the model's config (its text_config
    included) nor in OPTIONAL_CONFIG_KEYS (close matches suggested); a size that is not a
    whole number >= 1; a hidden size the attention heads do not divide (when no head_dim is
    given, or a head_dim given for the model types whose transformers config refuses it all
    the same: arch.HIDDEN_SPLIT_BY_HEADS_MODEL_TYPES); attention heads the key-value heads do
    not divide. Errors are keyed by
    `config_overrides` (the CLI's --set) and name the key."""
    if not overrides:
        return
    import difflib

    text = cfg.get("text_config")
    known = set(cfg) | (set(text) if isinstance(text, dict) else set()) | OPTIONAL_CONFIG_KEYS
    for key, value in overrides.items():
        if key not in known:
            close = difflib.get_close_matches(key, sorted(known), n=3)
            raise FieldError("config_overrides", f"unknown config key {key!r} for {model}"
                             f" (model_type {cfg.get('model_type', 'llama')})."
                             + (f" Did you mean: {', '.join(close)}?" if close else ""),
                             "Keys are the fields of the model's config.json and common "
                             "optional ones (gpuhours.resolve.OPTIONAL_CONFIG_KEYS).")
        if key in SIZE_CONFIG_KEYS and (isinstance(value, bool) or not isinstance(value, int)
                                        or value < 1):
            raise FieldError("config_overrides", f"{key}={value!r}: expected a whole number "
                                                 ">= 1.")
    merged = {**(text if isinstance(text, dict) and "hidden_size" not in cfg else {}),
              **cfg, **overrides}
    for d_key, h_key, kv_key in _SHAPE_KEYS:
        d, heads = merged.get(d_key), merged.get(h_key)
        if not (isinstance(d, int) and isinstance(heads, int) and heads > 0):
            continue
        touched = [k for k in (d_key, h_key, kv_key, "head_dim") if k in overrides]
        if not touched:
            continue
        setting = ", ".join(f"{k}={overrides[k]}" for k in touched)
        if d % heads and (merged.get("head_dim") is None
                          or heads_split_problem(merged, str(merged.get("model_type", "llama")))):
            raise FieldError("config_overrides", f"{setting}: {d_key} ({d}) is not a multiple "
                             f"of {h_key} ({heads}), so the heads cannot split it.",
                             f"Set {d_key} to a multiple of {heads}"
                             + ("." if merged.get("head_dim") is not None else
                                ", or give head_dim."))
        kv = merged.get(kv_key) if kv_key else None
        if isinstance(kv, int) and kv > 0 and heads % kv:
            raise FieldError("config_overrides", f"{setting}: {h_key} ({heads}) is not a "
                             f"multiple of {kv_key} ({kv}): each key-value head serves a "
                             "whole group of query heads.")


def resolve_model(model: str | None, params: float | None = None,
                  hidden_size: int | None = None, num_layers: int | None = None,
                  vocab_size: int | None = None,
                  overrides: dict[str, ConfigValue] | None = None) -> tuple[ModelArch, str]:
    """(architecture, basis) from a catalog name, a config.json path, or a parameter count."""
    if model is not None and params is not None:
        raise FieldError(("model", "params"), "give a model or a parameter count, not both.")
    if model is None:
        if params is None:
            raise FieldError(("model", "params"), "a model is required: a catalog name (see "
                             "`gpuhours catalog models`), a path to a config.json, or a "
                             "parameter count such as 7e9.")
        if not math.isfinite(params) or params <= 0:
            raise FieldError("params", f"expected a positive parameter count, got {params!r}.")
        arch = standard_shape(params, name=f"standard-{params:.3g}", hidden_size=hidden_size,
                              num_layers=num_layers, vocab_size=vocab_size)
        return arch, (f"standard Llama-style shape for {params:.3g} parameters "
                      f"(d={arch.hidden_size}, layers={arch.num_layers}, "
                      f"vocab={arch.vocab_size}): assumed, estimate/arch.py standard_shape")
    cfg, name, basis = model_config(model, overrides)
    where = model if basis.startswith("config.json") else f"catalog model {name}"
    arch = from_hf_config(cfg, name=name, where=where)
    if arch.params_basis:
        basis += f"; {arch.params_basis}"
    return arch, basis


#: how to name a GPU the catalog lacks, for commands that take no figures of a GPU of one's
#: own (compare and catalog prices: prices exist for catalog GPUs only; generation: a catalog
#: GPU whose bandwidth --bandwidth-gb-per-s may override). estimate and fit take all three
#: figures (catalog._tables.GPU_HOW_TO_ADD).
GPU_HINT_GENERATION = ("Use a name from `gpuhours catalog gpus` (--bandwidth-gb-per-s then "
                       "overrides its bandwidth), or add a row to "
                       "gpuhours/catalog/data/gpus.yaml.")
GPU_HINT_PRICED = ("Use names from `gpuhours catalog gpus` (only catalog GPUs have prices; "
                   "leave --gpu out for every one), or add a row to "
                   "gpuhours/catalog/data/gpus.yaml and its prices to prices.csv.")


def catalog_gpu(name: str, field: str = "gpu", hint: str | None = None) -> GpuSpec:
    """A catalog GPU; an unknown name is an error keyed by the field that gave it, with its
    close names, and `hint` (what this command takes instead) in place of the catalog's."""
    try:
        return catalog.gpu(name)
    except UnknownNameError as e:
        e.where = field
        e.fields = (field,)
        if hint is not None:
            e.hint = hint
            e.args = (f"{field}: {e.message} {hint}",)
        raise


#: a GPU figure given on the command line (--peak-tflops, --memory-gb, --bandwidth-gb-per-s)
#: may be at most this many times the catalog's largest: a margin for GPUs newer than the
#: catalog, while a slip of units (1e9 TFLOPS for 1e9 FLOPS...) is refused, not turned into a
#: step of 0 us at 0.0% MFU. Assumption: no generation has brought 10x over the last.
USER_FIGURE_CEILING = 10.0


def catalog_largest(key: str) -> tuple[float, str]:
    """The catalog's largest value of a GPU figure (peak_tflops: dense bf16, else fp16;
    memory_gb; bandwidth_gb_per_s), and the GPU that has it."""
    def value(g: GpuSpec) -> float:
        if key == "peak_tflops":
            return g.dense_tflops.bf16 or g.dense_tflops.fp16 or 0.0
        return g.memory_gb if key == "memory_gb" else g.memory_bw_gb_per_s
    top = max(catalog.gpus(), key=value)
    return value(top), top.name


def resolve_gpu(name: str | None, peak_tflops: float | None = None,
                memory_gb: float | None = None,
                bandwidth_gb_per_s: float | None = None) -> GpuSpec:
    """A catalog GPU, optionally with figures overridden, or a custom one from its figures."""
    overrides = {"peak_tflops": peak_tflops, "memory_gb": memory_gb,
                 "bandwidth_gb_per_s": bandwidth_gb_per_s}
    for key, value in overrides.items():
        if value is not None and (not math.isfinite(value) or value <= 0):
            raise FieldError(key, f"expected a positive number, got {value!r}.")
        if value is not None:
            top, top_gpu = catalog_largest(key)
            if value > USER_FIGURE_CEILING * top:
                raise FieldError(key, f"{value:g} is more than {USER_FIGURE_CEILING:g}x the "
                                      f"largest in the GPU catalog ({top:g}, {top_gpu}): no "
                                      f"accelerator is near it, so it is refused as a typo.",
                                 "Give the figure in the option's unit (TFLOPS, GB, GB/s).")
    if name is None and peak_tflops is None:
        raise FieldError(("gpu", "peak_tflops", "memory_gb", "bandwidth_gb_per_s"),
                         "a GPU is required: a catalog name (see `gpuhours catalog gpus`) or "
                         "its peak TFLOPS, memory and bandwidth.")
    if name is not None:
        spec = catalog_gpu(name)
        if not any(v is not None for v in overrides.values()):
            return spec
        update: dict[str, object] = {"source": spec.source + " (figures overridden by the user)"}
        if memory_gb is not None:
            # the catalog's usable MiB would otherwise win over the size given
            update["memory_gb"] = memory_gb
            update["memory_total_mib"] = None
        if bandwidth_gb_per_s is not None:
            # a bandwidth the user gives is the one decode runs at, not the catalog's fitted one
            update["memory_bw_gb_per_s"] = bandwidth_gb_per_s
            update["decode_bw_gb_per_s"] = bandwidth_gb_per_s
            update["decode_bw_source"] = USER_BANDWIDTH_SOURCE
        if peak_tflops is not None:
            update["dense_tflops"] = DenseTflops(fp32=spec.dense_tflops.fp32, tf32=None,
                                                 fp16=peak_tflops, bf16=peak_tflops)
        return spec.model_copy(update=update)
    if memory_gb is None or bandwidth_gb_per_s is None:
        raise FieldError(("peak_tflops", "memory_gb", "bandwidth_gb_per_s"),
                         "a GPU of your own needs all three: peak TFLOPS, memory and bandwidth.")
    assert peak_tflops is not None
    return GpuSpec(
        name="custom", full_name="custom accelerator (figures given by the user)",
        vendor="NVIDIA", generation="ampere", memory_gb=memory_gb,
        memory_bw_gb_per_s=bandwidth_gb_per_s,
        dense_tflops=DenseTflops(fp32=peak_tflops / 16, fp16=peak_tflops, bf16=peak_tflops),
        decode_bw_gb_per_s=bandwidth_gb_per_s, decode_bw_source=USER_BANDWIDTH_SOURCE,
        interconnect="none", source="given on the command line", as_of=date.today(),
        notes="efficiency defaults of the Ampere generation are applied",
    )
