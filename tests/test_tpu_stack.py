"""TPUs are modelled as XLA runs them, not as CUDA GPUs running eager PyTorch (a reviewer's
finding): no per-operator host time, no CUDA context, no caching-allocator reserve, and fit
offers no TPU as "a larger GPU" for a CUDA run."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from gpuhours import catalog
from gpuhours.cli import app
from gpuhours.estimate import assumptions as A
from gpuhours.estimate.memory import training_memory
from gpuhours.estimate.timing import eager_host_dispatch
from gpuhours.setup import Training

runner = CliRunner()
ENV = {"COLUMNS": "200", "NO_COLOR": "1"}
ARGS = ["--model", "qwen2.5-1.5b", "--method", "lora", "--batch", "1", "--seq", "1024",
        "--checkpointing", "--tokens", "1e8", "--no-calibrate"]


def _estimate(gpu: str) -> dict:
    r = runner.invoke(app, ["estimate", "--gpu", gpu, *ARGS, "--json"], env=ENV)
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


@pytest.mark.parametrize("name, stack", [("tpu-v5e", "xla"), ("tpu-v4", "xla"),
                                         ("h100", "torch-cuda"), ("mi300x", "torch-cuda")])
def test_stack_of_catalog_devices(name: str, stack: str):
    gpu = catalog.gpu(name)
    assert gpu.stack == stack
    assert eager_host_dispatch(gpu) is (stack == "torch-cuda")


def test_tpu_step_has_no_host_time_and_is_the_device_work():
    e = _estimate("tpu-v5e")
    st = e["step_time_breakdown_s"]
    assert st["host_exposed_s"]["value"] == 0.0 and st["host_s"]["value"] == 0.0
    assert "XLA" in st["host_s"]["source"]
    # the step is the device's parts only: matmuls + attention + memory-bound + optimizer
    parts = sum(st[k]["value"] for k in ("matmul_s", "attention_s", "memory_bound_s",
                                         "optimizer_s"))
    assert e["step_time_s"]["value"] == pytest.approx(parts, rel=1e-9)
    assert "host" not in e["bottleneck"]
    # the same setup on an eager CUDA device of the same figures keeps its host term
    gpu = _estimate("l4")["step_time_breakdown_s"]
    assert gpu["host_s"]["value"] > 0


def test_tpu_memory_has_no_cuda_context_or_allocator_reserve():
    t = Training(model="qwen2.5-1.5b", method="lora", micro_batch=1, seq_len=1024,
                 checkpointing=True)
    gpu = training_memory(t.arch, t, 1, 0.0, "torch-cuda")
    tpu = training_memory(t.arch, t, 1, 0.0, "xla")
    assert tpu.tensors_bytes == gpu.tensors_bytes
    # the GPU's total adds 5% of the live tensors and a 0.5 GiB context; the TPU's adds none
    assert gpu.total_bytes == pytest.approx(gpu.tensors_bytes * 1.05 + 2**29)
    assert tpu.total_bytes == tpu.tensors_bytes
    assert A.CUDA_CONTEXT_BYTES.value == 2**29 and A.ALLOCATOR_RESERVE_FRACTION.value == 0.05


def test_tpu_terminal_names_xla_tools_not_torch_cuda():
    r = runner.invoke(app, ["estimate", "--gpu", "tpu-v5e", *ARGS], env=ENV)
    assert r.exit_code == 0, r.output
    out = " ".join(r.output.split())
    assert "CUDA context " not in out.split("Step time")[0]
    assert "torch.cuda.max_memory_allocated" not in out
    assert "host issuing" not in out and "memory_stats()['peak_bytes_in_use']" in out
    assert "cuda_context_bytes =" not in out and "host_s_per_op =" not in out


def test_fit_offers_no_tpu_as_a_larger_gpu_for_a_cuda_run():
    r = runner.invoke(app, ["fit", "--model", "gemma-2-9b", "--gpu", "l4", "--method", "lora",
                            "--seq", "2048", "--json"], env=ENV)
    assert "tpu" not in r.output and "a larger GPU" in r.output


@pytest.mark.parametrize("command", ["estimate", "fit"])
def test_qlora_on_a_tpu_is_refused_as_fit_remedies_already_treat_it(command: str):
    # the 4-bit bases modelled (bitsandbytes NF4, GPTQ/AWQ, torchao NF4) have CUDA kernels
    # (bitsandbytes also ROCm): fit never offers QLoRA on a TPU (remedies.QLORA_VENDORS), so
    # asking for it directly is bad input, not a memory figure of a kernel that does not exist
    r = runner.invoke(app, [command, "--gpu", "tpu-v4", "--model", "qwen2.5-1.5b", "--method",
                            "qlora", "--seq", "1024", "--checkpointing"], env=ENV)
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output
    assert "--method" in r.output and "tpu-v4" in r.output and "4-bit" in r.output
    ok = runner.invoke(app, [command, "--gpu", "mi300x", "--model", "qwen2.5-1.5b", "--method",
                             "qlora", "--seq", "1024", "--checkpointing"], env=ENV)
    assert ok.exit_code == 0, ok.output
