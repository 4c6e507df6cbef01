"""What every setup importer shares (gpuhours.importers, gpuhours.importer_verl): the Imported
result, a Reader that marks each key it takes and reports the rest, model lookup and LoRA
targets. Pure: no torch, no network."""

from __future__ import annotations

import json
import re
from typing import Any, NoReturn

from pydantic import BaseModel, ConfigDict

from gpuhours.errors import InputError

#: Training fields and amounts an import may set (the keys of Imported.fields)
FIELDS = ("model", "method", "precision", "optimizer", "optimizer_impl", "micro_batch",
          "seq_len", "grad_accum", "checkpointing", "flash_attention", "loss_kernel",
          "lora_rank", "lora_targets", "lora_dropout", "lora_trainable_embeddings", "zero_stage",
          "steps", "epochs", "examples", "packed", "num_gpus")

#: keys that change neither memory nor time (learning rate, logging, saving, evaluation, data
#: sources, tokenizer, hub, seeds): reported together in one line, not one by one
NO_COST = re.compile(
    r"learning_rate|^lr$|warmup|weight_decay|^adam_|epsilon|max_grad_norm|scheduler|log|save|"
    r"eval|seed|hub|report_to|output_dir|run_name|wandb|mlflow|push_to|dataset|template|"
    r"tokenizer|special_tokens|val_set_size|val_size|overwrite|preprocessing|dataloader|"
    r"trust_remote_code|resume|^do_|^ddp_|metric|label|(?<!lora_)dropout|lora_alpha|data_files|"
    r"shuffle|^device$|plot_|disable_tqdm|remove_unused|include_|tf32|local_rank|strict|"
    r"profiler|checkpointer|max_samples|group_by_length|train_on_inputs|model_type$|^split$|"
    r"^source$|cutoff|^prediction|greater_is_better|accelerator_config|past_index|jit_mode|"
    r"restore_callback|optim_target|torchdynamo|ray_|use_cpu|use_mps|^no_cuda|^debug$|"
    r"full_determinism|skip_memory_metrics|batch_eval|average_tokens|ignore_data_skip|"
    r"project$|trackio|^stage$|^finetuning_type$|lora_model_dir|"
    r"^batch_size$|max_steps_per_epoch$|chat_template|^enable_activation_offloading$|"
    r"^compile$|^dtype$|fp16_opt_level|half_precision_backend|fp16_backend|length_column|"
    r"best_model|_token$|temperature|^top_[pk]$|^min_p$|repetition_penalty|sampling_strategy|"
    r"revision$|log_completions")


class Imported(BaseModel):
    """What a setup file said, in gpuhours' terms."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: the format detected: axolotl, llama-factory, torchtune, hf-training-args,
    #: hf-trainer-state, trl-sft, trl-grpo, verl
    format: str
    #: Training field names (and steps, epochs, examples, packed, num_gpus) -> values
    fields: dict[str, Any]
    #: "axolotl micro_batch_size=2 -> micro_batch 2", one per key used
    used: list[str]
    #: "load_in_8bit: ...", one per key seen but not used, with why
    unused: list[str]


class Reader:
    """One file's keys: each taken key is marked; what is left is reported at the end."""

    def __init__(self, data: dict[str, Any], tool: str,
                 quiet: re.Pattern[str] | None = None, where: str = "",
                 lines: dict[str, int] | None = None) -> None:
        """`quiet`: more keys that change neither memory nor time, beside NO_COST's; `where`:
        the file, and `lines` its top-level keys' lines, for errors."""
        self.data, self.tool, self.quiet = data, tool, quiet
        self.where, self.lines = where or tool, lines or {}
        self.seen: set[str] = set()
        self.fields: dict[str, Any] = {}
        self.used: list[str] = []
        self.unused: list[str] = []

    def take(self, key: str) -> Any:
        self.seen.add(key)
        return self.data.get(key)

    def has(self, key: str) -> bool:
        return self.data.get(key) is not None

    def set(self, field: str, value: Any, source: str, note: str = "") -> None:
        """Set `field` from `source` (e.g. "micro_batch_size=2"), replacing an earlier value."""
        self.fields[field] = value
        shown = value if not isinstance(value, bool) else str(value).lower()
        self.used.append(f"{self.tool} {source} -> {field} {shown}" + (f" ({note})" if note
                                                                          else ""))

    def bad(self, key: str, value: Any, expected: str) -> NoReturn:
        """A key gpuhours reads whose value it cannot read: bad input (exit code 2), naming the
        file, the line where known and the key, not a default in its place. `key` may be
        dotted (`model.lora_dropout`): the line is its top-level key's."""
        top = key.split(".", 1)[0]
        line = self.lines.get(top)
        at = ("" if not line else f", line {line}" if top == key
              else f", section {top!r} at line {line}")
        raise InputError(f"{self.where}{at}, key {key!r}",
                         f"expected {expected}, got {short(value)!r}.",
                         "Correct the value, or remove the key and give the setting on the "
                         "command line.")

    def skip(self, source: str, why: str) -> None:
        self.unused.append(f"{source}: {why}")

    def finish(self, fmt: str) -> Imported:
        quiet: list[str] = []
        left: list[str] = []
        for key, value in self.data.items():
            if key in self.seen or not value:
                continue  # a feature left off or unset says nothing about the run
            # a nested format's keys are dotted (verl): its last part names the setting
            costless = (NO_COST.search(key) or NO_COST.search(key.rsplit(".", 1)[-1])
                        or (self.quiet is not None and self.quiet.search(key)))
            (quiet if costless else left).append(key)
        for key in left:
            self.skip(f"{key}={short(self.data[key])}", "not read by gpuhours")
        if quiet:
            shown = ", ".join(quiet[:8]) + (f" and {len(quiet) - 8} more" if len(quiet) > 8
                                             else "")
            self.unused.append(f"{len(quiet)} keys that change neither memory nor time "
                               f"(learning rate, logging, data, saving): {shown}")
        return Imported(format=fmt, fields=self.fields, used=self.used, unused=self.unused)


def short(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, str) else value
    return text if len(text) <= 40 else text[:37] + "..."


# Models ----------------------------------------------------------------------------------------
def catalog_model(name: str) -> tuple[str | None, str]:
    """(a model reference Training accepts, how it was found) or (None, why not).

    A catalog name, alias or Hugging Face id first; then the repository's name without its
    owner ("NousResearch/Meta-Llama-3-8B" -> alias meta-llama-3-8b: a copy of the same weights
    under another account has the same shape); then a local folder or config.json."""
    from gpuhours import catalog

    candidates = [name] + ([name.rsplit("/", 1)[1]] if "/" in name.strip("/") else [])
    for i, candidate in enumerate(candidates):
        try:
            entry, _ = catalog.model(candidate)
        except (InputError, OSError):
            continue
        if entry is not None:
            how = "catalog" if i == 0 else f"catalog, by the repository name {candidate}"
            return entry.name, how
        if i == 0:
            return name, "its config.json on this machine"
    return None, ("not in the catalog (see `gpuhours catalog models`) and not a local "
                  "config.json: give --model")


def set_model(r: Reader, key: str) -> None:
    name = r.take(key)
    if not isinstance(name, str) or not name:
        return
    ref, how = catalog_model(name)
    if ref is None:
        r.skip(f"{key}={name}", how)
    else:
        r.set("model", ref, f"{key}={name}", how)


# LoRA targets ----------------------------------------------------------------------------------
ATTN = {"q_proj", "k_proj", "v_proj", "o_proj"}
MLP = {"gate_proj", "up_proj", "down_proj"}


def targets_of(modules: set[str]) -> str | None:
    """peft module names -> a LoraTargets choice when they match one exactly."""
    if modules == {"q_proj", "v_proj"}:
        return "qv"
    if modules == ATTN:
        return "attention"
    if modules == ATTN - {"o_proj"}:
        return "qkv"
    if modules == ATTN | MLP:
        return "all-linear"
    if modules == MLP:
        return "mlp"
    return None


def set_targets(r: Reader, source: str, modules: set[str]) -> None:
    found = targets_of(modules)
    if found is None:
        r.skip(source, "gpuhours models adapters on q,v (qv), q,k,v (qkv), q,k,v,o "
                       "(attention), gate,up,down (mlp) or every linear layer but the LM head "
                       "(all-linear); this set is none of them")
    else:
        r.set("lora_targets", found, source)


def modules_of(value: Any) -> set[str]:
    if isinstance(value, str):
        return {m.strip() for m in value.split(",") if m.strip()}
    return {str(m) for m in value} if isinstance(value, list) else set()


# LoRA dropout and trained embeddings ---------------------------------------------------------
def set_lora_dropout(r: Reader, key: str, value: Any, note: str = "") -> None:
    """peft's lora_dropout (a probability in [0, 1)): above 0, each adapter's input is dropped
    out, a mask and a copy per adapted linear (setup.Training.lora_dropout)."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 1:
        r.bad(key, value, "a dropout probability in [0, 1)")
    r.set("lora_dropout", float(value), f"{key}={value}", note)


#: the names of the token embedding and the LM head in the model families gpuhours reads
#: (Llama/Qwen/Mistral: embed_tokens, lm_head; GPT-2: wte; torchtune: tok_embeddings, output;
#: GPT-NeoX: embed_in, embed_out; BLOOM: word_embeddings)
EMBEDDING_NAMES = {"embed_tokens", "wte", "tok_embeddings", "embed_in", "word_embeddings"}
HEAD_NAMES = {"lm_head", "output", "embed_out"}


def set_modules_to_save(r: Reader, source: str, modules: set[str]) -> None:
    """peft's modules_to_save: a trainable copy of each named module beside its frozen
    original. The token embedding and the LM head together are setup.Training's
    lora_trainable_embeddings; any other set is said to be not modelled."""
    if not modules:
        return
    emb, head = modules & EMBEDDING_NAMES, modules & HEAD_NAMES
    if emb and head and modules == emb | head:
        r.set("lora_trainable_embeddings", True, source,
              "a trained copy of the embedding and the LM head, with gradients and optimizer "
              "state")
    else:
        r.skip(source, "gpuhours models the token embedding and the LM head trained together "
                       "(--lora-trainable-embeddings, an upper bound for one of them); other "
                       "modules trained beside the adapters are not modelled")
