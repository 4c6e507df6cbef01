"""FSDP with each LoRA adapter a unit of its own (Training.fsdp_adapter_units, Answer.AI's
fsdp_qlora train.py): the rate limiter's queue seen on a real FSDP1 run on CPU (torch's fake
process group, world size 2), the share of a layer's compute each gather runs beside by hand for
Llama-2-7B, the exposure rule by hand, and the setup choice from the CLI and a plan file."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gpuhours.cli import app
from gpuhours.errors import FieldError
from gpuhours.estimate import parallel as P
from gpuhours.resolve import resolve_model
from gpuhours.setup import Training

runner = CliRunner()


def _queue_log(adapter_units: bool) -> list[tuple[str, str, int | None]]:
    """Run two training steps of a 3-layer Llama under FSDP1 (FULL_SHARD, limit_all_gathers,
    use_orig_params=False) on CPU and return the second step's queue traffic in order:
    ("free", unit, n) for each freed-weights event queued (n counts them from the first step),
    ("unshard", unit, n) for each unshard with the event it waited for (None: fewer than two
    were queued).

    adapter_units: peft LoRA on q, k, v, gate, up, down wrapped as train.py wraps it (a lambda
    policy on every leaf with a trainable weight, then the decoder layers) with reentrant
    checkpointing of each layer; otherwise full fine-tuning with the decoder layers as the only
    units besides the root."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("peft")
    import torch.distributed as dist
    import torch.distributed.fsdp._runtime_utils as runtime
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
        CheckpointImpl,
        apply_activation_checkpointing,
        checkpoint_wrapper,
    )
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp import ShardingStrategy
    from torch.distributed.fsdp._limiter_utils import _FreeEventQueue
    from torch.distributed.fsdp.wrap import (
        _or_policy,
        lambda_auto_wrap_policy,
        transformer_auto_wrap_policy,
    )
    from torch.testing._internal.distributed.fake_pg import FakeStore
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer

    config = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                         num_attention_heads=4, num_key_value_heads=4, vocab_size=128)
    torch.manual_seed(0)
    model: Any = LlamaForCausalLM(config)
    layers = functools.partial(transformer_auto_wrap_policy,
                               transformer_layer_cls=(LlamaDecoderLayer,))
    if adapter_units:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=4, lora_dropout=0.1, target_modules=[
            "k_proj", "q_proj", "v_proj", "up_proj", "down_proj", "gate_proj"]))

        def trainable_leaf(m: Any) -> bool:  # train.py's lambda_policy_fn (@05ed9f2)
            return (len(list(m.named_children())) == 0
                    and getattr(m, "weight", None) is not None and m.weight.requires_grad)

        policy: Any = functools.partial(_or_policy, policies=[functools.partial(
            lambda_auto_wrap_policy, lambda_fn=trainable_leaf), layers])
    else:
        policy = layers
    log: list[tuple[str, str, int | None]] = []
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
    saved = (runtime._unshard, runtime._reshard, _FreeEventQueue.enqueue,
             _FreeEventQueue.dequeue_if_needed)
    try:
        fsdp = FSDP(model, sharding_strategy=ShardingStrategy.FULL_SHARD, auto_wrap_policy=policy,
                    use_orig_params=False, limit_all_gathers=True,
                    device_id=torch.device("cpu"))
        if adapter_units:
            fsdp.enable_input_require_grads()
            apply_activation_checkpointing(
                fsdp, checkpoint_wrapper_fn=functools.partial(
                    checkpoint_wrapper, checkpoint_impl=CheckpointImpl.REENTRANT),
                check_fn=lambda m: isinstance(m, LlamaDecoderLayer))
        names = {}
        for name, unit in fsdp.named_modules():
            if isinstance(unit, FSDP) and unit._handle is not None:
                short = name
                for noise in ("_fsdp_wrapped_module.", "_checkpoint_wrapped_module.",
                              "base_model.model.", "model.", ".default", "self_attn.", "mlp."):
                    short = short.replace(noise, "")
                names[id(unit._handle)] = short or "root"
        now: dict[str, str] = {}

        def unshard(state: Any, handle: Any, *args: Any) -> Any:
            now["unshard"] = names[id(handle)]
            return saved[0](state, handle, *args)

        def reshard(state: Any, handle: Any, free: bool) -> Any:
            now["reshard"] = names[id(handle)]
            return saved[1](state, handle, free)

        frees = [0]

        def enqueue(queue: Any, event: Any) -> None:
            frees[0] += 1
            event.n = frees[0]
            log.append(("free", now["reshard"], event.n))
            saved[2](queue, event)

        def dequeue(queue: Any) -> Any:
            event = saved[3](queue)
            log.append(("unshard", now["unshard"], getattr(event, "n", None)))
            return event

        runtime._unshard, runtime._reshard = unshard, reshard
        _FreeEventQueue.enqueue, _FreeEventQueue.dequeue_if_needed = enqueue, dequeue
        x = torch.randint(0, 128, (1, 16))
        for _ in range(2):
            log.clear()
            fsdp(input_ids=x, labels=x).loss.backward()
    finally:
        (runtime._unshard, runtime._reshard, _FreeEventQueue.enqueue,
         _FreeEventQueue.dequeue_if_needed) = saved
        dist.destroy_process_group()
    return log


def _waits(log: list[tuple[str, str, int | None]]) -> list[tuple[str, str | None, str]]:
    """Each unshard of the second step: (unit, the unit whose free it waited for, the unit
    unsharded just before it)."""
    freed = {n: unit for kind, unit, n in log if kind == "free"}
    unshards = [(unit, n) for kind, unit, n in log if kind == "unshard"]
    # events queued in the first step keep their numbers: name them "earlier"
    return [(unit, freed.get(n, "earlier") if n is not None else None,
             unshards[k - 1][0] if k else "") for k, (unit, n) in enumerate(unshards)]


def _layer_waits(waits: list[tuple[str, str | None, str]], layer: str
                 ) -> list[tuple[str | None, str]]:
    return [(freed, before) for unit, freed, before in waits if unit == layer]


@pytest.mark.filterwarnings("ignore::FutureWarning")  # transformers' own deprecations
def test_real_fsdp_adapter_units_hold_the_gathers_to_the_layer_end() -> None:
    waits = _waits(_queue_log(adapter_units=True))
    # forward: layer i+1's gather waits until layer i's up_proj lora_B is freed (only
    # down_proj's work of layer i left to run beside it)
    assert _layer_waits(waits, "layers.1")[0][0] == "layers.0.up_proj.lora_B"
    assert _layer_waits(waits, "layers.2")[0][0] == "layers.1.up_proj.lora_B"
    # backward: layer i-1 is prefetched right after layer i's q_proj lora_A is unsharded, and
    # waits until layer i's k_proj lora_A is freed
    for prev, layer in (("layers.1", "layers.2"), ("layers.0", "layers.1")):
        freed, before = _layer_waits(waits, prev)[-1]
        assert before == f"{layer}.q_proj.lora_A"
        assert freed == f"{layer}.k_proj.lora_A"


def test_real_fsdp_layer_units_alone_gather_a_layer_ahead() -> None:
    # the control: with the layers the only units, no unshard of the forward waits for a
    # free of the same forward: layer i+1's gather may go out while layer i computes (what
    # fsdp_exposed_s takes by default); the events waited for are older
    log = _queue_log(adapter_units=False)
    forward = log[:next(k for k, (kind, unit, _) in enumerate(log)
                        if kind == "free" and unit == "layers.2")]
    this_forward = {n for kind, _, n in forward if kind == "free"}
    waited = [n for kind, unit, n in forward if kind == "unshard" and unit.startswith("layers")]
    assert len(waited) == 3 and not this_forward & set(waited)


def test_windows_llama_2_7b_by_hand() -> None:
    # d 4096, q 4096, kv 4096, f 11008, gated: the layer's linears 4 x 4096^2 + 3 x 4096 x 11008
    # = 67,108,864 + 135,266,304 = 202,375,168. Forward: down_proj 45,088,768 of them, 0.2228;
    # backward with recomputation 2 x 202,375,168, of which k's and q's input gradients
    # 2 x 16,777,216: 0.0829 (0.1658 without recomputation)
    arch, _ = resolve_model("llama-2-7b")
    fwd, bwd = P.fsdp_adapter_unit_windows(arch.hidden_size, arch.q_dim, arch.kv_dim,
                                           arch.intermediate_size, arch.gated_mlp, True)
    assert fwd == pytest.approx(45_088_768 / 202_375_168)
    assert bwd == pytest.approx(33_554_432 / 404_750_336)
    assert P.fsdp_adapter_unit_windows(4096, 4096, 4096, 11008, True, False)[1] == \
        pytest.approx(33_554_432 / 202_375_168)


def test_exposure_with_windows_by_hand() -> None:
    # 10 layers, forward 1.0 s of gathers beside 2.0 s of compute, backward 1.2 s beside 4.0 s;
    # windows 0.2 and 0.1: per layer min(0.1, 0.04) x 9 + min(0.12, 0.04) x 9 = 0.72 s hidden
    # (under the 0.8 x 2.2 the overlap share allows): 2.2 - 0.72 exposed
    assert P.fsdp_exposed_s(1.0, 1.2, 2.0, 4.0, 10, 0.8, (0.2, 0.1)) == pytest.approx(1.48)
    # whole layers (the default): 9 x (0.1 + 0.12) = 1.98 could hide, 1.76 allowed
    assert P.fsdp_exposed_s(1.0, 1.2, 2.0, 4.0, 10, 0.8) == pytest.approx(0.44)


def test_adapter_unit_collectives_by_hand() -> None:
    # 7 adapted linears x 2 units x 32 layers = 448 units: gathered in forward, recompute and
    # backward, reduce-scattered once
    assert P.fsdp_adapter_unit_collectives(7, 32, True) == (1344, 448)
    assert P.fsdp_adapter_unit_collectives(7, 32, False) == (896, 448)


def _lora_7b(**kw: object) -> Training:
    arch, _ = resolve_model("llama-2-7b")
    return Training.model_validate({**dict(
        arch=arch, method="lora", precision="bf16", lora_rank=64, lora_targets="all-linear",
        lora_adapter_dtype="half", micro_batch=1, seq_len=2048, checkpointing=True,
        zero_stage=3), **kw})


@pytest.mark.parametrize(("kw", "match"), [
    ({"zero_stage": 2}, "zero_stage 3"),
    ({"zero3_engine": "deepspeed"}, "zero_stage 3"),
    ({"method": "full", "lora_adapter_dtype": "fp32"}, "full fine-tuning"),
    ({"lora_targets": "qv"}, "every linear"),
    ({"tp": 2}, "not modelled"),
])
def test_refused_where_not_modelled(kw: dict[str, object], match: str) -> None:
    with pytest.raises(FieldError, match=match):
        _lora_7b(fsdp_adapter_units=True, **kw)


def _step(*args: str) -> dict[str, Any]:
    result = runner.invoke(app, ["estimate", "--model", "llama-2-7b", "--gpu", "rtx-3090",
                                 "--gpus", "2", "--zero", "3", "--method", "lora", "--lora-rank",
                                 "64", "--seq", "2048", "--checkpointing", "--json", *args])
    assert result.exit_code == 0, result.output
    return dict(json.loads(result.stdout)["step_time_breakdown_s"])


def test_cli_flag_exposes_more_of_the_gathers() -> None:
    plain = _step()["communication_exposed_s"]["value"]
    units = _step("--fsdp-adapter-units")
    # the same gathers (and the adapters' own collectives besides), less of them hidden
    assert units["communication_exposed_s"]["value"] > plain + 0.5


def test_cli_bad_combination_exits_2() -> None:
    result = runner.invoke(app, ["estimate", "--model", "llama-2-7b", "--gpu", "rtx-3090",
                                 "--gpus", "2", "--zero", "2", "--method", "lora",
                                 "--fsdp-adapter-units"])
    assert result.exit_code == 2, result.output
    assert "--fsdp-adapter-units" in result.output and "Traceback" not in result.output


def _plan(tmp_path: Path, value: str, zero: int = 3) -> str:
    path = tmp_path / "plan.yaml"
    path.write_text(
        "project: t\nhardware: {gpu: rtx-3090, gpus_per_node: 2, nodes: 1}\nseeds: 1\n"
        f"defaults: {{model: llama-2-7b, method: lora, precision: bf16, checkpointing: true, "
        f"zero_stage: {zero}, fsdp_adapter_units: {value}}}\n"
        "phases:\n  - {name: sft, kind: finetune, examples: 1000, seq_len: 2048, "
        "micro_batch: 1, grad_accum: 1}\n")
    return str(path)


def test_plan_file(tmp_path: Path) -> None:
    assert runner.invoke(app, ["plan", _plan(tmp_path, "true"), "--no-doc"]).exit_code == 0
    bad = runner.invoke(app, ["plan", _plan(tmp_path, "true", zero=2), "--no-doc"])
    assert bad.exit_code == 2
    assert "field 'fsdp_adapter_units', field 'zero_stage'" in bad.output
    typo = runner.invoke(app, ["plan", _plan(tmp_path, "sometimes"), "--no-doc"])
    assert typo.exit_code == 2 and "defaults.fsdp_adapter_units" in typo.output
