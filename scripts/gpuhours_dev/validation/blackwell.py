"""Training throughput on Blackwell (docs/validation.md): every Blackwell pre-training row of
Megatron-Bridge's performance summaries, NeMo's long-sequence table and torchao/torchtitan's
MXFP8 tables (data/throughput_blackwell.csv), expressed as the H100
rows are (hopper.py `stated_layout_row`: the stated TP/PP/CP/VP/EP, FSDP or the distributed
optimizer, micro-batches from the global batch, Megatron-Core's kernel path, the row's matmul
precision) on the system the row names, or listed with the reason it is not.

All rows are held out: no constant of assumptions.py was set from them. The Blackwell GEMM
efficiencies (gemm_efficiency.blackwell, fp8_gemm_efficiency.blackwell) are assumptions made
before these rows were read.
"""

from __future__ import annotations

from collections.abc import Callable

from gpuhours import catalog
from gpuhours.setup import Hardware
from gpuhours_dev.validation.hopper import (
    H100_MODELS,
    HopperRow,
    matmul_precision,
    stated_layout_row,
)

#: GPUs of a GB200 (and GB300) compute tray, Megatron-Bridge's launcher (scripts/performance/
#: argument_parser.py NUM_GPUS_PER_NODE_MAP "gb200": 4, "gb300": 4, NVIDIA-NeMo/Megatron-Bridge@067f987d)
GB200_GPUS_PER_TRAY = 4
#: the most trays of one GB200 NVL72 rack (one NVLink 5 domain: 18 trays x 4 = 72 GPUs)
GB200_TRAYS_PER_RACK = 18


def gb200_nvlink_domain_gpus(num_gpus: int) -> int:
    """GPUs of one NVLink domain in a Megatron-Bridge GB200 job of num_gpus GPUs: its launcher
    asks Slurm for a --segment of trays that share a rack (scripts/performance/utils/executors.py
    @067f987d: all the job's trays when they are 18 or fewer, else the largest divisor of the
    tray count up to 18), so a job of 64 trays (256 GPUs) runs in segments of 16 trays: 64 GPUs
    per NVLink domain, the rest over the network between racks."""
    trays = -(-num_gpus // GB200_GPUS_PER_TRAY)
    if trays <= GB200_TRAYS_PER_RACK:
        return trays * GB200_GPUS_PER_TRAY
    segment = next(s for s in range(GB200_TRAYS_PER_RACK, 0, -1) if trays % s == 0)
    return segment * GB200_GPUS_PER_TRAY


#: the `gpu` column's systems: (catalog GPU, catalog node whose network the GPUs have between
#: NVLink domains, what the system is). DGX-B200 / DGX-B300: 8 GPUs on NVSwitch (NVLink 5),
#: 400 / 800 Gb/s per GPU between nodes (catalog nodes dgx-b200, dgx-b300). DGX-GB200 and
#: DGX-GB300: NVL72 racks, NVLink domains as `gb200_nvlink_domain_gpus` (Megatron-Bridge's
#: launcher segments every 4-GPU-a-node job alike: executors.py @067f987d, `num_gpus_per_node
#: == 4`; argument_parser.py gives "gb300": 4, "b300": 8); between racks InfiniBand (DGX
#: GB200 user guide, "Networking"), its rate per GPU not read for GB200: the DGX B200's 400 Gb/s
#: assumed. GB300 NVL72 carries 72 ConnectX-8 (800 Gb/s) NICs, one per GPU (NVIDIA's GB300
#: NVL72 page as transcribed in the catalog's gb300 source): the DGX B300's rate.
BLACKWELL_SYSTEMS: dict[str, tuple[str, str, str]] = {
    "B200": ("b200", "dgx-b200", "DGX-B200: 8 GPUs a node, 400 Gb/s per GPU between nodes"),
    "GB200": ("gb200", "dgx-b200",
              "DGX-GB200 (NVL72): {domain} GPUs a NVLink domain (Slurm segment), "
              "400 Gb/s per GPU between them (assumed: the DGX B200's)"),
    "B300": ("b300", "dgx-b300", "DGX-B300: 8 GPUs a node, 800 Gb/s per GPU between nodes"),
    "GB300": ("gb300", "dgx-b300",
              "DGX-GB300 (NVL72): {domain} GPUs a NVLink domain (Slurm segment), "
              "800 Gb/s per GPU between them (one ConnectX-8 a GPU)"),
}

#: Megatron-Bridge's Blackwell tables' names for catalog models beyond hopper.H100_MODELS
BLACKWELL_MODELS = {**H100_MODELS, "DeepSeekV3": "deepseek-v3",
                    "DeepSeekV3 (w/o MTP)": "deepseek-v3"}


def _skip(r: dict[str, str]) -> str | None:
    if "power limited" in r["gpu"]:
        return ("a power-limited B200, its cap not stated (the catalog's B200 is the 1,000 W "
                "part; a lower cap lowers the clocks by an amount the source does not give)")
    if r["gpu"] not in BLACKWELL_SYSTEMS:
        return f"DGX-{r['gpu']} is not in the GPU catalog"
    if not r["tokens_per_sec_per_gpu"]:
        return "tokens/s per GPU not stated (TFLOP/s per GPU only, in the source's FLOP count)"
    if "nvfp4" in r["precision"].lower():
        return ("NVFP4 (4-bit block-scaled) matmuls: the estimator's precisions stop at fp8 "
                "(setup.Precision) and the catalog has no fp4 peak")
    if matmul_precision(r) is None:
        return "matmul precision not stated"
    if not r["micro_batch"] or not r["seq_len"]:
        return "layout, batch or sequence length not stated"
    if "tokendrop" in r["model"]:
        return "MoE token dropping (capacity factor): not modelled"
    if "w/ MTP" in r["model"]:
        return ("DeepSeek-V3's multi-token prediction module (one more layer and its head): "
                "not in the catalog model")
    if r["model"] not in BLACKWELL_MODELS:
        return "model not in the catalog"
    return None


def _hardware(r: dict[str, str]) -> tuple[Callable[[int], Hardware], str]:
    """The system of a row's n GPUs, and how the setup column says it."""
    name, node_name, what = BLACKWELL_SYSTEMS[r["gpu"]]
    gpu = catalog.gpu(name)
    node = catalog.node(node_name)
    net = node.inter_node_gb_per_s_one_way
    n = int(r["n_gpus"])
    per_domain = (gb200_nvlink_domain_gpus(n) if name in ("gb200", "gb300")
                  else node.gpus_per_node)

    def hardware(num_gpus: int) -> Hardware:
        return Hardware(gpu=gpu, num_gpus=num_gpus, gpus_per_node=per_domain,
                        inter_node_gb_per_s_one_way=net)

    return hardware, what.format(domain=per_domain)


def blackwell_rows(rows: list[dict[str, str]]) -> list[HopperRow]:
    """Each Blackwell row as a setup of the estimator with the layout its source states, or why
    not. The catalog model of DeepSeekV3 has no multi-token prediction module: the rows that say
    "w/o MTP" and the later ones that say nothing are expressed, the one "w/ MTP" row is not.
    MXFP8 (32-element block scales, Blackwell's native fp8 GEMMs) and FP8 with per-tensor
    scales are both fp8-mixed: costed at the fp8 rate, the scaling's own work not modelled."""
    out = []
    for r in rows:
        label = f"{r['model']} {r['precision'] or '?'} seq {r['seq_len']} x{r['n_gpus']} {r['gpu']}"
        skipped = _skip(r)
        if skipped is not None:
            measured = float(r["tokens_per_sec_per_gpu"]) if r["tokens_per_sec_per_gpu"] else None
            out.append(HopperRow(label, r["source"], measured, None, None, "", skipped))
            continue
        hardware, system = _hardware(r)
        row = stated_layout_row(r, label, None, hardware, BLACKWELL_MODELS)
        if row.skipped is None:
            scaling = ("MXFP8 block scales" if "MX" in r["precision"]
                       else "per-tensor fp8 scales" if "FP8" in r["precision"] else "")
            row = HopperRow(row.label, row.source, row.measured, row.training, row.hardware,
                            f"{row.setup}{f' ({scaling})' if scaling else ''}; {system}", None,
                            row.config_key + (r["gpu"],))
        out.append(row)
    return out
