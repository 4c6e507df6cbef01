"""FSDP's no_sync gradients (estimate/fsdp_no_sync.py, issue 14): a hand count for Llama-2-7B,
the setup choice from the CLI and a plan file (bad combinations exit 2), and the mechanism on a
real FSDP run on CPU (torch's fake process group, world size 2): under no_sync each unit's
flat gradient is the whole unit, frozen weights included; synchronised, this rank's half."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuhours.cli import app
from gpuhours.errors import FieldError
from gpuhours.estimate.fsdp_no_sync import no_sync_unsharded_grad_bytes
from gpuhours.estimate.memory import training_memory
from gpuhours.estimate.params import count_params
from gpuhours.resolve import resolve_model
from gpuhours.setup import Training

runner = CliRunner()


def _lora_7b(**kw: object) -> Training:
    arch, _ = resolve_model("llama-2-7b")
    return Training.model_validate({**dict(
        arch=arch, method="lora", precision="bf16", lora_rank=8, lora_targets="qv",
        lora_adapter_dtype="half", micro_batch=1, seq_len=1304, grad_accum=128,
        checkpointing=True, zero_stage=3), **kw})


def test_lora_7b_by_hand() -> None:
    # Llama-2-7B layer: attention 4 x 4096^2 = 67,108,864; MLP 3 x 4096 x 11008 = 135,266,304;
    # two RMSNorms 8,192: 202,383,360 per layer, x 32 = 6,476,267,520; the q and v adapters of
    # rank 8: 32 x 2 x 8 x (4096 + 4096) = 4,194,304 (the resource table's trainable count);
    # the root (embeddings, head, final norm) trains nothing: no gradient. bf16: 2 bytes each
    t = _lora_7b(fsdp_grad_accum="no-sync")
    expected = (32 * 202_383_360 + 4_194_304) * 2
    assert no_sync_unsharded_grad_bytes(count_params(t.arch), t, 2, 4_194_304) == expected
    # in the peak, in place of the adapters' sharded gradients (4,194,304 x 2 bytes / 2 GPUs)
    plain = training_memory(t.arch, _lora_7b(), 2)
    held = training_memory(t.arch, t, 2)
    assert held.tensors_bytes - plain.tensors_bytes == pytest.approx(expected - 4_194_304)
    assert any("fsdp_no_sync_grads_bytes = 12.07 GiB" in s for s in held.setup_terms)


def test_full_and_when_it_does_not_apply() -> None:
    t = _lora_7b(fsdp_grad_accum="no-sync")
    full = t.model_copy(update={"method": "full", "lora_adapter_dtype": "fp32"})
    counts = count_params(t.arch)
    assert no_sync_unsharded_grad_bytes(counts, full, 4, counts.total) == counts.total * 2
    # one micro-batch a step never enters no_sync; one GPU has nothing to shard
    assert no_sync_unsharded_grad_bytes(counts, t.model_copy(update={"grad_accum": 1}), 2,
                                        4_194_304) == 0
    assert no_sync_unsharded_grad_bytes(counts, t, 1, 4_194_304) == 0


@pytest.mark.parametrize(("kw", "fields"), [
    ({"zero_stage": 2}, "zero_stage"),
    ({"zero3_engine": "deepspeed"}, "zero_stage"),
    ({"method": "qlora", "lora_adapter_dtype": "fp32"}, "method"),
])
def test_refused_where_not_modelled(kw: dict[str, object], fields: str) -> None:
    with pytest.raises(FieldError, match="no-sync"):
        _lora_7b(fsdp_grad_accum="no-sync", **kw)


def _memory(*args: str) -> dict:
    result = runner.invoke(app, ["estimate", "--model", "llama-2-7b", "--gpu", "a100-40gb",
                                 "--gpus", "2", "--zero", "3", "--method", "lora", "--seq",
                                 "1304", "--grad-accum", "4", "--checkpointing", "--json",
                                 *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)["memory"]


def test_cli_default_unchanged_and_no_sync_adds() -> None:
    plain = _memory()["total_bytes"]["value"]
    assert _memory("--fsdp-grad-accum", "reduce-scatter")["total_bytes"]["value"] == plain
    held = _memory("--fsdp-grad-accum", "no-sync")
    assert held["total_bytes"]["value"] - plain > 12 * 2**30
    # named at the peak with its own basis, not as the sharded gradients
    part = held["at_peak_bytes"]["no_sync_gradients_bytes"]
    assert part["value"] > 12 * 2**30 and "fsdp_no_sync.py" in part["source"]


@pytest.mark.parametrize(("args", "message"), [
    (["--fsdp-grad-accum", "sometimes"], "--fsdp-grad-accum"),
    (["--fsdp-grad-accum", "no-sync", "--zero", "2"], "--fsdp-grad-accum/--zero"),
])
def test_cli_bad_values_exit_2(args: list[str], message: str) -> None:
    result = runner.invoke(app, ["estimate", "--model", "llama-2-7b", "--gpu", "a100-80gb",
                                 "--gpus", "2", "--method", "lora", *args])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output


def _plan(tmp_path: Path, value: str, zero: int = 3) -> str:
    path = tmp_path / "plan.yaml"
    path.write_text(
        "project: t\nhardware: {gpu: a100-80gb, gpus_per_node: 8, nodes: 1}\nseeds: 1\n"
        f"defaults: {{model: llama-2-70b, method: lora, precision: bf16, checkpointing: true, "
        f"zero_stage: {zero}, fsdp_grad_accum: {value}}}\n"
        "phases:\n  - {name: sft, kind: finetune, examples: 1000, seq_len: 2048, "
        "micro_batch: 1, grad_accum: 4}\n")
    return str(path)


def test_plan_file(tmp_path: Path) -> None:
    # Llama-2-70B LoRA on 8 x 80 GB: sharded it fits; under no_sync every layer's gradient
    # (about 64.5B x 2 bytes, 120 GiB) is held on each GPU, and the phase is refused
    assert runner.invoke(app, ["plan", _plan(tmp_path, "reduce-scatter"), "--no-doc"]
                         ).exit_code == 0
    result = runner.invoke(app, ["plan", _plan(tmp_path, "no-sync"), "--no-doc"])
    assert result.exit_code != 0 and "needs" in result.output and "80.0 GiB" in result.output
    bad = runner.invoke(app, ["plan", _plan(tmp_path, "no-sync", zero=2), "--no-doc"])
    assert bad.exit_code == 2
    assert "field 'fsdp_grad_accum', field 'zero_stage'" in bad.output
    typo = runner.invoke(app, ["plan", _plan(tmp_path, "sometimes"), "--no-doc"])
    assert typo.exit_code == 2 and "defaults.fsdp_grad_accum" in typo.output


def test_real_fsdp_no_sync_keeps_whole_units() -> None:
    # PyTorch's own FSDP (FullyShardedDataParallel, use_orig_params=True as Lightning sets it)
    # on CPU in this process, over torch's fake process group of world size 2 (rank 0): the
    # collectives are no-ops, so the values are not checked, but the sharding and the
    # gradients FSDP allocates are its own
    torch = pytest.importorskip("torch")
    import torch.distributed as dist
    from torch import nn
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy
    from torch.testing._internal.distributed.fake_pg import FakeStore

    class Block(nn.Module):
        """A frozen 32 x 32 base and a rank-2 adapter beside it, in one FSDP unit."""

        def __init__(self) -> None:
            super().__init__()
            self.base = nn.Linear(32, 32, bias=False)
            self.a = nn.Linear(32, 2, bias=False)
            self.b = nn.Linear(2, 32, bias=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + self.base(x) + self.b(self.a(x))

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
    try:
        torch.manual_seed(0)
        model = nn.Sequential(Block(), Block())
        for name, p in model.named_parameters():
            p.requires_grad = not name.endswith("base.weight")
        # torch warns of it itself (fsdp/_wrap_utils.py _validate_frozen_params)
        with pytest.warns(UserWarning, match="gradient memory usage will be higher"):
            fsdp = FSDP(model, auto_wrap_policy=ModuleWrapPolicy({Block}),
                        use_orig_params=True, device_id=torch.device("cpu"))
        units = [u for u in fsdp.modules() if isinstance(u, FSDP) and u._handle is not None]
        x = torch.randn(4, 32)

        def grads() -> list[int]:
            return [u._handle.flat_param.grad.numel() for u in units
                    if u._handle.flat_param.grad is not None]

        with fsdp.no_sync():
            fsdp(x).sum().backward()
        held = grads()
        fsdp(x).sum().backward()
        synced = grads()
    finally:
        dist.destroy_process_group()
    # each Block unit: 32 x 32 frozen + 2 x 32 x 2 adapter = 1,152 elements, the root none;
    # under no_sync the whole unit's gradient (frozen base included) on every rank, after a
    # synchronised backward this rank's shard of it: 1,152 / 2
    assert held == [1152, 1152]
    assert synced == [576, 576]
