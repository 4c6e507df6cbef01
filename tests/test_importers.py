"""`gpuhours estimate --from`: other tools' setup files, field by field (gpuhours.importers).

Each file is written after the tool's own documented example: axolotl examples/llama-3/
lora-8b.yml, LLaMA-Factory examples/train_lora/llama3_lora_sft.yaml, torchtune recipes/configs/
llama3_1/8B_lora_single_device.yaml, a TrainingArguments JSON as `args.to_json_string()` writes
it (a subset of its keys), TRL SFTConfig/GRPOConfig JSON, a trainer_state.json.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from gpuhours.cli import app
from gpuhours.errors import FieldError, InputError
from gpuhours.importers import detect_format, read_setup, settings_to_use
from gpuhours.setup import Training

CATALOG_MODELS = Path(__file__).resolve().parents[1] / "src/gpuhours/catalog/data/models"

AXOLOTL = """\
base_model: NousResearch/Meta-Llama-3-8B
model_type: LlamaForCausalLM
tokenizer_type: AutoTokenizer

load_in_8bit: true
load_in_4bit: false

datasets:
  - path: mhenrichsen/alpaca_2k_test
    type: alpaca
dataset_prepared_path:
val_set_size: 0.05
output_dir: ./outputs/lora-out

sequence_len: 4096
sample_packing: true
eval_sample_packing: false

adapter: lora
lora_model_dir:
lora_r: 32
lora_alpha: 16
lora_dropout: 0.05
lora_target_linear: true
lora_modules_to_save:
  - embed_tokens
  - lm_head

wandb_project:
wandb_entity:

gradient_accumulation_steps: 4
micro_batch_size: 2
num_epochs: 4
optimizer: adamw_bnb_8bit
lr_scheduler: cosine
learning_rate: 0.0002

bf16: auto
tf32: false

gradient_checkpointing: true
resume_from_checkpoint:
logging_steps: 1
flash_attention: true

warmup_ratio: 0.1
evals_per_epoch: 4
saves_per_epoch: 1
weight_decay: 0.0
special_tokens:
   pad_token: <|end_of_text|>
"""

LLAMA_FACTORY = """\
### model
model_name_or_path: meta-llama/Meta-Llama-3-8B-Instruct
trust_remote_code: true

### method
stage: sft
do_train: true
finetuning_type: lora
lora_rank: 8
lora_target: all

### dataset
dataset: identity,alpaca_en_demo
template: llama3
cutoff_len: 2048
max_samples: 1000
overwrite_cache: true
preprocessing_num_workers: 16

### output
output_dir: saves/llama3-8b/lora/sft
logging_steps: 10
save_steps: 500
plot_loss: true
overwrite_output_dir: true

### train
per_device_train_batch_size: 1
gradient_accumulation_steps: 8
learning_rate: 1.0e-4
num_train_epochs: 3.0
lr_scheduler_type: cosine
warmup_ratio: 0.1
bf16: true
ddp_timeout: 180000000
deepspeed: examples/deepspeed/ds_z3_offload_config.json
"""

TORCHTUNE = """\
model:
  _component_: torchtune.models.llama3_1.lora_llama3_1_8b
  lora_attn_modules: ['q_proj', 'v_proj', 'output_proj']
  apply_lora_to_mlp: True
  apply_lora_to_output: False
  lora_rank: 8
  lora_alpha: 16
  lora_dropout: 0.0

tokenizer:
  _component_: torchtune.models.llama3.llama3_tokenizer
  path: /tmp/Meta-Llama-3.1-8B-Instruct/original/tokenizer.model
  max_seq_len: null

checkpointer:
  _component_: torchtune.training.FullModelHFCheckpointer
  checkpoint_dir: /tmp/Meta-Llama-3.1-8B-Instruct/
  checkpoint_files: [model-00001-of-00004.safetensors]
  recipe_checkpoint: null
  output_dir: /tmp/torchtune/llama3_1_8B/lora_single_device
  model_type: LLAMA3
resume_from_checkpoint: False
save_adapter_weights_only: False

dataset:
  _component_: torchtune.datasets.alpaca_cleaned_dataset
  packed: False
seed: null
shuffle: True
batch_size: 2

optimizer:
  _component_: torch.optim.AdamW
  fused: True
  weight_decay: 0.01
  lr: 3e-4
lr_scheduler:
  _component_: torchtune.training.lr_schedulers.get_cosine_schedule_with_warmup
  num_warmup_steps: 100

loss:
  _component_: torchtune.modules.loss.CEWithChunkedOutputLoss

epochs: 1
max_steps_per_epoch: null
gradient_accumulation_steps: 8
compile: False

output_dir: /tmp/torchtune/llama3_1_8B/lora_single_device
metric_logger:
  _component_: torchtune.training.metric_logging.DiskLogger
  log_dir: ${output_dir}/logs
log_every_n_steps: 1
log_peak_memory_stats: True

device: cuda
dtype: bf16

enable_activation_checkpointing: True
enable_activation_offloading: False
"""

TRAINING_ARGS = {
    "output_dir": "out", "overwrite_output_dir": False, "do_train": False,
    "per_device_train_batch_size": 8, "per_device_eval_batch_size": 8,
    "gradient_accumulation_steps": 2, "learning_rate": 5e-05, "weight_decay": 0.0,
    "adam_beta1": 0.9, "max_grad_norm": 1.0, "num_train_epochs": 3.0, "max_steps": -1,
    "lr_scheduler_type": "linear", "warmup_ratio": 0.0, "logging_steps": 500,
    "save_steps": 500, "seed": 42, "bf16": True, "fp16": False, "tf32": None,
    "local_rank": 0, "fsdp": [], "fsdp_config": {"min_num_params": 0}, "deepspeed": "ds.json",
    "optim": "adamw_torch_fused", "report_to": ["none"], "gradient_checkpointing": True,
    "gradient_checkpointing_kwargs": None, "torch_compile": False, "use_liger_kernel": False,
    "auto_find_batch_size": False, "label_smoothing_factor": 0.0,
}

DEEPSPEED = {"bf16": {"enabled": "auto"},
             "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"},
                                   "offload_param": {"device": "none"}},
             "train_micro_batch_size_per_gpu": "auto"}


def write(tmp_path: Path, name: str, text: str | dict) -> Path:
    p = tmp_path / name
    p.write_text(text if isinstance(text, str) else json.dumps(text, indent=2))
    return p


def unused_keys(unused: list[str]) -> list[str]:
    return [u.split("=")[0].split(":")[0] for u in unused]


# Formats, field by field -----------------------------------------------------------------------
def test_axolotl_lora_8b(tmp_path: Path) -> None:
    got = read_setup(write(tmp_path, "lora-8b.yml", AXOLOTL))
    assert got.format == "axolotl"
    assert got.fields == {
        # NousResearch/Meta-Llama-3-8B: not a catalog id; its repository name is an alias
        # adapter lora with load_in_8bit: LoRA on bitsandbytes' int8 base (a quantised base)
        "model": "llama-3-8b", "method": "qlora", "base_quant": "int8-bnb",
        "lora_rank": 32, "lora_targets": "all-linear",
        "seq_len": 4096, "micro_batch": 2, "grad_accum": 4, "packed": True,
        # axolotl resolve_dtype: bf16 auto/true loads the weights in bfloat16
        "precision": "bf16", "checkpointing": True, "flash_attention": True,
        "optimizer": "adamw-8bit", "optimizer_impl": "fused", "epochs": 4,
        # both modelled (a reviewer found them reported as costless / not modelled)
        "lora_dropout": 0.05, "lora_trainable_embeddings": True}
    assert "axolotl micro_batch_size=2 -> micro_batch 2" in got.used
    assert any("by the repository name Meta-Llama-3-8B" in u for u in got.used)
    assert "axolotl load_in_8bit=true -> base_quant int8-bnb (bitsandbytes Linear8bitLt)" in got.used
    assert "keys that change neither memory nor time" in got.unused[-1]
    assert "learning_rate" in got.unused[-1] or "and " in got.unused[-1]
    assert "lora_dropout" not in got.unused[-1]
    assert len(got.unused) == 1


def test_axolotl_qlora_and_batch_size(tmp_path: Path) -> None:
    text = ("base_model: Qwen/Qwen2.5-7B\nadapter: qlora\nload_in_4bit: true\nlora_r: 16\n"
            "lora_target_modules: [q_proj, v_proj]\nmicro_batch_size: 4\nbatch_size: 32\n"
            "sequence_len: 2048\nfp16: true\ndeepspeed: deepspeed_configs/zero2.json\n"
            "cut_cross_entropy: true\nplugins:\n  - axolotl.integrations.cut_cross_entropy."
            "CutCrossEntropyPlugin\nmax_steps: 300\nnum_epochs: 2\n")
    got = read_setup(write(tmp_path, "qlora.yaml", text))
    assert got.fields == {
        "model": "qwen2.5-7b", "method": "qlora", "lora_rank": 16, "lora_targets": "qv",
        "seq_len": 2048, "micro_batch": 4,
        "grad_accum": 8,  # axolotl normalize_config: batch_size // micro_batch_size
        "precision": "fp16", "zero_stage": 2, "steps": 300, "loss_kernel": "cut-ce"}
    assert any(u.startswith("num_epochs=2: max_steps overrides it") for u in got.unused)
    assert any("from the file name" in u for u in got.used)


def test_llama_factory_lora_sft(tmp_path: Path) -> None:
    got = read_setup(write(tmp_path, "llama3_lora_sft.yaml", LLAMA_FACTORY))
    assert got.format == "llama-factory"
    assert got.fields == {
        "method": "lora", "lora_rank": 8, "lora_targets": "all-linear", "seq_len": 2048,
        # init_adapter upcasts the trainable weights to fp32; the Trainer autocasts
        "precision": "bf16-amp",
        # LLaMA-Factory checkpoints unless disable_gradient_checkpointing
        "checkpointing": True,
        "micro_batch": 1, "grad_accum": 8, "epochs": 3.0,
        "zero_stage": 3}  # ds_z3_offload_config.json, by its name (the file is not here)
    # the Instruct repository is neither a catalog id nor an alias: the user gives --model
    assert got.unused[0].startswith("model_name_or_path=meta-llama/Meta-Llama-3-8B-Instruct: "
                                    "not in the catalog")
    assert "give --model" in got.unused[0]
    offload = [u for u in got.unused if u.startswith("deepspeed")]
    assert len(offload) == 1 and "give --offload optimizer" in offload[0]
    assert "LLaMA-Factory per_device_train_batch_size=1 -> micro_batch 1" in got.used
    assert any("keys that change neither" in u for u in got.unused)


def test_llama_factory_full_pure_bf16_qlora(tmp_path: Path) -> None:
    text = ("model_name_or_path: Qwen/Qwen3-8B\nstage: sft\nfinetuning_type: full\n"
            "pure_bf16: true\nbf16: true\ncutoff_len: 1024\nflash_attn: disabled\n"
            "disable_gradient_checkpointing: true\nenable_liger_kernel: true\n"
            "per_device_train_batch_size: 2\n")
    got = read_setup(write(tmp_path, "full.yaml", text))
    assert got.fields == {"model": "qwen3-8b", "method": "full", "seq_len": 1024,
                          "precision": "bf16", "checkpointing": False,
                          "flash_attention": False, "loss_kernel": "fused-linear",
                          "liger_kernels": "classes", "micro_batch": 2}
    got = read_setup(write(tmp_path, "q.yaml", text.replace("full", "lora") +
                           "quantization_bit: 4\nlora_target: q_proj,k_proj,v_proj,o_proj\n"))
    assert got.fields["method"] == "qlora" and got.fields["lora_targets"] == "attention"


def test_torchtune_lora_single_device(tmp_path: Path) -> None:
    got = read_setup(write(tmp_path, "8B_lora_single_device.yaml", TORCHTUNE))
    assert got.format == "torchtune"
    assert got.fields == {
        "model": "llama-3.1-8b", "method": "lora", "lora_rank": 8, "micro_batch": 2,
        "grad_accum": 8, "checkpointing": True, "precision": "bf16", "packed": False,
        "optimizer": "adamw", "optimizer_impl": "fused", "loss_kernel": "chunked",
        "epochs": 1, "lora_dropout": 0.0,
        # torchtune's MultiHeadAttention repeats k and v to the query heads before SDPA
        "kv_repeated": True,
        # its LoRALinear is built in the model's bf16
        "lora_adapter_dtype": "half"}
    keys = unused_keys(got.unused)
    # q, v, output + MLP (no k): none of all-linear, attention, qv
    assert keys[0] == "model.lora_attn_modules" and "none of them" in got.unused[0]
    assert "tokenizer.max_seq_len" in keys and "give --seq" in got.unused[keys.index(
        "tokenizer.max_seq_len")]


def test_torchtune_all_linear_targets(tmp_path: Path) -> None:
    text = TORCHTUNE.replace("['q_proj', 'v_proj', 'output_proj']",
                             "['q_proj', 'k_proj', 'v_proj', 'output_proj']").replace(
        "max_seq_len: null", "max_seq_len: 4096")
    got = read_setup(write(tmp_path, "tt.yaml", text))
    assert got.fields["lora_targets"] == "all-linear"
    assert got.fields["seq_len"] == 4096


def test_training_arguments_json_with_deepspeed_and_config_beside(tmp_path: Path) -> None:
    shutil.copy(CATALOG_MODELS / "qwen2.5-0.5b.json", tmp_path / "config.json")
    write(tmp_path, "ds.json", DEEPSPEED)
    got = read_setup(write(tmp_path, "training_args.json", TRAINING_ARGS))
    assert got.format == "hf-training-args"
    assert got.fields == {
        "model": str(tmp_path / "config.json"),
        # bf16 under DeepSpeed's engine (its bf16.enabled "auto" = the Trainer's bf16): half
        # weights, fp32 master weights and moments, no autocast
        "precision": "bf16-mixed",
        "micro_batch": 8, "grad_accum": 2, "checkpointing": True, "optimizer": "adamw",
        "optimizer_impl": "fused", "zero_stage": 3, "epochs": 3.0,
        # DeepSpeed runs ZeRO-3 and offloads the optimizer; pin_memory unstated: the setup's
        # default, pinned (DeepSpeed's since PR #8207), said among the unused keys
        "zero3_engine": "deepspeed", "offload": "optimizer"}
    assert any("pin_memory: not stated" in u for u in got.unused)
    assert any("offload_optimizer.device=cpu -> offload optimizer" in u for u in got.used)
    assert not any(u.startswith("deepspeed offload") and "pin_memory" not in u
                   for u in got.unused)
    assert not any(u.startswith("fsdp") for u in got.unused)


@pytest.mark.parametrize(("zero", "expected", "skipped"), [
    # ZeRO-2 as DeepSpeed runs it unstated: one 5e8-element bucket (contiguous_gradients)
    ({"stage": 2}, {"zero_stage": 2, "deepspeed_reduce_bucket": 500_000_000}, None),
    # stated: Qwen's ds_config_zero2.json's buckets and overlap_comm, pinned offload copies
    ({"stage": 2, "overlap_comm": True, "reduce_bucket_size": 2e8,
      "offload_optimizer": {"device": "cpu", "pin_memory": True}},
     {"zero_stage": 2, "deepspeed_overlap_comm": True, "deepspeed_reduce_bucket": 200_000_000,
      "offload": "optimizer", "offload_copies": "pinned"}, None),
    # no contiguous gradients: no bucket buffer; transformers' "auto" is not a number
    ({"stage": 1, "contiguous_gradients": False}, {"zero_stage": 1}, None),
    ({"stage": 2, "reduce_bucket_size": "auto"}, {"zero_stage": 2}, "hidden_size^2"),
    # parameters offloaded at ZeRO-3 only; NVMe is not modelled
    ({"stage": 3, "offload_optimizer": {"device": "cpu", "pin_memory": True},
      "offload_param": {"device": "cpu"}},
     {"zero_stage": 3, "zero3_engine": "deepspeed", "offload": "optimizer+params",
      "offload_copies": "pinned"}, None),
    ({"stage": 3, "offload_param": {"device": "nvme"}},
     {"zero_stage": 3, "zero3_engine": "deepspeed"}, "NVMe offload is not modelled"),
])
def test_deepspeed_config_read(tmp_path: Path, zero: dict, expected: dict,
                               skipped: str | None) -> None:
    """What a DeepSpeed config's zero_optimization says, read into the setup's fields, with
    DeepSpeed's own defaults where it leaves a key out (zero/config.py)."""
    shutil.copy(CATALOG_MODELS / "qwen2.5-0.5b.json", tmp_path / "config.json")
    write(tmp_path, "ds.json", {"zero_optimization": zero})
    got = read_setup(write(tmp_path, "training_args.json", TRAINING_ARGS))
    ds = {k: v for k, v in got.fields.items()
          if k.startswith(("zero", "deepspeed", "offload"))}
    assert ds == expected
    if skipped:
        assert any(skipped in u for u in got.unused)
    # what was read is a setup the estimator takes
    Training.model_validate({"model": "qwen2.5-0.5b", **expected})


def test_trl_sft_config(tmp_path: Path) -> None:
    data = {**TRAINING_ARGS, "deepspeed": None, "max_length": 1024, "packing": True,
            "dataset_text_field": "text", "fsdp": "full_shard auto_wrap offload",
            "model_init_kwargs": {"torch_dtype": "bfloat16",
                                  "attn_implementation": "flash_attention_2"},
            "optim": "paged_adamw_32bit"}
    got = read_setup(write(tmp_path, "sft.json", data))
    assert got.format == "trl-sft"
    assert got.fields["precision"] == "bf16"  # weights loaded in bfloat16
    assert got.fields["flash_attention"] is True
    assert got.fields["seq_len"] == 1024 and got.fields["packed"] is True
    assert got.fields["zero_stage"] == 3
    # FSDP's CPUOffload with full sharding: parameters, gradients and state on the host
    assert got.fields["offload"] == "optimizer+params"
    # paged_adamw_32bit: bitsandbytes' paged fp32 AdamW, read as such; beside FSDP's CPU
    # offload the setup says what cannot run together (a paged optimizer steps on the GPU)
    assert got.fields["optimizer"] == "adamw" and got.fields["optimizer_paged"] is True
    setup = {k: v for k, v in got.fields.items() if k not in ("epochs", "packed")}
    with pytest.raises(FieldError, match="paged optimizer"):
        Training.model_validate({"model": "qwen2.5-0.5b", **setup})


def test_trl_grpo_config(tmp_path: Path) -> None:
    data = {"per_device_train_batch_size": 8, "gradient_accumulation_steps": 4,
            "num_generations": 8, "max_prompt_length": 512, "max_completion_length": 256,
            "use_vllm": True, "beta": 0.04, "bf16": True, "max_steps": 1000,
            "num_train_epochs": 1}
    got = read_setup(write(tmp_path, "grpo.json", data))
    assert got.format == "trl-grpo"
    assert got.fields == {"precision": "bf16-amp", "micro_batch": 8, "grad_accum": 4,
                          "steps": 1000, "seq_len": 768}
    assert {"num_generations", "use_vllm", "beta", "num_train_epochs"} <= set(
        unused_keys(got.unused))


def test_trainer_state(tmp_path: Path) -> None:
    data = {"best_metric": None, "epoch": 1.0, "global_step": 500, "is_hyper_param_search":
            False, "log_history": [{"loss": 1.2, "step": 10}], "logging_steps": 10,
            "max_steps": 500, "num_train_epochs": 1, "save_steps": 500, "total_flos": 1e17,
            "train_batch_size": 4, "trial_name": None}
    got = read_setup(write(tmp_path, "trainer_state.json", data))
    assert got.format == "hf-trainer-state"
    assert got.fields == {"micro_batch": 4, "steps": 500}


def test_detect_nothing() -> None:
    assert detect_format({"foo": 1}) is None
    assert detect_format({"base_model": "x", "micro_batch_size": 1}) == "axolotl"


def test_unknown_model_is_reported(tmp_path: Path) -> None:
    got = read_setup(write(tmp_path, "a.yml", AXOLOTL.replace(
        "NousResearch/Meta-Llama-3-8B", "someone/my-own-model")))
    assert "model" not in got.fields
    assert got.unused[0].startswith("base_model=someone/my-own-model: not in the catalog")
    assert "give --model" in got.unused[0]


@pytest.mark.parametrize(("name", "text", "match"), [
    ("x.yaml", "foo: 1\nbar: 2\n", "not a training setup gpuhours can read"),
    ("x.yaml", "base_model: [\n", "not valid YAML"),
    ("x.json", "{\"per_device_train_batch_size\": ", "not valid JSON"),
    ("x.yaml", "- a\n- b\n", "found a list, not a mapping"),
    ("x.yaml", "", "found nothing"),
])
def test_bad_files(tmp_path: Path, name: str, text: str, match: str) -> None:
    p = write(tmp_path, name, text)
    with pytest.raises(InputError, match=match) as e:
        read_setup(p)
    assert str(p) in str(e.value)


# Merging with the command line -----------------------------------------------------------------
def test_settings_to_use(tmp_path: Path) -> None:
    got = read_setup(write(tmp_path, "lora-8b.yml", AXOLOTL))
    fill, notes = settings_to_use(got, {"micro_batch"}, None, "lora-8b.yml")
    assert "micro_batch" not in fill and "epochs" not in fill and "packed" not in fill
    assert notes[0].startswith("setup read from lora-8b.yml (axolotl): ")
    assert notes[1] == "lora-8b.yml: the command line replaces the file's micro_batch."
    assert any("epochs=4 not used: give --examples" in n for n in notes)
    fill, _ = settings_to_use(got, set(), "examples", "lora-8b.yml")
    assert fill["epochs"] == 4 and fill["packed"] is True
    fill, _ = settings_to_use(got, set(), "tokens", "lora-8b.yml")
    assert "epochs" not in fill and "packed" not in fill


# The command -----------------------------------------------------------------------------------
runner = CliRunner()


def run(*args: str) -> Result:
    return runner.invoke(app, list(args), env={"COLUMNS": "200", "NO_COLOR": "1"})


AXOLOTL_FLAGS = ("--model", "llama-3-8b", "--method", "qlora", "--base-quant", "int8-bnb",
                 "--lora-rank", "32",
                 "--lora-targets", "all-linear", "--seq", "4096", "--batch", "2",
                 "--grad-accum", "4", "--precision", "bf16", "--checkpointing", "--flash",
                 "--optimizer", "adamw-8bit", "--optimizer-impl", "fused",
                 "--lora-dropout", "0.05", "--lora-trainable-embeddings")


def test_cli_from_axolotl_equals_flags(tmp_path: Path) -> None:
    p = write(tmp_path, "axolotl.yml", AXOLOTL)
    a = run("estimate", "--from", str(p), "--gpu", "a100-80gb", "--json")
    b = run("estimate", *AXOLOTL_FLAGS, "--gpu", "a100-80gb", "--json")
    assert a.exit_code == 0, a.output
    assert b.exit_code == 0, b.output
    ja, jb = json.loads(a.stdout), json.loads(b.stdout)
    warnings = ja.pop("warnings")
    jb.pop("warnings")
    assert ja == jb
    assert warnings[0].startswith(f"setup read from {p} (axolotl): ")
    assert any("load_in_8bit=true -> base_quant int8-bnb" in w for w in warnings)


def test_cli_from_with_examples_counts_epochs_packed(tmp_path: Path) -> None:
    p = write(tmp_path, "axolotl.yml", AXOLOTL)
    a = run("estimate", "--from", str(p), "--gpu", "a100-80gb", "--examples", "2000",
            "--tokens-per-example", "300", "--json")
    b = run("estimate", *AXOLOTL_FLAGS, "--gpu", "a100-80gb", "--examples", "2000",
            "--tokens-per-example", "300", "--epochs", "4", "--packed", "--json")
    assert a.exit_code == 0, a.output
    ja, jb = json.loads(a.stdout), json.loads(b.stdout)
    assert ja["totals"] == jb["totals"]


def test_cli_flag_overrides_file(tmp_path: Path) -> None:
    p = write(tmp_path, "axolotl.yml", AXOLOTL)
    # (without checkpointing the int8 base's kept inputs need more than 80 GB: shown anyway)
    r = run("estimate", "--from", str(p), "--gpu", "a100-80gb", "--batch", "1",
            "--no-checkpointing", "--ignore-memory", "--json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["setup"]["micro_batch"] == 1
    assert data["setup"]["checkpointing"] is False
    assert data["setup"]["seq_len"] == 4096
    assert (f"{p}: the command line replaces the file's micro_batch, checkpointing."
            in data["warnings"])


@pytest.mark.parametrize("text", ["foo: 1\n", "base_model: [\n", "\xff\xfe"])
def test_cli_bad_file_exits_2_naming_it(tmp_path: Path, text: str) -> None:
    p = tmp_path / "bad.yml"
    p.write_bytes(text.encode("latin-1"))
    r = run("estimate", "--from", str(p), "--gpu", "a100-80gb")
    assert r.exit_code == 2
    assert r.exception is None or isinstance(r.exception, SystemExit)
    assert "bad.yml" in r.output
    assert "Traceback" not in r.output


def test_cli_missing_file(tmp_path: Path) -> None:
    r = run("estimate", "--from", str(tmp_path / "nope.yml"), "--gpu", "a100-80gb")
    assert r.exit_code == 2
    assert "nope.yml" in r.output and "no such file" in r.output


@pytest.mark.parametrize(("extra", "zero", "offload"), [
    ("fsdp:\n  - full_shard\n  - auto_wrap\n", 3, False),
    ("fsdp_version: 2\nfsdp_config:\n  offload_params: true\n  reshard_after_forward: false\n",
     2, True),
    ("fsdp_version: 2\nfsdp_config:\n  auto_wrap_policy: TRANSFORMER_BASED_WRAP\n", 3, False),
])
def test_axolotl_fsdp(tmp_path: Path, extra: str, zero: int, offload: bool) -> None:
    got = read_setup(write(tmp_path, "fsdp.yml", AXOLOTL + extra))
    assert got.fields["zero_stage"] == zero
    assert any("CPU offload" in u for u in got.unused) is offload


def test_cli_unknown_model_asks_for_model(tmp_path: Path) -> None:
    p = write(tmp_path, "lf.yaml", LLAMA_FACTORY)
    r = run("estimate", "--from", str(p), "--gpu", "a100-80gb")
    assert r.exit_code == 2
    assert "lf.yaml" in r.output and "give --model" in r.output.replace("\n", " ")
    r = run("estimate", "--from", str(p), "--gpu", "a100-80gb", "--model", "llama-3-8b",
            "--json")
    assert r.exit_code == 0, r.output
    setup = json.loads(r.stdout)["setup"]
    assert (setup["method"], setup["lora_rank"], setup["seq_len"], setup["zero_stage"]) == (
        "lora", 8, 2048, 3)


def test_from_does_not_import_torch(tmp_path: Path) -> None:
    import subprocess
    import sys

    p = write(tmp_path, "axolotl.yml", AXOLOTL)
    code = ("import sys\nfrom typer.testing import CliRunner\nimport gpuhours.cli\n"
            f"r = CliRunner().invoke(gpuhours.cli.app, ['estimate', '--from', {str(p)!r}, "
            "'--gpu', 'a100-80gb', '--json'])\nassert r.exit_code == 0, r.output\n"
            "print(sorted(m for m in ('torch', 'transformers', 'peft') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"


def test_real_training_arguments_dump(tmp_path: Path) -> None:
    """Every key of the installed transformers' TrainingArguments JSON is either used or
    knowingly set aside: none is left 'not read by gpuhours'."""
    transformers = pytest.importorskip("transformers")
    args = transformers.TrainingArguments(output_dir=str(tmp_path / "out"), report_to="none",
                                          per_device_train_batch_size=4,
                                          gradient_accumulation_steps=8, max_steps=200)
    data = json.loads(args.to_json_string())
    data["bf16"] = True  # as written on a GPU with bf16 (this machine may have none)
    p = write(tmp_path, "training_args.json", data)
    got = read_setup(p)
    assert got.format == "hf-training-args"
    assert {k: got.fields[k] for k in ("precision", "micro_batch", "grad_accum", "steps")} == {
        "precision": "bf16-amp", "micro_batch": 4, "grad_accum": 8, "steps": 200}
    assert not [u for u in got.unused if "not read by gpuhours" in u]


def test_llama_factory_lora_on_an_8bit_base(tmp_path: Path) -> None:
    """quantization_bit 8 under LoRA, bitsandbytes by LLaMA-Factory's default quantization
    method: LoRA on an LLM.int8 base (estimate/bnb_int8.py); another method is said unused."""
    text = ("model_name_or_path: meta-llama/Meta-Llama-3-8B\nstage: sft\n"
            "finetuning_type: lora\nquantization_bit: 8\ncutoff_len: 1024\n")
    got = read_setup(write(tmp_path, "llama3_lora_sft.yaml", text))
    assert got.fields["method"] == "qlora" and got.fields["base_quant"] == "int8-bnb"
    assert not any(u.startswith("quantization_bit") for u in got.unused)
    hqq = read_setup(write(tmp_path, "hqq.yaml", text + "quantization_method: hqq\n"))
    assert any(u.startswith("quantization_method=hqq") for u in hqq.unused)


def test_a_paged_optimizer_is_read_as_paged(tmp_path: Path) -> None:
    # bitsandbytes' paged_adamw_8bit keeps its moments in CUDA managed memory
    # (estimate/paged_optimizer.py): the importer says so, and the setup is one the estimator
    # takes, with the moments outside the allocator's figures
    text = ("base_model: meta-llama/Llama-3.1-8B\nsequence_len: 2048\nmicro_batch_size: 1\n"
            "bf16: true\ngradient_checkpointing: true\noptimizer: paged_adamw_8bit\n")
    got = read_setup(write(tmp_path, "full.yml", text))
    assert got.fields["optimizer"] == "adamw-8bit"
    assert got.fields["optimizer_paged"] is True
    assert "optimizer" not in unused_keys(got.unused)
    t = Training.model_validate({"model": "llama-3.1-8b", **got.fields})
    assert t.optimizer_paged


def test_torchtune_paged_adamw_is_read_as_paged(tmp_path: Path) -> None:
    # torchtune's full single-device configs name bitsandbytes' PagedAdamW8bit; PagedAdamW is
    # its 32-bit twin: both keep their moments in CUDA managed memory
    for component, optimizer in (("bitsandbytes.optim.PagedAdamW8bit", "adamw-8bit"),
                                 ("bitsandbytes.optim.PagedAdamW", "adamw")):
        text = TORCHTUNE.replace("_component_: torch.optim.AdamW",
                                 f"_component_: {component}")
        assert component in text
        got = read_setup(write(tmp_path, "tt.yaml", text))
        assert got.fields["optimizer"] == optimizer
        assert got.fields["optimizer_paged"] is True
        assert got.fields["optimizer_impl"] == "fused"


def test_an_epoch_count_of_minus_one_is_said_not_used(tmp_path: Path) -> None:
    got = read_setup(write(tmp_path, "e.yml", AXOLOTL.replace("num_epochs: 4",
                                                               "num_epochs: -1")))
    assert "epochs" not in got.fields
    assert "num_epochs=-1: 0 or less: the trainer's 'not set'" in got.unused
