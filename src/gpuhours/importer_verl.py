"""verl's PPO/GRPO trainer config (`python -m verl.trainer.main_ppo`, a Hydra config) as the setup
of its policy update: the actor's training step, which is what `gpuhours estimate` prices.

Key names and defaults from volcengine/verl: verl/trainer/config/ppo_trainer.yaml (flattened in
_generated_ppo_trainer.yaml) and examples/grpo_trainer/*.sh. The file read is the composed config
(Hydra writes it to the run's `.hydra/config.yaml`) or one written in its shape.

How verl sizes the update (verl/workers/fsdp_workers.py, "normalize config"; dp_actor.py
update_policy):
- the mini-batch of one optimizer step is `actor.ppo_mini_batch_size` prompts x `rollout.n`
  responses, split over the data-parallel ranks (GPUs / Ulysses sequence-parallel size);
- a micro-batch per GPU is `actor.ppo_micro_batch_size_per_gpu`, or the deprecated global
  `actor.ppo_micro_batch_size` divided by the same ranks;
- gradient accumulation = the per-GPU mini-batch / the per-GPU micro-batch;
- each RL step's `data.train_batch_size` prompts give train_batch_size / ppo_mini_batch_size
  optimizer steps, `actor.ppo_epochs` times;
- the actor is loaded in fp32 and FSDP computes in bf16 (MixedPrecision param_dtype bf16,
  reduce and buffers fp32); attention is flash_attention_2 unless `model.override_config`
  says otherwise.

Rollouts, the reference model, a critic and a reward model are not part of one training step;
their keys are reported together as not used (an `rl` plan phase models them: docs/rl.md).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from gpuhours.import_reader import Imported, Reader, modules_of, set_model, set_targets

A = "actor_rollout_ref."
#: sections of the config that are not the actor's training step
_NOT_THE_UPDATE = (A + "rollout.", A + "ref.", "critic.", "reward_model.", "algorithm.",
                   "custom_reward_function.", "ray_kwargs.", "ray_init.", "global_profiler.",
                   "reward_manager.", "trainer.logger")


#: keys that change neither memory nor time of the update: the loss's coefficients, the
#: optimizer's hyper-parameters, run control (trainer.*: logging, saving, testing), data sources
_QUIET = re.compile(
    r"^trainer\.|^data\.|clip_ratio|loss_agg_mode|entropy_coeff|kl_loss|use_kl_loss|grad_clip|"
    r"\.optim\.|policy_loss\.|\.checkpoint\.|\.shuffle$|wrap_policy|forward_prefetch|"
    r"hybrid_engine|use_shm|nccl_timeout|\.profiler\.")


def is_verl(data: dict[str, Any]) -> bool:
    """A verl trainer config: an `actor_rollout_ref` section."""
    return isinstance(data.get("actor_rollout_ref"), dict)


def _flatten(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Dotted leaf keys. A Hydra interpolation (`${...}`) or a mandatory value (`???`) is left
    out: its value is another key's, or unset."""
    leaves: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            leaves.update(_flatten(value, name + "."))
        elif isinstance(value, str) and ("${" in value or value == "???"):
            continue
        elif not str(key).endswith("_target_"):  # the Hydra class a section builds
            leaves[name] = value
    return leaves


def _whole(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 \
        else None


def _whole_key(r: Reader, key: str) -> int | None:
    """A count verl reads: a whole number >= 1, or None when unset (null, or 0 and below,
    which verl's configs use for "not given"); any other value is bad input naming the key."""
    value = r.take(key)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        r.bad(key, value, "a whole number")
    return _whole(value)


def _batches(r: Reader) -> None:
    """micro_batch, grad_accum and num_gpus as verl normalises them (module docstring)."""
    per_node, nodes = _whole_key(r, "trainer.n_gpus_per_node"), _whole_key(r, "trainer.nnodes")
    gpus = (per_node or 1) * (nodes or 1)
    if per_node is not None:
        r.set("num_gpus", gpus, f"trainer.n_gpus_per_node={per_node} x "
              f"trainer.nnodes={nodes or 1}")
    sp = _whole_key(r, A + "actor.ulysses_sequence_parallel_size") or 1
    if sp > 1:
        r.skip(f"actor.ulysses_sequence_parallel_size={sp}", "Ulysses sequence parallelism is "
               "not modelled: the estimate keeps whole sequences on each GPU (more activation "
               "memory)")
    ranks = max(gpus // sp, 1)
    if r.take(A + "actor.use_dynamic_bsz") is True:
        r.skip("actor.use_dynamic_bsz=true", "micro-batches made by a token budget "
               "(ppo_max_token_len_per_gpu) are not modelled by one training step: give "
               "--batch (an `rl` plan phase models them: update_tokens_per_gpu, mini_batches)")
        r.take(A + "actor.ppo_max_token_len_per_gpu")
        return
    r.take(A + "actor.ppo_max_token_len_per_gpu")  # only read under use_dynamic_bsz
    per_gpu = _whole_key(r, A + "actor.ppo_micro_batch_size_per_gpu")
    global_micro = _whole_key(r, A + "actor.ppo_micro_batch_size")
    micro = None
    if per_gpu is not None:
        micro = per_gpu
        r.set("micro_batch", micro, f"actor.ppo_micro_batch_size_per_gpu={per_gpu}")
    elif global_micro is not None and global_micro // ranks >= 1:
        micro = global_micro // ranks
        r.set("micro_batch", micro, f"actor.ppo_micro_batch_size={global_micro} // {ranks} "
              "data-parallel ranks", "verl's normalisation of the deprecated global size")
    mini = _whole_key(r, A + "actor.ppo_mini_batch_size")
    n = _whole_key(r, A + "rollout.n") or 1
    if mini is not None and micro is not None:
        per_gpu_mini = mini * n // ranks
        if per_gpu_mini >= micro:
            r.set("grad_accum", per_gpu_mini // micro,
                  f"actor.ppo_mini_batch_size={mini} x rollout.n={n} // {ranks} ranks // "
                  f"micro-batch {micro}", "optimizer steps of mini-batches, as dp_actor splits "
                  "them")
    total = _whole_key(r, "trainer.total_training_steps")
    epochs = r.take("trainer.total_epochs")
    ppo_epochs = _whole_key(r, A + "actor.ppo_epochs") or 1
    train_batch = _whole_key(r, "data.train_batch_size")
    if total is not None and train_batch is not None and mini is not None:
        steps = total * max(train_batch // mini, 1) * ppo_epochs
        r.set("steps", steps, f"trainer.total_training_steps={total} x data.train_batch_size="
              f"{train_batch} // ppo_mini_batch_size={mini} x ppo_epochs={ppo_epochs}",
              "optimizer steps of the policy update")
    elif isinstance(epochs, int | float) and not isinstance(epochs, bool) and epochs > 0:
        r.set("epochs", epochs * ppo_epochs, f"trainer.total_epochs={epochs} x "
              f"actor.ppo_epochs={ppo_epochs}", "with --examples = prompts x rollout.n")


def _method(r: Reader) -> None:
    rank = _whole_key(r, A + "model.lora_rank")  # 0 (verl's default): no LoRA
    targets = r.take(A + "model.target_modules")
    r.take(A + "model.lora_alpha")
    if rank is not None:
        r.set("method", "lora", f"model.lora_rank={rank}")
        r.set("lora_rank", rank, f"model.lora_rank={rank}")
        if targets == "all-linear":
            r.set("lora_targets", "all-linear", "model.target_modules=all-linear")
        elif targets:
            set_targets(r, f"model.target_modules={targets}", modules_of(targets))
    else:
        r.set("method", "full", f"model.lora_rank={rank or 0}", "every weight trains")
    exclude = r.take(A + "model.exclude_modules")
    if exclude:
        r.skip(f"model.exclude_modules={exclude}", "adapters left off some modules are not "
               "modelled")


def _strategy(r: Reader) -> None:
    strategy = r.take(A + "actor.strategy") or "fsdp"
    fsdp = A + "actor.fsdp_config."
    if strategy in ("fsdp", "fsdp2"):
        size = r.take(fsdp + "fsdp_size")
        reshard = r.take(fsdp + "reshard_after_forward")
        if isinstance(size, int) and size > 1:
            r.skip(f"actor.fsdp_config.fsdp_size={size}", "hybrid sharding (groups of fsdp_size "
                   "GPUs, replicated across them) is not modelled: give --zero")
        elif reshard is False:
            r.set("zero_stage", 2, f"actor.strategy={strategy}, reshard_after_forward=false",
                  "parameters kept gathered after the forward = ZeRO-2")
        else:
            r.set("zero_stage", 3, f"actor.strategy={strategy}", "FSDP full shard over every "
                  "GPU (fsdp_size -1) = ZeRO-3")
        mixed = r.take(fsdp + "mixed_precision.param_dtype")
        half = {"fp32": "fp32", "float32": "fp32", "fp16": "fp16-mixed",
                "float16": "fp16-mixed"}.get(str(mixed), "bf16-mixed")
        r.set("precision", half, f"actor.strategy={strategy}" + (
            f", mixed_precision.param_dtype={mixed}" if mixed else ""),
            "FSDP keeps the fp32 parameters the actor is loaded in and computes in "
            f"{'bf16' if half == 'bf16-mixed' else mixed}")
        for key in ("param_offload", "optimizer_offload", "offload_policy"):
            if r.take(fsdp + key) is True:
                r.skip(f"actor.fsdp_config.{key}=true", "CPU offload is not modelled: the "
                       "estimate keeps that state on the GPU (more memory, less time)")
    else:
        r.skip(f"actor.strategy={strategy}", "only the FSDP actor is read: give --zero, "
               "--precision and, for Megatron, --tp/--pp")


def _log_probs(r: Reader) -> None:
    """The actor's log-probs, the loss kernel of its update (volcengine/verl@df340d70
    dp_actor.py _forward_micro_batch; utils/torch_functional.py logprobs_from_logits): verl
    calls the model without labels, so transformers' loss never runs. With
    `model.use_fused_kernels` the model returns log-probs from hidden states by chunks of 512
    tokens, recomputed in backward (utils/experimental/torch_functional.py
    FusedLinearForPPOFunction): no whole logits, as Cut Cross-Entropy. Otherwise the logits are
    divided by the temperature in place and flash-attn's Triton cross-entropy takes them with
    in-place backward (flash-attn is in verl's GPU requirements; without it verl falls back to
    a per-row log-softmax, not modelled); an entropy term (`actor.entropy_coeff` != 0 or
    `actor.calculate_entropy`) turns the in-place backward off and adds its own pass over the
    logits, not modelled: transformers' loss is kept then (fp32 logits)."""
    fused = r.take(A + "model.use_fused_kernels") is True
    coeff = r.take(A + "actor.entropy_coeff")
    calculate = r.take(A + "actor.calculate_entropy") is True
    entropy = calculate or (isinstance(coeff, int | float) and not isinstance(coeff, bool)
                            and coeff != 0)
    if fused:
        r.set("loss_kernel", "cut-ce", "model.use_fused_kernels=true", "verl's fused "
              "linear-for-log-probs: logits by chunks of 512 tokens, recomputed in backward; "
              "the chunk's working set not counted")
    elif entropy:
        what = "actor.calculate_entropy=true" if calculate else f"actor.entropy_coeff={coeff}"
        r.skip(what, "the entropy over the logits (and flash-attn's cross-entropy without "
               "in-place backward) is not modelled: the logits are costed as transformers' "
               "fp32 loss, an upper bound")
    else:
        r.set("loss_kernel", "verl-logprobs", "model.use_fused_kernels=false, actor."
              f"entropy_coeff={coeff if coeff is not None else 0}", "verl's actor log-probs: "
              "flash-attn's cross-entropy with in-place backward on the half-precision logits "
              "(dp_actor.py, torch_functional.logprobs_from_logits)")


def _model(r: Reader) -> None:
    set_model(r, A + "model.path")
    checkpointing = r.take(A + "model.enable_gradient_checkpointing")
    if isinstance(checkpointing, bool):
        r.set("checkpointing", checkpointing,
              f"model.enable_gradient_checkpointing={str(checkpointing).lower()}")
    attn = r.take(A + "model.override_config.attn_implementation")
    if attn is None:
        r.set("flash_attention", True, "model.override_config (no attn_implementation)",
              "verl loads the actor with flash_attention_2 by default")
    else:
        r.set("flash_attention", attn != "eager",
              f"model.override_config.attn_implementation={attn}")
    if r.take(A + "model.use_remove_padding") is True:
        r.skip("model.use_remove_padding=true", "padding removal: the estimate counts each "
               "sequence at max_prompt_length + max_response_length (an upper bound)")
    if r.take(A + "model.use_liger") is True:
        # verl's _apply_liger_kernel_to_instance with the defaults (rope, rms_norm, swiglu);
        # verl calls the model without labels, so the fused linear cross-entropy never runs
        r.set("liger_kernels", "instance", "model.use_liger=true", "Liger's RMSNorm, RoPE "
              "and SwiGLU on the built model; its fused linear cross-entropy does not run "
              "(no labels)")
    _log_probs(r)
    if r.take(A + "actor.use_torch_compile") is True:
        r.skip("actor.use_torch_compile=true", "torch.compile of the log-prob and entropy "
               "functions is not modelled: the estimate is of an eager step")
    if r.take(A + "model.enable_activation_offload") is True:
        r.skip("model.enable_activation_offload=true", "activation offloading is not modelled")
    prompt = _whole_key(r, "data.max_prompt_length")
    response = _whole_key(r, "data.max_response_length")
    if prompt and response:
        r.set("seq_len", prompt + response, f"data.max_prompt_length={prompt} + "
              f"data.max_response_length={response}", "the policy update's sequence")


def read_verl(data: dict[str, Any], folder: Path, where: str = "",
              lines: dict[str, int] | None = None) -> Imported:
    """The actor update's setup in a verl trainer config (module docstring); `where` and
    `lines` (of the top-level keys) name the file in errors."""
    flat = _flatten(data)
    path = flat.get(A + "model.path")
    if isinstance(path, str) and path.startswith("~"):
        flat[A + "model.path"] = os.path.expanduser(path)
    r = Reader(flat, "verl", _QUIET, where=where, lines=lines)
    defaults = r.take("defaults")
    if defaults:
        r.skip("defaults", "Hydra's defaults list is not composed here: the settings of the "
               "groups it names are not read (read the run's .hydra/config.yaml instead)")
    _model(r)
    _method(r)
    _strategy(r)
    _batches(r)
    others = [k for k, v in flat.items()
              if k not in r.seen and k.startswith(_NOT_THE_UPDATE) and v not in (None, False, "")]
    for key in others:
        r.take(key)
    if others:
        shown = ", ".join(f"{k.removeprefix(A)}={flat[k]}" for k in others
                          if k.endswith(("rollout.name", "rollout.tensor_model_parallel_size",
                                         "adv_estimator", "critic.enable")))
        r.skip(f"{len(others)} keys of the rollout, reference, critic, reward model and "
               f"algorithm sections ({shown or 'none of them sizes the update'})",
               "`estimate` prices the policy update's training step; rollouts and scoring are "
               "an rl plan phase's (docs/rl.md)")
    return r.finish("verl")


#: verl's rollout engines by `rollout.name`, as an rl plan phase names them
_ENGINES = {"vllm": "vllm", "sglang": "sglang", "hf": "hf-generate"}


def rl_settings(data: dict[str, Any], prompts_per_step: int, reference_model: bool
                ) -> tuple[list[tuple[str, Any, str]], list[str]]:
    """The settings of verl's rollout, reference and mini-batching that an `rl` plan phase has
    fields for: [(field, value, the verl keys it comes from)], and the notes on keys read
    but not mapped. `prompts_per_step` (the phase's) sets the mini-batches a step
    (ppo_mini_batch_size prompts each, dp_actor.py update_policy); the reference's offload is
    taken only when the phase runs a reference model.

    Keys and their meaning from verl/trainer/config/ppo_trainer.yaml: rollout.n responses a
    prompt, rollout.tensor_model_parallel_size the engine's TP, rollout.gpu_memory_utilization
    its share of each GPU, rollout.max_num_seqs, ref.fsdp_config.param_offload the reference's
    weights on the host, actor.ppo_epochs, actor.use_dynamic_bsz with
    ppo_max_token_len_per_gpu (the update's token budget) and rollout/ref
    log_prob_max_token_len_per_gpu (the scoring passes'), algorithm.adv_estimator gae (a
    critic), data.max_response_length the longest response."""
    flat = _flatten(data)
    out: list[tuple[str, Any, str]] = []
    notes: list[str] = []

    def whole(key: str) -> int | None:
        return _whole(flat.get(key))

    n = whole(A + "rollout.n")
    if n is not None:
        out.append(("generations_per_prompt", n, f"rollout.n={n}"))
    tp = whole(A + "rollout.tensor_model_parallel_size")
    if tp is not None:
        out.append(("rollout_tensor_parallel", tp, f"rollout.tensor_model_parallel_size={tp}"))
    share = flat.get(A + "rollout.gpu_memory_utilization")
    if isinstance(share, int | float) and not isinstance(share, bool):
        out.append(("rollout_memory_utilisation", float(share),
                    f"rollout.gpu_memory_utilization={share:g}"))
    name = flat.get(A + "rollout.name")
    if isinstance(name, str):
        if name in _ENGINES:
            out.append(("engine", _ENGINES[name], f"rollout.name={name}"))
        else:
            notes.append(f"rollout.name={name}: no engine of an rl phase; the phase's engine "
                         "is kept")
    seqs = whole(A + "rollout.max_num_seqs")
    if seqs is not None:
        out.append(("rollout_max_num_seqs", seqs, f"rollout.max_num_seqs={seqs}"))
    if flat.get(A + "ref.fsdp_config.param_offload") is True:
        if reference_model:
            out.append(("ref_offload", True, "ref.fsdp_config.param_offload=true"))
        else:
            notes.append("ref.fsdp_config.param_offload=true: the phase runs no reference "
                         "model")
    epochs = whole(A + "actor.ppo_epochs")
    if epochs is not None:
        out.append(("policy_epochs", epochs, f"actor.ppo_epochs={epochs}"))
    mini = whole(A + "actor.ppo_mini_batch_size")
    if mini is not None:
        if prompts_per_step % mini == 0:
            out.append(("mini_batches", prompts_per_step // mini,
                        f"the phase's prompts_per_step {prompts_per_step} // "
                        f"actor.ppo_mini_batch_size={mini}"))
        else:
            notes.append(f"actor.ppo_mini_batch_size={mini} does not divide the phase's "
                         f"prompts_per_step {prompts_per_step}: mini_batches not taken")
    if flat.get(A + "actor.use_dynamic_bsz") is True:
        budget = whole(A + "actor.ppo_max_token_len_per_gpu") or 16384
        out.append(("update_tokens_per_gpu", budget, "actor.use_dynamic_bsz=true, "
                    f"ppo_max_token_len_per_gpu={budget}"
                    + ("" if whole(A + "actor.ppo_max_token_len_per_gpu") else
                       " (verl's default)")))
        scoring = (whole(A + "rollout.log_prob_max_token_len_per_gpu")
                   or whole(A + "ref.log_prob_max_token_len_per_gpu"))
        if scoring is not None:
            out.append(("scoring_tokens_per_gpu", scoring,
                        f"log_prob_max_token_len_per_gpu={scoring}"))
    adv = flat.get("algorithm.adv_estimator")
    if isinstance(adv, str):
        out.append(("critic", adv == "gae", f"algorithm.adv_estimator={adv}"))
    response = whole("data.max_response_length")
    if response is not None:
        out.append(("max_response_tokens", response, f"data.max_response_length={response}"))
    return out, notes
