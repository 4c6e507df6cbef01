"""The parts of `gpuhours bench` that need no real device: statistics and the stop rule, sweep
parsing and summaries, the FLOP formulas, the CUDA backend driven by stand-in `torch.cuda` and
`pynvml` objects (arithmetic, not measurement), and the data-loader probe on a plain iterable."""

from __future__ import annotations

import types
from typing import Any

import numpy as np
import pytest

from gpuhours.bench import device as D
from gpuhours.bench.config import BenchSetup, StopRule
from gpuhours.bench.data import load_function, measure_loader, samples_in, verdict
from gpuhours.bench.session import Outcome
from gpuhours.bench.stats import coefficient_of_variation, percentile, stop_reason, summarize
from gpuhours.bench.sweep import expand, parse_sweeps
from gpuhours.bench.sweep import summarize as summarize_sweep
from gpuhours.errors import FieldError, InputError
from gpuhours.torchkit.formulas import sdpa_backward_flops, sdpa_forward_flops

# --- statistics -----------------------------------------------------------------------------------


@pytest.mark.parametrize("q", [0, 10, 50, 90, 100])
def test_percentile_matches_numpy_linear(q: float) -> None:
    xs = [0.31, 0.29, 0.9, 0.3, 0.33, 0.28, 0.41]
    assert percentile(xs, q) == pytest.approx(float(np.percentile(xs, q)))


def test_cv_and_summary() -> None:
    xs = [1.0, 1.1, 0.9, 1.0]
    assert coefficient_of_variation(xs) == pytest.approx(np.std(xs, ddof=1) / np.mean(xs))
    s = summarize(xs, StopRule(), "step cap")
    assert s.median_s == 1.0 and s.n_steps == 4 and not s.stable  # CV 8% > 2%
    assert s.spread_fraction == pytest.approx((percentile(xs, 90) - percentile(xs, 10)) / 1.0)


def test_stop_rule() -> None:
    rule = StopRule(min_steps=3, max_steps=5, max_time_s=10)
    assert stop_reason([1.0, 1.0], 0.0, rule) is None               # too few for stability
    assert stop_reason([1.0, 1.0, 1.001], 0.0, rule).startswith("stable")
    assert stop_reason([1.0, 2.0, 1.0], 0.0, rule) is None
    assert stop_reason([1.0, 2.0, 1.0], 11.0, rule).startswith("time cap")
    assert stop_reason([1.0, 2.0, 1.0, 2.0, 1.0], 0.0, rule).startswith("step cap")
    with pytest.raises(FieldError, match="at least 9 timed steps exceeds at most 5"):
        StopRule(min_steps=9, max_steps=5)


# --- setups and sweeps ----------------------------------------------------------------------------


def test_sweep_expansion() -> None:
    base = BenchSetup(model="qwen2-0.5b")
    sweeps = parse_sweeps(["batch=1,2,4", "checkpointing=on,off", "precision=fp32,bf16-amp"])
    setups = expand(base, sweeps)
    assert len(setups) == 12
    assert {(s.training.micro_batch, s.training.checkpointing, s.training.precision)
            for s in setups} == {
        (b, c, p) for b in (1, 2, 4) for c in (True, False) for p in ("fp32", "bf16-amp")}
    assert expand(base, []) == [base]


@pytest.mark.parametrize("spec, message", [
    ("batch", "expected KEY=V1,V2"),
    ("colour=red", "unknown sweep key 'colour'"),
    ("batch=1,x", "expected whole numbers"),
    ("checkpointing=maybe", "expected on or off"),
    ("batch=1,1", "a value is repeated"),
])
def test_bad_sweeps(spec: str, message: str) -> None:
    with pytest.raises(InputError, match=message):
        parse_sweeps([spec])


def test_sweep_values_are_validated() -> None:
    with pytest.raises(FieldError, match="greater than or equal to 1") as caught:
        expand(BenchSetup(model="qwen2-0.5b"), parse_sweeps(["batch=0,1"]))
    assert caught.value.fields == ("micro_batch",)
    with pytest.raises(InputError, match="swept twice"):
        parse_sweeps(["batch=1", "micro-batch=2"])


def _outcome(batch: int, tokens_per_s: float | None, spread: float = 0.05,
             status: str = "ok") -> Outcome:
    result = None
    if tokens_per_s is not None:
        result = types.SimpleNamespace(
            tokens_per_s=tokens_per_s, allocator=None,
            tokens_per_s_range=(tokens_per_s * (1 - spread), tokens_per_s * (1 + spread)))
    return Outcome(setup=BenchSetup(model="qwen2-0.5b", micro_batch=batch), status=status,
                   result=result)  # type: ignore[arg-type]


def test_sweep_summary_names_the_fastest_and_a_real_small_batch_win() -> None:
    outcomes = [_outcome(1, 900.0), _outcome(2, 1500.0), _outcome(4, 1000.0),
                _outcome(8, None, status="does-not-fit")]
    s = summarize_sweep(outcomes)
    assert s.fastest is outcomes[1]
    assert any(n.startswith("does not fit: qwen2-0.5b full bf16-mixed b8") for n in s.notes)
    (note,) = [n for n in s.notes if "micro-batch 2 ran" in n]
    assert "50.0% more than micro-batch 4" in note and "beyond the measured spread" in note
    assert "not the work per token" in note


def test_sweep_summary_calls_a_small_difference_noise() -> None:
    s = summarize_sweep([_outcome(1, 1010.0, spread=0.3), _outcome(2, 1000.0, spread=0.3)])
    (note,) = s.notes
    assert "within the measured p10-p90 spread" in note


def test_sweep_summary_when_nothing_fits() -> None:
    s = summarize_sweep([_outcome(8, None, status="does-not-fit")])
    assert s.fastest is None and "does not fit" in s.notes[0]


def test_setup_checks_and_label() -> None:
    with pytest.raises(FieldError, match="fused is an AdamW implementation"):
        BenchSetup(model="qwen2-0.5b", optimizer="sgd", optimizer_impl="fused")
    s = BenchSetup(model="qwen2-0.5b", method="lora", precision="fp32", micro_batch=4,
                   seq_len=128, grad_accum=2, checkpointing=True)
    assert s.label() == "qwen2-0.5b lora fp32 b4 s128 ga2 ckpt r16"
    assert s.tokens_per_step == 4 * 128 * 2


# --- FLOP formulas --------------------------------------------------------------------------------


def test_attention_flop_formulas_by_hand() -> None:
    b, h, s, d = 2, 4, 128, 16
    q = (b, h, s, d)
    assert sdpa_forward_flops(q, q, q) == 4 * b * h * s * s * d
    assert sdpa_backward_flops(q, q, q) == 10 * b * h * s * s * d  # 2.5 x forward
    # grouped-query attention: keys and values have fewer heads; the kernel works per query head
    kv = (b, 2, s, d)
    assert sdpa_forward_flops(q, kv, kv) == 4 * b * h * s * s * d
    # cross-attention lengths: S_q x S_k
    assert sdpa_forward_flops((1, 1, 3, 8), (1, 1, 5, 8), (1, 1, 5, 8)) == 4 * 3 * 5 * 8


# --- the CUDA backend with stand-ins --------------------------------------------------------------


class FakeEvent:
    """A CUDA event whose timestamp is set by the fake stream's clock, in ms."""

    clock_ms = 0.0

    def __init__(self, enable_timing: bool = False) -> None:
        assert enable_timing
        self.t: float | None = None
        self.synced = False

    def record(self) -> None:
        self.t = FakeEvent.clock_ms

    def synchronize(self) -> None:
        self.synced = True

    def elapsed_time(self, other: FakeEvent) -> float:
        assert self.t is not None and other.t is not None
        return other.t - self.t


class FakeCuda:
    Event = FakeEvent

    def __init__(self, name: str = "NVIDIA H100 80GB HBM3") -> None:
        self.name = name
        self.reset = 0

    def get_device_name(self, index: int) -> str:
        return self.name

    def get_device_properties(self, index: int) -> Any:
        return types.SimpleNamespace(total_memory=85_520_809_984, major=9, minor=0,
                                     multi_processor_count=132, pci_bus_id=0x1a,
                                     pci_domain_id=0, pci_device_id=0)

    def synchronize(self, index: int) -> None:
        pass

    def reset_peak_memory_stats(self, index: int) -> None:
        self.reset += 1

    def max_memory_allocated(self, index: int) -> int:
        return 60 * 2**30

    def max_memory_reserved(self, index: int) -> int:
        return 64 * 2**30

    def memory_stats(self, index: int) -> dict[str, int]:
        return {"num_alloc_retries": 3}


class FakeNvml:
    NVML_CLOCK_SM = 1

    def __init__(self, fail_init: bool = False) -> None:
        self.fail_init = fail_init
        self.bus_ids: list[str] = []
        self.shut = False

    def nvmlInit(self) -> None:
        if self.fail_init:
            raise RuntimeError("NVML Shared Library Not Found")

    def nvmlShutdown(self) -> None:
        self.shut = True

    def nvmlDeviceGetHandleByPciBusId(self, bus: str) -> str:
        self.bus_ids.append(bus)
        return "handle"

    def nvmlDeviceGetName(self, handle: str) -> bytes:
        return b"NVIDIA H100 80GB HBM3"

    def nvmlSystemGetDriverVersion(self) -> str:
        return "550.54.15"

    def nvmlDeviceGetMemoryInfo(self, handle: str) -> Any:
        return types.SimpleNamespace(total=85_899_345_920)

    def nvmlDeviceGetPowerManagementLimit(self, handle: str) -> int:
        return 700_000

    def nvmlDeviceGetMaxClockInfo(self, handle: str, clock: int) -> int:
        raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")


def test_cuda_event_timer_splits_the_step_by_event_timestamps() -> None:
    cuda = FakeCuda()
    FakeEvent.clock_ms = 100.0
    timer = D.CudaEventTimer(cuda)
    for phase, at in (("data_s", 101.0), ("forward_s", 111.0), ("backward_s", 131.0),
                      ("data_s", 132.0), ("forward_s", 142.0), ("backward_s", 162.0),
                      ("optimizer_s", 165.0)):
        FakeEvent.clock_ms = at
        timer.mark(phase)
    step_s, phases = timer.finish()
    assert step_s == pytest.approx(0.065)
    assert phases == pytest.approx({"data_s": 0.002, "forward_s": 0.020, "backward_s": 0.040,
                                    "optimizer_s": 0.003})
    assert sum(phases.values()) == pytest.approx(step_s)
    assert timer._events[-1][1].synced  # one synchronisation, on the last event


def test_cuda_backend_names_allocator_and_nvml() -> None:
    nvml = FakeNvml()
    b = D.cuda_backend(FakeCuda(), 0, nvml)
    assert b.kind == "cuda" and b.torch_device == "cuda:0"
    assert b.catalog_gpu == "h100-sxm" and b.key == "h100-sxm"  # exact alias of the catalog row
    assert nvml.bus_ids == ["00000000:1a:00.0"] and nvml.shut
    assert b.facts["driver_version"] == "550.54.15"
    assert b.facts["power_limit_w"] == 700.0 and b.facts["sm_clock_max_mhz"] is None
    assert b.facts["compute_capability"] == "9.0"
    peak = b.allocator_peak()
    assert (peak.allocated_bytes, peak.reserved_bytes, peak.alloc_retries) == (
        60 * 2**30, 64 * 2**30, 3)
    b.reset_peak_memory()
    assert b.cuda.reset == 1


def test_cuda_backend_without_nvml_or_catalog_row() -> None:
    b = D.cuda_backend(FakeCuda("NVIDIA H100 80GB HBM3 Engineering Sample"), 0, None)
    # no substring matching: a name that only contains a catalog alias is not that GPU
    assert b.catalog_gpu is None and b.key == "cuda-nvidia-h100-80gb-hbm3-engineering-sample"
    assert "pynvml not installed" in b.facts["nvml"]
    failing = D.cuda_backend(FakeCuda(), 0, FakeNvml(fail_init=True))
    assert "nvmlInit failed" in failing.facts["nvml"]
    assert failing.catalog_gpu == "h100-sxm"  # still matched by torch's device name


def test_wall_timer_phases() -> None:
    calls: list[int] = []
    t = D.WallTimer(lambda: calls.append(1))
    t.mark("data_s")
    t.mark("forward_s")
    step_s, phases = t.finish()
    assert set(phases) == {"data_s", "forward_s"} and step_s == pytest.approx(sum(phases.values()))
    assert len(calls) == 3  # synchronised at the start and at each mark


def test_slug_and_cpu_name() -> None:
    assert D.slug("AMD EPYC 9B14 96-Core Processor") == "amd-epyc-9b14-96-core-processor"
    assert D.cpu_model_name()


def test_asking_for_cuda_without_one_is_an_input_error() -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(InputError, match="no CUDA device is available"):
        D.detect("cuda")
    with pytest.raises(InputError, match="expected auto, cuda, mps or cpu"):
        D.detect("tpu")


# --- data loader ----------------------------------------------------------------------------------


def _loader(num_workers: int) -> Any:
    return ([i, i + 1, i + 2, i + 3] for i in range(200))  # 200 batches of 4 samples


def test_measure_loader_on_a_plain_iterable() -> None:
    r = measure_loader(_loader, 0, seconds=0.2)
    assert r.batches >= 1 and r.samples == 4 * r.batches
    assert r.samples_per_s == pytest.approx(r.samples / r.seconds)
    with pytest.raises(InputError, match="fewer than 3 batches"):
        measure_loader(lambda n: iter([np.zeros((2, 3))]), 0, seconds=0.1)
    with pytest.raises(InputError, match="must accept num_workers"):
        measure_loader(lambda: iter([]), 0)  # type: ignore[call-arg,arg-type,misc]


def test_samples_in_batches() -> None:
    assert samples_in(np.zeros((8, 3))) == 8
    assert samples_in({"input_ids": np.zeros((5, 3)), "labels": np.zeros((5, 3))}) == 5
    assert samples_in((np.zeros((6, 2)), np.zeros(6))) == 6
    assert samples_in([1, 2, 3]) == 3
    with pytest.raises(InputError, match="cannot tell how many samples"):
        samples_in(object())


def test_load_function_errors() -> None:
    with pytest.raises(InputError, match="expected module:function"):
        load_function("no_colon")
    with pytest.raises(InputError, match="cannot import 'no_such_module_xyz'"):
        load_function("no_such_module_xyz:f")
    with pytest.raises(InputError, match="has no function 'nope'"):
        load_function("json:nope")
    assert load_function("json:dumps")([1]) == "[1]"


def test_verdict() -> None:
    rates = [measure_loader(_loader, 0, seconds=0.05)]
    fast = rates[0].samples_per_s
    lines = verdict(rates, fast * 2, "measured: test")
    assert "input-bound" in lines[1]
    lines = verdict(rates, fast / 10, "measured: test")
    assert "keeps up" in lines[1] and "num_workers=0" in lines[2]
    assert "no consumption rate" in verdict(rates, None, "")[0]
