"""Read the training setup people already wrote for another tool (`gpuhours estimate --from`).

`read_setup(path)` detects the format from the content and maps what it can onto gpuhours'
Training field names (and the amount of work: steps, epochs, packed), saying in `used` what
came from which key and in `unused` each key it saw but could not use, with why.

Formats and where their key names come from (read in each tool's own code or examples):

- axolotl YAML: examples/llama-3/lora-8b.yml; src/axolotl/utils/config/__init__.py
  (resolve_dtype: bf16 true/auto loads the model in bfloat16; normalize_config: grad_accum =
  batch_size // micro_batch_size when not given).
- LLaMA-Factory YAML: examples/train_lora/llama3_lora_sft.yaml; src/llamafactory/model/
  adapter.py (init_adapter: trainable parameters are upcast to fp32 unless pure_bf16);
  hparams/model_args.py (disable_gradient_checkpointing: checkpointing is on by default;
  flash_attn; enable_liger_kernel; quantization_bit).
- torchtune recipe config: recipes/configs/llama3_1/8B_lora_single_device.yaml (model
  `_component_` builders, lora_attn_modules, apply_lora_to_mlp, batch_size, dtype,
  enable_activation_checkpointing, loss CEWithChunkedOutputLoss).
- Hugging Face TrainingArguments JSON (`args.to_json_string()`), trainer_state.json, and TRL's
  SFTConfig / GRPOConfig (TrainingArguments keys plus max_length / max_seq_length, packing,
  num_generations, max_prompt_length, max_completion_length).
- verl's PPO/GRPO trainer config: gpuhours.importer_verl (the policy update's step).

Pure: no torch, no network. Errors name the file (InputError, exit 2 in the CLI).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from gpuhours.errors import InputError
from gpuhours.import_reader import (
    MLP,
    Imported,
    Reader,
    catalog_model,
    modules_of,
    set_lora_dropout,
    set_model,
    set_modules_to_save,
    set_targets,
    short,
)

#: a setup file is small; a trainer_state.json with a long log_history can reach megabytes
MAX_SETUP_BYTES = 64 * 2**20


#: torchtune builder family (torchtune.models.<family>.<builder>) -> catalog name prefix
_TORCHTUNE_FAMILY = {"llama2": "llama-2", "llama3": "llama-3", "llama3_1": "llama-3.1",
                     "llama3_2": "llama-3.2", "qwen2": "qwen2", "qwen2_5": "qwen2.5",
                     "qwen3": "qwen3", "mistral": "mistral"}


# Shared Hugging Face Trainer keys --------------------------------------------------------------
#: Trainer `optim` names (transformers OptimizerNames; axolotl's `optimizer` takes the same) ->
#: (optimizer, implementation, note)
_HF_OPTIM = {
    "adamw_torch": ("adamw", "foreach", ""),
    "adamw_torch_fused": ("adamw", "fused", ""),
    "adamw_hf": ("adamw", "per-parameter", "transformers' own AdamW"),
    "adamw_bnb_8bit": ("adamw-8bit", "fused", "bitsandbytes"),
    "adamw_8bit": ("adamw-8bit", "fused", "bitsandbytes"),
    "paged_adamw_32bit": ("adamw", "fused", "bitsandbytes' paged fp32 moments "
                                             "(cudaMallocManaged): outside torch's allocator, "
                                             "paged to the host when the card is full"),
    "paged_adamw_8bit": ("adamw-8bit", "fused", "bitsandbytes' paged moments (cudaMallocManaged): "
                                                "outside torch's allocator, paged to the host "
                                                "when the card is full"),
    "sgd": ("sgd", "foreach", ""),
}


def _set_optim(r: Reader, key: str) -> None:
    name = r.take(key)
    if name is None:
        return
    found = _HF_OPTIM.get(str(name))
    if found is None:
        r.skip(f"{key}={name}", "optimizer not modelled (adamw, adamw 8-bit and sgd are)")
        return
    r.set("optimizer", found[0], f"{key}={name}", found[2])
    r.set("optimizer_impl", found[1], f"{key}={name}")
    if str(name).startswith("paged_"):
        r.set("optimizer_paged", True, f"{key}={name}")


_ZERO_IN_NAME = re.compile(r"(?:zero|_z|^z|ds_z|stage)[_-]?([0-3])(?![0-9])")


def _set_deepspeed(r: Reader, key: str, folder: Path) -> None:
    value = r.take(key)
    if not value:
        return
    config: Any = value if isinstance(value, dict) else None
    name = str(value) if not isinstance(value, dict) else "(inline)"
    how = "zero_optimization.stage"
    if config is None:
        path = Path(name).expanduser()
        for p in ([path] if path.is_absolute() else [folder / path, path]):
            try:
                from gpuhours.files import read_user_text

                config = json.loads(read_user_text(p, str(p), MAX_SETUP_BYTES,
                                                   "DeepSpeed config"))
                how = f"zero_optimization.stage of {p}"
                break
            except (InputError, OSError, ValueError):
                continue
    if isinstance(config, dict):
        zero = config.get("zero_optimization") or {}
        stage = zero.get("stage") if isinstance(zero, dict) else None
        if stage in (0, 1, 2, 3):
            r.set("zero_stage", stage, f"{key}={name}", how)
        else:
            r.skip(f"{key}={name}", f"no zero_optimization.stage of 0-3 in it ({stage!r})")
        if isinstance(zero, dict) and stage in (1, 2, 3):
            _set_deepspeed_zero(r, key, zero, stage)
        _set_deepspeed_precision(r, key, config)
        return
    match = _ZERO_IN_NAME.search(Path(name).name.lower())
    if match is None:
        r.skip(f"{key}={name}", "file not found beside the setup file and its name gives no "
                                "ZeRO stage: give --zero")
        return
    r.set("zero_stage", int(match.group(1)), f"{key}={name}",
          "from the file name; the file was not found beside the setup file")
    if "offload" in name.lower():
        r.skip(f"{key}={name}", "its name says CPU offload, but the file was not found to say "
                                "what is offloaded: give --offload optimizer (or "
                                "optimizer+params at ZeRO-3)")


#: DeepSpeed's zero_optimization defaults where a config leaves a key out (deepspeed/runtime/
#: zero/config.py, v0.10-v0.16): reduce_bucket_size 5e8 elements, contiguous_gradients on
_DS_REDUCE_BUCKET_DEFAULT = 500_000_000


def _set_deepspeed_precision(r: Reader, key: str, config: dict[str, Any]) -> None:
    """Half precision under DeepSpeed's engine: it casts the model to bf16/fp16 and keeps fp32
    master weights and moments in its optimizer, and accelerate runs no autocast beside it
    (native AMP is off on DeepSpeed): the Trainer's bf16=true becomes bf16-mixed, not
    bf16-amp. `enabled: "auto"` takes the Trainer's flag, already read."""
    half = {"bf16": "bf16", "bf16-amp": "bf16", "fp16": "fp16",
            "fp16-amp": "fp16"}.get(str(r.fields.get("precision")))
    if half is None:
        return
    section = config.get("bf16" if half == "bf16" else "fp16")
    enabled = section.get("enabled") if isinstance(section, dict) else None
    if enabled in (True, "auto"):
        r.set("precision", f"{half}-mixed", f"{key} {half}.enabled={str(enabled).lower()}",
              "DeepSpeed's engine: half-precision weights, fp32 master weights and moments "
              "in its optimizer, no autocast")


def _set_deepspeed_zero(r: Reader, key: str, zero: dict[str, Any], stage: int) -> None:
    """What a DeepSpeed config's zero_optimization says beyond the stage: who runs ZeRO-3, CPU
    offload and its copies, overlap_comm, and ZeRO-1/2's gradient buckets (setup.Training)."""
    if stage == 3:
        r.set("zero3_engine", "deepspeed", f"{key} zero_optimization.stage=3",
              "DeepSpeed's stage-3 engine and its per-module hooks")
    devices = {part: (zero.get(part) or {}).get("device") if isinstance(zero.get(part), dict)
               else None for part in ("offload_optimizer", "offload_param")}
    if "nvme" in devices.values():
        r.skip(f"{key} offload device=nvme", "NVMe offload is not modelled; give --offload "
               "for CPU offload, the nearest")
    if devices["offload_optimizer"] == "cpu":
        params = devices["offload_param"] == "cpu"
        if params and stage != 3:
            r.skip(f"{key} offload_param.device=cpu", "DeepSpeed offloads parameters at "
                   "ZeRO-3 only; the optimizer's offload is read")
        what = "optimizer+params" if params and stage == 3 else "optimizer"
        r.set("offload", what, f"{key} offload_optimizer.device=cpu"
              + (", offload_param.device=cpu" if what == "optimizer+params" else ""))
        pin = zero["offload_optimizer"].get("pin_memory")
        if isinstance(pin, bool):
            r.set("offload_copies", "pinned" if pin else "pageable",
                  f"{key} offload_optimizer.pin_memory={str(pin).lower()}")
        else:  # DeepSpeed's default: on since PR #8207 (2026), off before (estimate/offload.py)
            r.skip(f"{key} offload_optimizer.pin_memory", "not stated: pinned copies taken "
                   "(DeepSpeed's default since PR #8207); before it, off: give "
                   "--offload-copies pageable")
    overlap = zero.get("overlap_comm")
    if isinstance(overlap, bool):
        r.set("deepspeed_overlap_comm", overlap, f"{key} zero_optimization.overlap_comm")
    if stage in (1, 2) and zero.get("contiguous_gradients", True) is True:
        bucket = zero.get("reduce_bucket_size", _DS_REDUCE_BUCKET_DEFAULT)
        if isinstance(bucket, (int, float)) and not isinstance(bucket, bool) and bucket > 0:
            r.set("deepspeed_reduce_bucket", int(bucket),
                  f"{key} zero_optimization.reduce_bucket_size={bucket:g}",
                  "" if "reduce_bucket_size" in zero else "not stated: DeepSpeed's default")
        else:
            r.skip(f"{key} zero_optimization.reduce_bucket_size={bucket}",
                   "not a number (transformers fills 'auto' with hidden_size^2 at launch): "
                   "give --deepspeed-reduce-bucket")


def _set_fsdp(r: Reader, key: str, config_key: str) -> None:
    value = r.take(key)
    config = r.take(config_key)
    config = config if isinstance(config, dict) else {}
    words = set(modules_of(value.replace(" ", ",") if isinstance(value, str) else value))
    strategy = str(config.get("sharding_strategy") or config.get("fsdp_sharding_strategy")
                   or "").lower()
    if strategy:
        words.add(strategy)
    reshard = config.get("reshard_after_forward", config.get("fsdp_reshard_after_forward"))
    source = f"{key}={short(value)}" if value else f"{config_key}"
    if "hybrid_shard" in words or "hybrid_shard_zero2" in words:
        r.skip(source, "hybrid sharding (within a node, replicated across nodes) is not "
                       "modelled: give --zero")
    elif "full_shard" in words or reshard is True:
        r.set("zero_stage", 3, source, "FSDP full shard = ZeRO-3")
    elif "shard_grad_op" in words or reshard is False:
        r.set("zero_stage", 2, source, "FSDP shard_grad_op = ZeRO-2")
    elif "no_shard" in words:
        r.set("zero_stage", 0, source)
    elif r.data.get("fsdp_version") == 2 and config:
        r.set("zero_stage", 3, "fsdp_version=2", "FSDP2 fully_shard reshards after forward "
                                                 "by default = ZeRO-3")
    elif value:
        r.skip(source, "no sharding strategy in it: give --zero")
    if "offload" in words or config.get("offload_params") or config.get("fsdp_offload_params"):
        if r.fields.get("zero_stage") == 3:  # FSDP's CPUOffload: parameters, gradients, state
            r.set("offload", "optimizer+params", source + " offload",
                  "FSDP CPUOffload(offload_params=True): the shards live on the host")
        else:
            r.skip(source + " offload", "FSDP's CPU offload is modelled with full sharding "
                                        "(ZeRO-3) only: give --zero 3 --offload "
                                        "optimizer+params")


def _set_amounts(r: Reader, epochs_key: str, steps_key: str) -> None:
    epochs, steps = r.take(epochs_key), r.take(steps_key)
    for key, value in ((epochs_key, epochs), (steps_key, steps)):
        # a number <= 0 is the trainer's "not set" (max_steps -1); anything else is unreadable
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            r.bad(key, value, "a number")
    if isinstance(steps, int | float) and not isinstance(steps, bool) and steps > 0:
        r.set("steps", steps, f"{steps_key}={steps}")
        if epochs is not None:
            r.skip(f"{epochs_key}={epochs}", f"{steps_key} overrides it, as in the trainer")
    elif isinstance(epochs, int | float) and not isinstance(epochs, bool) and epochs > 0:
        r.set("epochs", epochs, f"{epochs_key}={epochs}", "with --examples, the dataset size")
    # a value <= 0 read and not used is said, as every other key the import leaves out
    for key, value in ((epochs_key, epochs), (steps_key, steps)):
        if (isinstance(value, int | float) and not isinstance(value, bool) and value <= 0
                and not (key == epochs_key and isinstance(steps, int | float)
                         and not isinstance(steps, bool) and steps > 0)):
            r.skip(f"{key}={value}", "0 or less: the trainer's 'not set'")


def _set_int(r: Reader, key: str, field: str) -> None:
    value = r.take(key)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        r.set(field, value, f"{key}={value}")
    elif value is not None:
        r.bad(key, value, "a whole number >= 1")


def _set_bool(r: Reader, key: str, field: str) -> None:
    value = r.take(key)
    if isinstance(value, bool):
        r.set(field, value, f"{key}={str(value).lower()}")
    elif value is not None:
        r.bad(key, value, "true or false")


def _hf_precision(r: Reader, pure: bool, note: str, off: str | None) -> None:
    """bf16/fp16 of the Trainer: autocast over the weights (bf16-amp), or, where the tool
    loads and keeps the weights in half precision, pure half precision. `off`: the precision
    when both are false (None: not known, reported unused)."""
    bf16, fp16 = r.take("bf16"), r.take("fp16")
    for key, value, half in (("bf16", bf16, "bf16"), ("fp16", fp16, "fp16")):
        if value is True:
            r.set("precision", half if pure else f"{half}-amp", f"{key}=true", note)
            return
    if bf16 is False and fp16 is False:
        if off is not None:
            r.set("precision", off, "bf16=false, fp16=false", "no autocast: the weights' dtype")
        else:
            r.skip("bf16=false, fp16=false", "half-precision weights with fp32 trainable ones "
                                             "and no autocast is not modelled: give "
                                             "--precision")


def _hf_common(r: Reader, folder: Path) -> None:
    """The TrainingArguments keys every Trainer-based tool shares."""
    _set_int(r, "per_device_train_batch_size", "micro_batch")
    _set_int(r, "gradient_accumulation_steps", "grad_accum")
    # transformers 5 renames gradient_checkpointing to activation_checkpointing (both dumped)
    new_name = "activation_checkpointing"
    _set_bool(r, new_name if r.has(new_name) else "gradient_checkpointing", "checkpointing")
    r.take("gradient_checkpointing")
    _set_optim(r, "optim")
    _set_deepspeed(r, "deepspeed", folder)
    _set_fsdp(r, "fsdp", "fsdp_config")
    _set_amounts(r, "num_train_epochs", "max_steps")
    for key in ("use_liger_kernel", "use_liger"):  # use_liger: TRL's name before 0.16
        if r.take(key) is True:
            # the Trainer's _apply_liger_kernel_to_instance with apply_liger_kernel_to_*'s
            # defaults: rope, rms_norm, swiglu and fused_linear_cross_entropy True
            r.set("loss_kernel", "fused-linear", f"{key}=true",
                  "Liger's fused linear cross-entropy")
            r.set("liger_kernels", "instance", f"{key}=true", "Liger's RMSNorm, RoPE and "
                  "SwiGLU on the built model: per-head q/k norms stay eager")
    if r.take("torch_compile") is True:
        r.set("compile", True, "torch_compile=true", "the Trainer compiles the model")
    if r.take("auto_find_batch_size") is True:
        r.skip("auto_find_batch_size=true", "the batch it would find is unknown: give --batch")
    r.take("gradient_checkpointing_kwargs")


def _adapters(r: Reader, *lora_keys: str) -> bool:
    """Whether the setup trains LoRA adapters; without them the tool ignores its LoRA keys
    (a template's leftovers), and so does the import, saying so."""
    if r.fields.get("method") in ("lora", "qlora"):
        return True
    why = ("a LoRA setting, and this setup trains no adapters: ignored, as the tool does"
           if "method" in r.fields else "a LoRA setting, and the file names no method: give "
                                        "--method lora (and this setting's option) to use it")
    for key in lora_keys:
        value = r.take(key)
        if value:
            r.skip(f"{key}={short(value)}", why)
    return False


# Formats ---------------------------------------------------------------------------------------
def _axolotl(r: Reader, folder: Path) -> Imported:
    set_model(r, "base_model")
    r.take("base_model_config")
    adapter = r.take("adapter")
    four, eight = r.take("load_in_4bit"), r.take("load_in_8bit")
    if adapter == "qlora" or (adapter == "lora" and four is True):
        r.set("method", "qlora", f"adapter={adapter}" + (", load_in_4bit=true" if four else ""))
    elif adapter == "lora" and eight is True:
        # LoRA on bitsandbytes' LLM.int8 base (estimate/bnb_int8.py): a quantised base
        r.set("method", "qlora", "adapter=lora, load_in_8bit=true", "adapters on an 8-bit base")
        r.set("base_quant", "int8-bnb", "load_in_8bit=true", "bitsandbytes Linear8bitLt")
    elif adapter == "lora":
        r.set("method", "lora", "adapter=lora")
    elif adapter is None:
        r.set("method", "full", "no adapter", "every weight trains")
    else:
        r.skip(f"adapter={adapter}", "only lora and qlora adapters are modelled")
    if eight is True and adapter != "lora":
        r.skip("load_in_8bit=true", "an 8-bit base is modelled under adapter lora only "
                                    "(base_quant int8-bnb)")
    _set_int(r, "lora_r", "lora_rank")
    linear, modules = r.take("lora_target_linear"), r.take("lora_target_modules")
    if linear is True:
        r.set("lora_targets", "all-linear", "lora_target_linear=true")
    elif modules:
        set_targets(r, f"lora_target_modules={short(modules)}", modules_of(modules))
    if _adapters(r, "lora_dropout", "lora_modules_to_save", "peft_use_dora"):
        set_lora_dropout(r, "lora_dropout", r.take("lora_dropout"))
        _set_dora(r, "peft_use_dora", "axolotl passes it to peft's LoraConfig(use_dora=...)")
        saved = r.take("lora_modules_to_save")
        set_modules_to_save(r, f"lora_modules_to_save={short(saved)}", modules_of(saved))
    _set_int(r, "sequence_len", "seq_len")
    _set_int(r, "micro_batch_size", "micro_batch")
    if r.has("gradient_accumulation_steps"):
        _set_int(r, "gradient_accumulation_steps", "grad_accum")
    batch, micro = r.take("batch_size"), r.data.get("micro_batch_size")
    if "grad_accum" not in r.fields and isinstance(batch, int) and isinstance(micro, int) \
            and micro > 0 and batch >= micro:
        # axolotl normalize_config: gradient_accumulation_steps = batch_size // micro_batch_size
        r.set("grad_accum", batch // micro, f"batch_size={batch} // micro_batch_size={micro}")
    sample_packing = r.take("sample_packing")
    if isinstance(sample_packing, bool):
        r.set("packed", sample_packing, f"sample_packing={str(sample_packing).lower()}",
              "with --examples")
    r.take("eval_sample_packing")
    r.take("pad_to_sequence_len")
    bf16, fp16 = r.take("bf16"), r.take("fp16")
    # axolotl resolve_dtype: torch_dtype bfloat16 for bf16 (auto: where the GPU has it),
    # float16 for fp16 or an 8-bit base, else float32; the weights are loaded in it
    if bf16 is True or bf16 == "auto":
        r.set("precision", "bf16", f"bf16={str(bf16).lower()}", "weights loaded in bfloat16, "
              "resolve_dtype; auto = bf16 on a GPU that has it")
    elif fp16 is True or eight is True:
        r.set("precision", "fp16", "fp16=true" if fp16 else "load_in_8bit=true",
              "weights loaded in float16, resolve_dtype")
    else:
        r.set("precision", "fp32", f"bf16={str(bf16).lower()}, fp16={str(fp16).lower()}",
              "weights loaded in float32, resolve_dtype")
    checkpointing = r.take("gradient_checkpointing")
    if isinstance(checkpointing, bool):
        r.set("checkpointing", checkpointing,
              f"gradient_checkpointing={str(checkpointing).lower()}")
    elif checkpointing == "unsloth":
        # axolotl's utils/gradient_checkpointing: Unsloth_Offloaded_Gradient_Checkpointer
        r.set("checkpointing", True, "gradient_checkpointing=unsloth")
        r.set("checkpoint_offload", True, "gradient_checkpointing=unsloth",
              "Unsloth's offloaded checkpointing: block inputs to host memory")
    elif checkpointing is not None:
        r.set("checkpointing", True, f"gradient_checkpointing={checkpointing}")
        r.skip(f"gradient_checkpointing={checkpointing}", "offloading checkpoints to the CPU "
                                                          "is not modelled")
    for key, flash in (("flash_attention", True), ("sdp_attention", True),
                       ("xformers_attention", True), ("eager_attention", False)):
        if r.take(key) is True:
            r.set("flash_attention", flash, f"{key}=true",
                  "no S x S scores kept" if flash else "S x S scores kept")
    _set_optim(r, "optimizer")
    _set_deepspeed(r, "deepspeed", folder)
    _set_fsdp(r, "fsdp", "fsdp_config")
    r.take("fsdp_version")
    _set_amounts(r, "num_epochs", "max_steps")
    if r.take("cut_cross_entropy") is True:
        r.set("loss_kernel", "cut-ce", "cut_cross_entropy=true", "CutCrossEntropyPlugin")
    elif r.take("liger_fused_linear_cross_entropy") is True:
        r.set("loss_kernel", "fused-linear", "liger_fused_linear_cross_entropy=true")
    r.take("plugins")
    layer_keys = ("liger_rope", "liger_rms_norm", "liger_glu_activation")
    on = [key for key in layer_keys if r.take(key) is True]
    if len(on) == len(layer_keys):
        # LigerPlugin.pre_model_load calls apply_liger_kernel_to_<model>(**kwargs) before the
        # model is built (axolotl 067b021c src/axolotl/integrations/liger/plugin.py): classes
        r.set("liger_kernels", "classes", "=true, ".join(on) + "=true",
              "Liger's RMSNorm, RoPE and SwiGLU")
    elif on:
        r.skip(", ".join(f"{key}=true" for key in on), "only some of Liger's layer kernels: "
               "modelled together (liger_rope, liger_rms_norm, liger_glu_activation all true), "
               "not apart")
    if r.take("liger_layer_norm") is True:
        r.skip("liger_layer_norm=true", "Liger's LayerNorm saves what torch's one-kernel "
               "layer_norm saves: nothing changes")
    return r.finish("axolotl")


def _llama_factory(r: Reader, folder: Path) -> Imported:
    set_model(r, "model_name_or_path")
    stage = r.take("stage")
    if stage not in (None, "sft", "pt"):
        r.skip(f"stage={stage}", "only supervised (sft) and pre-training (pt) steps are "
                                 "modelled: reward, PPO, DPO and KTO run more models")
    kind, bits = r.take("finetuning_type"), r.take("quantization_bit")
    method_q = r.take("quantization_method")  # LLaMA-Factory's default: bitsandbytes
    if kind == "lora" and bits == 4:
        r.set("method", "qlora", "finetuning_type=lora, quantization_bit=4")
    elif kind == "lora" and bits == 8 and method_q in (None, "bitsandbytes", "bnb"):
        # LoRA on bitsandbytes' LLM.int8 base (estimate/bnb_int8.py)
        r.set("method", "qlora", "finetuning_type=lora, quantization_bit=8",
              "adapters on an 8-bit base")
        r.set("base_quant", "int8-bnb", "quantization_bit=8", "bitsandbytes Linear8bitLt")
    elif kind in ("lora", "full"):
        r.set("method", kind, f"finetuning_type={kind}")
    elif kind is not None:
        r.skip(f"finetuning_type={kind}", "only full and lora fine-tuning are modelled")
    if bits not in (None, 4) and r.fields.get("base_quant") != "int8-bnb":
        r.skip(f"quantization_bit={bits}", "a 4-bit (NF4) or bitsandbytes 8-bit base under "
                                           "LoRA is modelled")
    if method_q not in (None, "bitsandbytes", "bnb"):
        r.skip(f"quantization_method={method_q}", "bitsandbytes quantisation on the fly is "
                                                  "modelled (a pre-quantised base: give "
                                                  "--base-quant)")
    _set_int(r, "lora_rank", "lora_rank")
    if _adapters(r, "lora_dropout", "additional_target"):
        set_lora_dropout(r, "lora_dropout", r.take("lora_dropout"))
        extra = r.take("additional_target")  # finetuning_args.py: modules trained beside LoRA
        set_modules_to_save(r, f"additional_target={short(extra)}", modules_of(extra))
    target = r.take("lora_target")
    if target == "all":
        r.set("lora_targets", "all-linear", "lora_target=all")
    elif target:
        set_targets(r, f"lora_target={target}", modules_of(target))
    _set_int(r, "cutoff_len", "seq_len")
    packing = r.take("packing")
    if isinstance(packing, bool):
        r.set("packed", packing, f"packing={str(packing).lower()}", "with --examples")
    pure = r.take("pure_bf16") is True
    _hf_precision(r, pure, "pure_bf16: weights kept in bf16" if pure else
                  "LLaMA-Factory upcasts the trainable weights to fp32 and the Trainer "
                  "autocasts (adapter.py init_adapter)", None)
    if pure and "precision" not in r.fields:
        r.set("precision", "bf16", "pure_bf16=true")
    disable = r.take("disable_gradient_checkpointing")
    r.set("checkpointing", disable is not True,
          f"disable_gradient_checkpointing={str(disable is True).lower()}",
          "LLaMA-Factory checkpoints activations unless it is disabled")
    attn = r.take("flash_attn")
    if attn in ("fa2", "sdpa", "auto"):
        r.set("flash_attention", True, f"flash_attn={attn}")
    elif attn == "disabled":
        r.set("flash_attention", False, "flash_attn=disabled", "eager attention")
    if r.take("enable_liger_kernel") is True:
        # model_utils/liger_kernel.py: apply_liger_kernel_to_<model_type>() with its defaults
        r.set("loss_kernel", "fused-linear", "enable_liger_kernel=true",
              "Liger's fused linear cross-entropy")
        r.set("liger_kernels", "classes", "enable_liger_kernel=true",
              "Liger's RMSNorm, RoPE and SwiGLU, patched before the model is built")
    unsloth = r.take("use_unsloth") is True
    if unsloth and r.fields.get("method") in ("lora", "qlora"):
        # model_utils/unsloth.py (@ ff6d4d12e): FastLanguageModel.get_peft_model with
        # use_gradient_checkpointing="unsloth"
        r.set("kernels", "unsloth", "use_unsloth=true", "Unsloth's LoRA layer and kernels")
        if r.fields.get("checkpointing"):
            r.set("checkpoint_offload", True, "use_unsloth=true", "LLaMA-Factory passes "
                  "use_gradient_checkpointing='unsloth': block inputs to host memory")
    elif unsloth:
        r.skip("use_unsloth=true", "Unsloth's full fine-tuning is not modelled")
    if r.take("use_unsloth_gc") is True and r.fields.get("checkpointing"):
        r.set("checkpoint_offload", True, "use_unsloth_gc=true",
              "Unsloth's offloaded checkpointing: block inputs to host memory")
    for key in ("use_galore", "use_badam", "use_apollo"):
        if r.take(key) is True:
            r.skip(f"{key}=true", "not modelled")
    if _adapters(r, "use_dora"):
        _set_dora(r, "use_dora", "LLaMA-Factory passes it to peft's LoraConfig (adapter.py)")
    _hf_common(r, folder)
    return r.finish("llama-factory")


def _component(value: Any) -> str:
    return str(value.get("_component_", "")) if isinstance(value, dict) else ""


def _torchtune(r: Reader) -> Imported:
    model = r.take("model")
    builder = _component(model).rsplit(".", 1)[-1]
    family_and_size = re.sub(r"^q?lora_", "", builder)
    ref = None
    for family in sorted(_TORCHTUNE_FAMILY, key=len, reverse=True):
        if family_and_size.startswith(family + "_"):
            candidate = f"{_TORCHTUNE_FAMILY[family]}-{family_and_size[len(family) + 1:]}"
            ref, _ = catalog_model(candidate)
            break
    source = f"model._component_={_component(model)}"
    if ref is None:
        r.skip(source, "no catalog model for this builder: give --model")
    else:
        r.set("model", ref, source, "torchtune builder")
    if builder.startswith("qlora_"):
        r.set("method", "qlora", source)
    elif builder.startswith("lora_"):
        r.set("method", "lora", source)
    elif builder:
        r.set("method", "full", source)
    if isinstance(model, dict) and builder.startswith(("lora_", "qlora_")):
        rank = model.get("lora_rank")
        if isinstance(rank, int):
            r.set("lora_rank", rank, f"model.lora_rank={rank}")
        set_lora_dropout(r, "model.lora_dropout", model.get("lora_dropout"))
        attn = {"o_proj" if m == "output_proj" else m
                for m in modules_of(model.get("lora_attn_modules"))}
        mlp, out = model.get("apply_lora_to_mlp") is True, model.get("apply_lora_to_output")
        modules = attn | (MLP if mlp else set())
        source = (f"model.lora_attn_modules={short(model.get('lora_attn_modules'))}, "
                  f"apply_lora_to_mlp={str(mlp).lower()}")
        if out is True:
            r.skip("model.apply_lora_to_output=true", "an adapter on the LM head is not "
                                                      "modelled")
        set_targets(r, source, modules)
    _set_int(r, "batch_size", "micro_batch")
    _set_int(r, "gradient_accumulation_steps", "grad_accum")
    _set_bool(r, "enable_activation_checkpointing", "checkpointing")
    offloading = r.take("enable_activation_offloading")
    if offloading is True:
        r.set("activation_offload", True, "enable_activation_offloading=true", "torchtune's "
              "OffloadActivations: the checkpointed layer inputs in pinned host memory")
    elif offloading not in (None, False):
        r.bad("enable_activation_offloading", offloading, "true or false")
    dtype = r.take("dtype")
    if dtype in ("bf16", "fp32"):
        r.set("precision", dtype, f"dtype={dtype}",
              "torchtune keeps weights, gradients and optimizer state in this dtype")
    if dtype == "bf16" and r.fields.get("method") in ("lora", "qlora"):
        # its LoRALinear is built under training.set_default_dtype: no fp32 adapters, and no
        # fp32 copy of their inputs (which a compiled step would keep: estimate/compiled.py)
        r.set("lora_adapter_dtype", "half", f"dtype={dtype}",
              "torchtune's LoRALinear is built in the model's dtype")
    elif dtype is not None:
        r.skip(f"dtype={dtype}", "expected bf16 or fp32")
    tokenizer = r.take("tokenizer")
    seq = tokenizer.get("max_seq_len") if isinstance(tokenizer, dict) else None
    if isinstance(seq, int) and seq >= 1:
        r.set("seq_len", seq, f"tokenizer.max_seq_len={seq}")
    else:
        r.skip("tokenizer.max_seq_len=null", "no sequence length (each batch is as long as "
                                             "its longest example): give --seq")
    dataset = r.take("dataset")
    if isinstance(dataset, dict) and isinstance(dataset.get("packed"), bool):
        r.set("packed", dataset["packed"], f"dataset.packed={str(dataset['packed']).lower()}",
              "with --examples")
    optimizer = r.take("optimizer")
    name = _component(optimizer)
    if name == "torch.optim.AdamW":
        fused = isinstance(optimizer, dict) and optimizer.get("fused") is True
        r.set("optimizer", "adamw", f"optimizer._component_={name}")
        r.set("optimizer_impl", "fused" if fused else "foreach",
              f"optimizer.fused={str(fused).lower()}")
    elif name in ("bitsandbytes.optim.PagedAdamW8bit", "bitsandbytes.optim.AdamW8bit",
                  "bitsandbytes.optim.PagedAdamW"):
        r.set("optimizer", "adamw" if name.endswith("PagedAdamW") else "adamw-8bit",
              f"optimizer._component_={name}", "bitsandbytes")
        r.set("optimizer_impl", "fused", f"optimizer._component_={name}")
        if ".Paged" in name:  # moments in CUDA managed memory (estimate/paged_optimizer.py)
            r.set("optimizer_paged", True, f"optimizer._component_={name}")
    elif name:
        r.skip(f"optimizer._component_={name}", "optimizer not modelled (torch AdamW and "
                                                "bitsandbytes' AdamW, 8-bit and paged, are)")
    loss = _component(r.take("loss"))
    if loss.endswith("CEWithChunkedOutputLoss"):
        r.set("loss_kernel", "chunked", f"loss._component_={loss}")
    elif loss:
        r.skip(f"loss._component_={loss}", "loss kernel not modelled")
    _set_amounts(r, "epochs", "max_steps")
    if r.take("compile") is True:
        r.set("compile", True, "compile=true", "each decoder layer and the loss compiled")
    r.set("kv_repeated", True, f"model._component_={_component(model)}", "torchtune's "
          "MultiHeadAttention repeats k and v to the query heads before SDPA")
    in_bwd = r.take("optimizer_in_bwd")
    if in_bwd is True:
        r.set("optimizer_in_backward", True, "optimizer_in_bwd=true",
              "each parameter stepped at its gradient, which is freed at once")
    elif in_bwd not in (None, False):
        r.bad("optimizer_in_bwd", in_bwd, "true or false")
    if r.take("fsdp_cpu_offload") is True:
        r.skip("fsdp_cpu_offload=true", "the recipe's sharding is not read from this file: "
               "give --zero 3 --offload optimizer+params")
    return r.finish("torchtune")


def _model_beside(r: Reader, folder: Path) -> None:
    """A Trainer output folder holds the model's config.json beside its arguments and state."""
    config = folder / "config.json"
    if config.is_file():
        r.set("model", str(config), "config.json beside the file")


def _trainer_state(r: Reader, folder: Path) -> Imported:
    _model_beside(r, folder)
    _set_int(r, "train_batch_size", "micro_batch")
    _set_amounts(r, "num_train_epochs", "max_steps")
    for key in ("log_history", "global_step", "epoch", "best_metric", "stateful_callbacks",
                "total_flos", "num_input_tokens_seen"):
        r.take(key)
    return r.finish("hf-trainer-state")


def _training_args(r: Reader, folder: Path, fmt: str) -> Imported:
    if fmt != "hf-training-args":
        set_model(r, "model_name_or_path")
    else:
        _model_beside(r, folder)
    init = r.take("model_init_kwargs")
    init = init if isinstance(init, dict) else {}
    # TRL's CLI config (`trl sft --config x.yaml`) gives its ModelConfig's torch_dtype / dtype and
    # attn_implementation at the top level; its scripts load the model with them
    top_dtype, top_old, top_attn = r.take("dtype"), r.take("torch_dtype"), r.take("attn_implementation")
    dtype = init.get("dtype") or init.get("torch_dtype") or top_dtype or top_old
    where = "model_init_kwargs " if (init.get("dtype") or init.get("torch_dtype")) else ""
    pure = dtype in ("bfloat16", "float16")
    _hf_precision(r, pure, f"{where}dtype={dtype}: weights loaded in half precision"
                  if pure else "the Trainer autocasts over the weights; fp32 as "
                  "from_pretrained loads them by default",
                  {"bfloat16": "bf16", "float16": "fp16"}.get(str(dtype), "fp32"))
    attn = init.get("attn_implementation") or top_attn
    where = "model_init_kwargs." if init.get("attn_implementation") else ""
    if attn in ("flash_attention_2", "flash_attention_3", "sdpa"):
        r.set("flash_attention", True, f"{where}attn_implementation={attn}")
    elif attn == "eager":
        r.set("flash_attention", False, f"{where}attn_implementation=eager")
    _trl_peft(r)
    processes = r.take("num_processes")
    if isinstance(processes, int) and not isinstance(processes, bool) and processes >= 1:
        r.set("num_gpus", processes, f"num_processes={processes}", "accelerate's training "
              "processes, one per GPU (TRL CLI)")
    _hf_common(r, folder)
    if fmt == "trl-sft":
        for key in ("max_length", "max_seq_length"):
            if r.has(key):
                _set_int(r, key, "seq_len")
        packing = r.take("packing")
        if isinstance(packing, bool):
            r.set("packed", packing, f"packing={str(packing).lower()}", "with --examples")
    if fmt == "trl-grpo":
        prompt, completion = r.take("max_prompt_length"), r.take("max_completion_length")
        if isinstance(prompt, int) and isinstance(completion, int):
            r.set("seq_len", prompt + completion, f"max_prompt_length={prompt} + "
                  f"max_completion_length={completion}", "the policy update's sequence")
        gens = r.take("num_generations")
        if gens is not None:
            r.skip(f"num_generations={gens}", "rollout generation is not part of `estimate` "
                   "(it prices one training step); see docs/rl.md for RL phases")
        for key in ("use_vllm", "beta"):
            if r.has(key):
                r.skip(f"{key}={r.take(key)}", "rollouts and the reference model are not part "
                                               "of `estimate`; see docs/rl.md")
        vllm = [k for k in r.data if k.startswith("vllm_") and r.take(k) is not None]
        if vllm:
            r.skip(", ".join(f"{k}={short(r.data[k])}" for k in vllm), "the vLLM rollout "
                   "engine's settings: rollouts are not part of `estimate`; see docs/rl.md")
    return r.finish(fmt)


def _set_dora(r: Reader, key: str, note: str) -> None:
    """A tool's DoRA switch (peft's use_dora) as the setup's dora (estimate/dora.py)."""
    value = r.take(key)
    if value is None:
        return
    if not isinstance(value, bool):
        r.bad(key, value, "true or false")
    if value:
        r.set("dora", True, f"{key}=true", note)


def _trl_peft(r: Reader) -> None:
    """TRL's ModelConfig (`trl sft --config`, trl/trainer/model_config.py): use_peft builds a
    peft LoraConfig of lora_r (default 16), lora_dropout (default 0.05), lora_target_modules
    and lora_modules_to_save; load_in_4bit makes its base 4-bit (QLoRA)."""
    use = r.take("use_peft")
    if use is None:
        return
    if not isinstance(use, bool):
        r.bad("use_peft", use, "true or false")
    if not use:
        return
    four = r.take("load_in_4bit")
    r.set("method", "qlora" if four is True else "lora",
          "use_peft=true" + (", load_in_4bit=true" if four is True else ""),
          "TRL ModelConfig: a peft LoraConfig")
    if r.has("lora_r"):
        _set_int(r, "lora_r", "lora_rank")
    else:
        r.set("lora_rank", 16, "lora_r not given", "TRL ModelConfig's default")
    dropout = r.take("lora_dropout")
    set_lora_dropout(r, "lora_dropout", 0.05 if dropout is None else dropout,
                     "TRL ModelConfig's default" if dropout is None else "")
    modules = r.take("lora_target_modules")
    if modules:
        set_targets(r, f"lora_target_modules={short(modules)}", modules_of(modules))
    saved = r.take("lora_modules_to_save")
    set_modules_to_save(r, f"lora_modules_to_save={short(saved)}", modules_of(saved))


# Detection -------------------------------------------------------------------------------------
_TRL_SFT_KEYS = ("max_seq_length", "max_length", "packing", "dataset_text_field",
                 "completion_only_loss", "assistant_only_loss")
_TRL_GRPO_KEYS = ("num_generations", "max_completion_length", "max_prompt_length")


def detect_format(data: dict[str, Any]) -> str | None:
    """The tool a setup's keys come from, or None."""
    if "log_history" in data or ("global_step" in data and "train_batch_size" in data):
        return "hf-trainer-state"
    if isinstance(data.get("actor_rollout_ref"), dict):
        return "verl"
    if _component(data.get("model")).startswith("torchtune."):
        return "torchtune"
    if "base_model" in data and any(k in data for k in ("micro_batch_size", "adapter",
                                                          "sequence_len")):
        return "axolotl"
    if "model_name_or_path" in data and any(k in data for k in ("finetuning_type", "cutoff_len",
                                                                  "stage", "template")):
        return "llama-factory"
    trl_cli = "model_name_or_path" in data and "dataset_name" in data  # `trl sft --config`
    if trl_cli or any(k in data for k in ("per_device_train_batch_size",
                                          "gradient_accumulation_steps")):
        if any(k in data for k in _TRL_GRPO_KEYS):
            return "trl-grpo"
        if trl_cli or any(k in data for k in _TRL_SFT_KEYS):
            return "trl-sft"
        return "hf-training-args"
    return None


def read_setup(path: str | os.PathLike[str]) -> Imported:
    """The setup in another tool's config file (format detected from its keys)."""
    data, lines = load_setup_data(path)
    return parse_setup(data, str(path), Path(path).expanduser().parent, lines)


def load_setup_data(path: str | os.PathLike[str]) -> tuple[Any, dict[str, int]]:
    """Another tool's config file as loaded (JSON or YAML), with the line of each top-level
    key; errors name the file."""
    from gpuhours.files import read_user_text

    where = str(path)
    try:
        text = read_user_text(path, where, MAX_SETUP_BYTES, "training setup file")
    except FileNotFoundError:
        raise InputError(where, "no such file.") from None
    lines: dict[str, int] = {}
    if text.lstrip().startswith(("{", "[")):
        try:
            data = json.loads(text)
        except ValueError as e:
            raise InputError(where, f"not valid JSON: {e}.") from None
        if isinstance(data, dict):  # a key's first appearance as a key: its line in the file
            for key in data:
                m = re.search(re.escape(json.dumps(key)) + r"\s*:", text)
                if m:
                    lines[key] = text.count("\n", 0, m.start()) + 1
    else:
        from yaml import MappingNode

        from gpuhours.yamlio import compose

        node, data = compose(text, where, node_depth=2)
        if isinstance(node, MappingNode):
            lines = {k.value: k.start_mark.line + 1 for k, _ in node.value
                     if isinstance(getattr(k, "value", None), str)}
    return data, lines


def parse_setup(data: Any, where: str, folder: Path,
                lines: dict[str, int] | None = None) -> Imported:
    """The setup of already-loaded data; `where` names it in errors (with `lines`, the line of
    each top-level key), `folder` is where files it names (a DeepSpeed config, a config.json)
    are looked for."""
    fmt = detect_format(data) if isinstance(data, dict) else None
    if fmt is None:
        found = ("nothing" if data is None else f"keys {', '.join(map(str, list(data)[:8]))}"
                 if isinstance(data, dict) else f"a {type(data).__name__}, not a mapping")
        raise InputError(where, f"not a training setup gpuhours can read (found {found}).",
                         "--from reads an axolotl or LLaMA-Factory YAML, a torchtune recipe "
                         "config, a Hugging Face TrainingArguments JSON or trainer_state.json, "
                         "a TRL SFTConfig/GRPOConfig, or a verl trainer config "
                         "(docs/importers.md).")
    tool = {"hf-training-args": "TrainingArguments", "hf-trainer-state": "trainer_state",
            "trl-sft": "SFTConfig", "trl-grpo": "GRPOConfig", "llama-factory": "LLaMA-Factory"
            }.get(fmt, fmt)
    r = Reader(data, tool, where=where, lines=lines)
    if fmt == "axolotl":
        return _axolotl(r, folder)
    if fmt == "llama-factory":
        return _llama_factory(r, folder)
    if fmt == "torchtune":
        return _torchtune(r)
    if fmt == "verl":
        from gpuhours.importer_verl import read_verl

        return read_verl(data, folder, where, lines)
    if fmt == "hf-trainer-state":
        return _trainer_state(r, folder)
    return _training_args(r, folder, fmt)


# Merging with the command line -----------------------------------------------------------------
#: the fields that state the amount of work; the command line's amount replaces the file's
AMOUNT_FIELDS = ("steps", "epochs", "examples", "packed")


def settings_to_use(imported: Imported, explicit: set[str], cli_amount: str | None,
                    label: str) -> tuple[dict[str, Any], list[str]]:
    """(fields to fill, notes for the output's warnings): the imported fields the command line
    did not set (`explicit`: field names given there).

    The amount of work: when the command line gives tokens or steps (`cli_amount`), the file's
    steps, epochs, examples and packing are not used; when it gives examples, the file's
    epochs and packing describe them. Epochs and packing describe examples: without a dataset
    size they are dropped, said in a note."""
    if "model" not in imported.fields and "model" not in explicit:
        why = next((u for u in imported.unused if "give --model" in u), None)
        raise InputError(label, "names no model gpuhours can find" +
                         (f" ({why})." if why else " (this format does not name one)."),
                         "Give --model: a catalog name (gpuhours catalog models), a Hugging "
                         "Face id in the catalog, or a config.json.")
    fill = {k: v for k, v in imported.fields.items() if k not in explicit}
    notes: list[str] = []
    replaced = [k for k in imported.fields if k in explicit]
    if cli_amount is not None:
        kept = ("epochs", "packed") if cli_amount == "examples" else ()
        for k in AMOUNT_FIELDS:
            if k in fill and k not in kept:
                del fill[k]
                replaced.append(k)
    elif "examples" not in fill:
        for k in ("epochs", "packed"):
            if k in fill and fill[k] is not False:
                notes.append(f"{label}: {k}={fill[k]} not used: give --examples (the "
                             f"dataset size) to count the work from it.")
            fill.pop(k, None)
    if fill.get("packed") is False:
        del fill["packed"]
    # each `used` line begins with the tool's name, which the first note gives once
    notes.insert(0, f"setup read from {label} ({imported.format}): "
                    + "; ".join(u.split(" ", 1)[1] for u in imported.used) + ".")
    if replaced:
        notes.insert(1, f"{label}: the command line replaces the file's "
                        f"{', '.join(replaced)}.")
    notes += [f"{label}: not used: {u}." for u in imported.unused]
    return fill, notes
