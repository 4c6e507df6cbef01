"""Rich tables for estimates, fits and generation. Every number sits beside its basis: in the
table when it fits the console (or with `wide`), else as a numbered footnote under it
(report/tables.py). Model, GPU and file names, bases and warnings may hold user text: each goes
through `esc`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.console import Console

from gpuhours.estimate.estimator import Totals, TrainingEstimate
from gpuhours.estimate.figures import Figure
from gpuhours.report.tables import Col, Notes, print_list, print_table
from gpuhours.report.text import esc, print_price_flags
from gpuhours.report.units import gib, hours, instance_billed, pct, seconds, si, usd

if TYPE_CHECKING:  # fit's module is loaded only by the commands that fit
    from gpuhours.estimate.fit import Candidate, FitResult

#: the columns of a table of quantities, each beside its basis
_QUANTITY_COLS = (Col("quantity"), Col("value", "number", "right"), Col("basis", "basis"))
#: a cost table: provider and instance, prices and totals in dollars, the date of the price
_COST_COLS = (Col("provider"), Col("instance", stack=True),
              Col("$/GPU-h", "number", "right"),
              Col("on-demand", "number", "right"), Col("spot $/GPU-h", "number", "right"),
              Col("spot", "number", "right"), Col("price as of", "number"))


#: the rows of the memory table: the parts alive at the peak (MemoryReport.at_peak_bytes)
_PEAK_PART_LABELS = {
    "weights_bytes": "weights", "master_weights_bytes": "fp32 master weights",
    "optimizer_bytes": "optimizer state", "gradients_bytes": "gradients",
    "no_sync_gradients_bytes": "gradients, unsharded (FSDP no_sync)",
    "optimizer_temporaries_bytes": "optimizer temporaries",
    "autocast_weight_copies_bytes": "weight copies (autocast / fp8)",
    "gathered_bytes": "gathered layers (ZeRO-3/FSDP)",
    "deepspeed_buckets_bytes": "DeepSpeed buckets", "activations_bytes": "activations",
    "activations_kept_bytes": "activations kept", "logits_bytes": "logits and loss",
    "lm_head_backward_bytes": "LM head backward", "recomputed_layer_bytes": "layer recomputed",
    "dora_norm_bytes": "DoRA weight norm (one linear)",
    "bnb_dequant_bytes": "4-bit weight dequantised (one linear)",
    "gptq_dequant_bytes": "GPTQ weight unpacked (one linear)",
    "gathered_gradients_bytes": "unsharded gradients (two FSDP units)",
    "root_unit_gradients_bytes": "FSDP1 root unit's gradient, views and flat",
}


def _basis(f: Figure) -> str:
    return f"[dim]{esc(f.basis)}: {esc(f.source)}[/dim]"


def layout_text(setup: dict[str, Any], num_gpus: int) -> str:
    """', tp 4, pp 2 (v 8), dp 256' for a model-parallel layout; '' for data parallelism alone."""
    model_parallel = [(k, setup.get(k) or 1) for k in ("tp", "pp", "cp", "ep")]
    if all(n == 1 for _, n in model_parallel):
        return ""
    parts = []
    for key, n in model_parallel:
        if n > 1:
            v = setup.get("virtual_stages") or 1
            parts.append(f"{key} {n}" + (f" (v {v})" if key == "pp" and v > 1 else ""))
    # expert parallelism shards the experts across data-parallel ranks, not the GPU count
    replicas = num_gpus // max(1, (setup.get("tp") or 1) * (setup.get("pp") or 1)
                               * (setup.get("cp") or 1))
    return ", " + ", ".join(parts) + f", dp {replicas}"


def render_training(e: TrainingEstimate, console: Console, wide: bool = False) -> None:
    """A training estimate: memory, step time, the whole run, cost, warnings, assumptions.
    `wide`: every basis in its table, however long the lines (else footnotes when narrow)."""
    notes = Notes()
    s = e.setup
    console.print(
        f"[bold]{esc(e.model)}[/bold] on {e.num_gpus} x [bold]{esc(e.gpu)}[/bold] - "
        + esc(f"{s['method']}, {s['precision']}, micro-batch {s['micro_batch']} x seq "
              f"{s['seq_len']} x accumulation {s['grad_accum']}, checkpointing "
              f"{'on' if s['checkpointing'] else 'off'}, ZeRO {s['zero_stage']}"
              + (f", offload {s['offload']}" if s.get("offload") not in (None, "none") else "")
              + f", {s['optimizer']}{layout_text(s, e.num_gpus)}"
              + (", DeepSpeed PipelineEngine" if s.get("deepspeed_pipe_engine") else "")
              + (f", kernels {s['kernels']}" if s.get("kernels") not in (None, "eager")
                 else "")
              + (", CUDA_LAUNCH_BLOCKING" if s.get("cuda_launch_blocking") else "")))
    console.print(f"[dim]model: {esc(e.model_basis)}[/dim]")

    m = e.memory
    # the parts alive at the peak, which add up to the peak of live tensors; then the reserve
    # and the context, which add up to the total
    mem = [[_PEAK_PART_LABELS.get(key, key), gib(fig.value), _basis(fig)]
           for key, fig in m.at_peak_bytes.items()]
    mem.append(["peak of live tensors (the parts above)", gib(m.tensors_bytes.value),
                _basis(m.tensors_bytes)])
    mem += [[name, gib(fig.value), _basis(fig)] for name, fig in (
        ("allocator reserve", m.allocator_reserve_bytes), ("CUDA context", m.cuda_context_bytes))
        if fig.value]
    verdict = "[green]fits[/green]" if m.fits else "[red]does not fit[/red]"
    mem.append(["[bold]total[/bold]", f"[bold]{gib(m.total_bytes.value)}[/bold]",
                f"{verdict} in {gib(m.device_bytes.value)}; peak at {esc(m.peak_phase)}"])
    print_table(console, (Col("part"), Col("size", "number", "right"), _QUANTITY_COLS[2]), mem,
                notes=notes, wide=wide, title="Memory per GPU (GiB = 2^30 bytes)")
    elsewhere = [f"{_PEAK_PART_LABELS[k]} {gib(f.value)}" for k, f in (
        ("activations_bytes", m.activations_bytes), ("logits_bytes", m.logits_bytes),
        ("gradients_bytes", m.gradients_bytes),
        ("optimizer_temporaries_bytes", m.optimizer_temporaries_bytes)) if f.value and (
        k not in m.at_peak_bytes or m.at_peak_bytes[k].value != f.value)]
    if elsewhere:
        console.print("[dim]at their own peak, not at this one: " + ", ".join(elsewhere)
                      + " (--json: memory.*_bytes)[/dim]")
    reserved = m.tensors_bytes.value + m.allocator_reserve_bytes.value
    if m.stack == "xla":  # no torch.cuda on a TPU: JAX's and PyTorch/XLA's memory statistics
        console.print(f"[dim]as the tools report it: jax Device.memory_stats()"
                      f"['peak_bytes_in_use'] (torch_xla: xm.get_memory_info) ~ peak of live "
                      f"tensors ({gib(m.tensors_bytes.value)})[/dim]")
    else:
        console.print(f"[dim]as the tools report it: torch.cuda.max_memory_allocated() ~ peak "
                      f"of live tensors ({gib(m.tensors_bytes.value)}); max_memory_reserved() "
                      f"~ with the allocator reserve ({gib(reserved)}); nvidia-smi ~ "
                      f"total[/dim]")
    if m.host_bytes is not None:
        console.print(f"host RAM for the CPU-offloaded state: {gib(m.host_bytes.value)} per "
                      f"GPU {_basis(m.host_bytes)}")

    t = [["model FLOPs per token", si(e.model_flops_per_token.value, "FLOP"),
          _basis(e.model_flops_per_token)]]
    if e.hardware_flops_per_token.value != e.model_flops_per_token.value:
        t.append(["hardware FLOPs per token", si(e.hardware_flops_per_token.value, "FLOP"),
                  _basis(e.hardware_flops_per_token)])
    labels = {"matmul_s": "matmuls", "attention_s": "attention kernels",
              "memory_bound_s": "memory-bound work", "host_s": "host issuing operators (not added)",
              "host_exposed_s": "host time not hidden",
              "optimizer_s": "optimizer step",
              "communication_s": "communication (not added)",
              "communication_exposed_s": "communication not hidden",
              "pipeline_bubble_s": "pipeline bubble",
              "checkpoint_copy_s": "checkpoint copies to the host"}
    for kind in ("tensor_parallel_collectives", "context_parallel_KV_ring", "expert_all_to_all",
                 "pipeline_sends"):
        name = kind.replace("_", " ")
        labels[f"{kind}_s"] = f"{name} (not added)"
        labels[f"{kind}_exposed_s"] = f"{name} not hidden"
    for key, fig in e.step_time_breakdown_s.items():
        if fig.value > 0:
            t.append([f"  {labels.get(key, key)}", seconds(fig.value), _basis(fig)])
    t.append(["[bold]step time[/bold]", f"[bold]{seconds(e.step_time_s.value)}[/bold]",
              f"bottleneck: [bold]{esc(e.bottleneck)}[/bold]"])
    t.append(["tokens/s per GPU", f"{e.tokens_per_s_per_gpu.value:,.0f}",
              _basis(e.tokens_per_s_per_gpu)])
    if e.num_gpus > 1:
        t.append(["tokens/s, all GPUs", f"{e.tokens_per_s.value:,.0f}", _basis(e.tokens_per_s)])
    t.append(["GEMM efficiency", pct(e.gemm_efficiency.value), _basis(e.gemm_efficiency)])
    t.append(["MFU", pct(e.mfu.value), _basis(e.mfu)])
    if e.hfu.value != e.mfu.value:
        t.append(["HFU (with recomputation)", pct(e.hfu.value), _basis(e.hfu)])
    print_table(console, _QUANTITY_COLS, t, notes=notes, wide=wide,
                title="Step time and throughput")

    if e.totals is not None:
        tot = e.totals
        w = [["tokens", si(tot.tokens.value), _basis(tot.tokens)],
             ["optimizer steps", f"{tot.optimizer_steps.value:,.0f}",
              _basis(tot.optimizer_steps)],
             ["[bold]GPU hours[/bold]", f"[bold]{hours(tot.gpu_hours.value)}[/bold]",
              _basis(tot.gpu_hours)],
             [f"wall clock on {e.num_gpus} GPU(s)", f"{hours(tot.wall_clock_hours.value)} h",
              _basis(tot.wall_clock_hours)]]
        down = tot.downtime_gpu_hours
        # shown where it is at least 0.1% of the run (a long run on many GPUs)
        if down is not None and tot.gpu_hours_with_downtime is not None and (
                down.value >= 1e-3 * tot.gpu_hours.value):
            w += [["expected downtime (restarts, lost work, checkpoints)",
                   f"{down.value:,.1f} GPU h", _basis(down)],
                  ["GPU hours with downtime", f"{tot.gpu_hours_with_downtime.value:,.1f}",
                   _basis(tot.gpu_hours_with_downtime)]]
            if tot.wall_clock_hours_with_downtime is not None:
                w.append(["wall clock with downtime",
                          f"{tot.wall_clock_hours_with_downtime.value:,.1f} h",
                          _basis(tot.wall_clock_hours_with_downtime)])
        print_table(console, _QUANTITY_COLS, w, notes=notes, wide=wide, title="The whole run")
        if tot.cost_usd:
            cost = [[esc(f"{r.provider} ({r.provider_kind})"),
                     esc(instance_billed(r.instance, r.billing)),
                     usd(r.on_demand_usd_per_gpu_hour), usd(r.on_demand_usd),
                     usd(r.spot_usd_per_gpu_hour), usd(r.spot_usd), esc(r.as_of)]
                    for r in tot.cost_usd]
            print_table(console, _COST_COLS, cost, notes=notes, wide=wide,
                        title=f"Cost at catalog prices for {esc(e.gpu)}, the "
                              f"{hours(tot.gpu_hours.value)} GPU hours of the steps, whole "
                              "instances billed (prices change: check the date)")
            _print_downtime_cost(console, tot)
            print_price_flags(console, ((r.provider, r.instance, r.flags)
                                        for r in tot.cost_usd))
        else:
            console.print(f"[dim]No catalog price for {esc(e.gpu)}.[/dim]")
        if tot.track_record is not None:
            console.print(esc(tot.track_record.text()))
    for warning in e.warnings:
        console.print(f"[yellow]warning:[/yellow] {esc(warning)}")
    console.print("[dim]Assumptions used:[/dim]")
    print_list(console, [f"[dim]{esc(a)}[/dim]" for a in e.assumptions])


def _print_downtime_cost(console: Console, tot: Totals) -> None:
    """What the expected downtime adds to the cost table (which prices the steps), where the
    whole-run table shows the downtime."""
    down = tot.downtime_gpu_hours
    if down is None or not tot.downtime_cost_usd or down.value < 1e-3 * tot.gpu_hours.value:
        return
    od = [r.on_demand_usd for r in tot.downtime_cost_usd if r.on_demand_usd is not None]
    more = f": {usd(min(od))} to {usd(max(od))} more on demand at these prices" if od else ""
    console.print(f"[dim]The expected downtime adds {down.value:,.1f} GPU h "
                  f"(+{100 * down.value / tot.gpu_hours.value:.1f}%, assumed){more} "
                  f"(downtime_cost_usd in --json).[/dim]")


def _describe(c: Candidate) -> str:
    offload = "" if c.offload == "none" else f", offload {c.offload}"
    return (f"{c.method}, ckpt {'on' if c.checkpointing else 'off'}, ZeRO {c.zero_stage}"
            f"{offload}, {c.num_gpus} x {c.gpu}")


def _candidate_row(c: Candidate) -> list[str]:
    return [esc(c.change), esc(_describe(c)), f"{c.micro_batch} x {c.grad_accum}",
            gib(c.memory_total_bytes), "[green]yes[/green]" if c.fits else "[red]no[/red]",
            f"{c.tokens_per_s_per_gpu:,.0f}"]


#: the columns of fit's configurations: the change and the setup are prose (they wrap between
#: words; GPU names hold no space), the rest numbers
_FIT_COLS = (Col("change"), Col("setup"), Col("micro x accum", "number", "right"),
             Col("memory/GPU", "number", "right"), Col("fits", "number"),
             Col("tokens/s/GPU", "number", "right"))


def render_fit(r: FitResult, console: Console, wide: bool = False) -> None:
    """A fit: the verdict as given, the largest micro-batch, the configurations tried."""
    req = r.requested
    limit, device, room = (gib(req.memory_limit_bytes), gib(r.device_memory_bytes),
                           pct(r.headroom_fraction))
    if req.fits:
        console.print(f"As given: {gib(req.memory_total_bytes)} per GPU, [green]fits[/green] in "
                      f"{limit} ({room} headroom left free).")
    elif r.requested_fits_device:
        # estimate's verdict is the device's memory: say both, so the two never disagree
        console.print(f"As given: {gib(req.memory_total_bytes)} per GPU, [green]fits[/green] in "
                      f"{device} (as `gpuhours estimate` says), [yellow]with less than the "
                      f"{room} headroom fit keeps free[/yellow] ({limit}: room for "
                      f"fragmentation spikes and evaluation, an assumption).")
    else:
        console.print(f"As given: {gib(req.memory_total_bytes)} per GPU, [red]does not fit[/red] "
                      f"in {device}; the setups below keep {room} headroom free ({limit}).")
    if r.largest_micro_batch is not None:
        console.print(f"Largest micro-batch that fits: [bold]{r.largest_micro_batch}[/bold]")
        if (r.effective_batch is not None and r.micro_batch_for_effective_batch is not None
                and r.grad_accum_for_effective_batch is not None):
            ranks = r.effective_batch // (r.micro_batch_for_effective_batch
                                          * r.grad_accum_for_effective_batch)
            console.print(f"Effective batch {r.effective_batch}: micro-batch "
                          f"[bold]{r.micro_batch_for_effective_batch}[/bold] x accumulation "
                          f"[bold]{r.grad_accum_for_effective_batch}[/bold] x {ranks} "
                          f"data-parallel rank{'s' if ranks > 1 else ''} as given, exactly")
    elif r.fastest is not None:
        console.print("As given, not even micro-batch 1 fits with the headroom; the first row is "
                      "the fastest setup of this model and method on these GPUs that does.")
    else:
        console.print(f"[red]No setup of this model and method fits on these GPUs with "
                      f"{room} headroom[/red] (micro-batch, checkpointing, ZeRO stage and, "
                      f"unless given, the parallel layout tried); the rows below change more.")
    if r.effective_batch_note:
        console.print(f"[yellow]{esc(r.effective_batch_note)}[/yellow]")
    rows = []
    if r.fastest is not None:
        rows.append(_candidate_row(r.fastest.model_copy(update={
            "change": "fastest that fits: " + r.fastest.change})))
    rows.extend(_candidate_row(c) for c in r.alternatives)
    if rows:
        print_table(console, _FIT_COLS, rows, notes=Notes(), wide=wide, title="Configurations")
    if r.alternatives:
        batch = (f" x the accumulation an effective batch of {r.effective_batch} needs on "
                 "each row's data-parallel ranks (where they cannot make it, the nearest batch "
                 "they make, which the row names)" if r.effective_batch is not None else "")
        console.print(f"[dim]Other rows: what would fit, at micro-batch 1{batch}, changing "
                      "only what their first column names (estimate/remedies.py); more or "
                      "larger GPUs only when no setup of the method as given fits on these."
                      "[/dim]")
    if r.fastest is not None and r.fastest.kernels == "megatron" and (
            r.fastest.tp * r.fastest.pp * r.fastest.cp * r.fastest.ep > 1):
        console.print("[dim]The fastest row's layout is costed on Megatron-Core's kernel path "
                      "(kernels megatron: Transformer Engine's fused layers, vocab-parallel "
                      "loss), the code that runs such a layout; give --kernels to choose."
                      "[/dim]")
    # as estimate's downtime line: shown when it loses at least 0.1% of the wall clock
    if r.expected_goodput is not None and r.expected_goodput <= 0.999:
        which = "fastest setup" if r.fastest else "as given"
        console.print(f"Expected goodput of a long run ({which}): "
                      f"[bold]{pct(r.expected_goodput)}[/bold] of the wall clock on steps "
                      f"[dim](restart and checkpoint terms assumed; {esc(r.goodput_basis)})"
                      f"[/dim]")
    elif r.expected_goodput is None and r.goodput_basis and r.largest_micro_batch is not None:
        console.print(f"[yellow]No expected goodput: {esc(r.goodput_basis)}[/yellow]")
    console.print(f"[dim]{r.candidates_evaluated} configurations evaluated; memory from "
                  f"estimate/memory.py (formula), speed from estimate/timing.py (roofline with "
                  f"assumed efficiencies).[/dim]")


def render_generation(data: dict[str, Any], console: Console, wide: bool = False) -> None:
    """A generation estimate (gpuhours.estimate.generation.generation_summary): batch, memory,
    prefill and decode with their bounds, throughput, GPU hours and cost, each with its basis."""
    notes = Notes()
    s = data["setup"]
    console.print(f"[bold]{esc(data['model'])}[/bold] generating on "
                  f"{data['gpus']['value']:,.0f} x [bold]{esc(data['gpu'])}[/bold] "
                  f"({esc(data['engine'])}), prompt "
                  f"{s['prompt_tokens']:,} + output {s['output_tokens']:,} tokens")
    console.print(f"[dim]model: {esc(data['model_basis'])}[/dim]")
    table: list[list[str]] = []

    def row(label: str, key: str, text: str) -> None:
        f = data[key]
        table.append([label, text, f"[dim]{esc(f['basis'])}: {esc(f['source'])}[/dim]"])

    fig = {k: v["value"] for k, v in data.items() if isinstance(v, dict) and "value" in v}
    row("batch", "batch", f"{fig['batch']:,.0f} sequences")
    cap_text = f"{fig['max_batch_by_memory']:,.0f} sequences"
    if data.get("memory_cap") and data["memory_cap"] != "KV cache":
        # hf-generate: the phase whose peak sets it (the whole account is the figure's basis)
        cap_text += f" ({esc(data['memory_cap'].split(' of ')[0])}'s peak)"
    row("fit in memory", "max_batch_by_memory", cap_text)
    row("running at once", "running_sequences", f"{fig['running_sequences']:,.0f} x "
        f"{fig['waves']:,.0f} waves")
    row("weights (whole model)", "weights_bytes", gib(fig["weights_bytes"]))
    row("KV cache per GPU", "kv_cache_bytes", gib(fig["kv_cache_bytes"]))
    if "peak_memory_bytes" in fig:
        row("peak memory per GPU", "peak_memory_bytes", gib(fig["peak_memory_bytes"]))
    if fig.get("profile_reserve_bytes"):
        # vLLM: its startup profile's peak, kept out of the KV cache
        row("profiling reserve per GPU", "profile_reserve_bytes",
            gib(fig["profile_reserve_bytes"]))
    if "hooks_s" in fig:
        # hf-generate split by device_map: the layers in sequence, accelerate's hooks
        row("GPUs per replica", "gpus", f"{fig['gpus']:,.0f} (device_map, in sequence)")
        row("accelerate hooks a forward", "hooks_s", seconds(fig["hooks_s"]))
    elif fig["gpus"] > 1:
        row("GPUs per replica", "gpus", f"{fig['gpus']:,.0f} (tensor parallel)")
        row("all-reduces per step", "allreduce_s_per_decode_step",
            seconds(fig["allreduce_s_per_decode_step"]))
    row("host cost per step", "host_step_s", seconds(fig["host_step_s"]))
    row("prefill", "prefill_s", seconds(fig["prefill_s"]))
    if s["output_tokens"]:
        row("decode", "decode_s", f"{seconds(fig['decode_s'])} ({esc(data['decode_bound'])}"
            f"-bound)")
        row("decode step", "decode_step_s_first", f"{seconds(fig['decode_step_s_first'])} to "
            f"{seconds(fig['decode_step_s_last'])}")
        # whether the steps replay a CUDA graph (0 launches) or run eagerly, and why
        graphs = str(data.get("decode_cuda_graphs", ""))
        mode = ("CUDA graph" if graphs.startswith("CUDA graph:") else
                "eager" if graphs.startswith("eager") else "graph, then eager")
        row("eager launches, 1st step", "eager_launch_s_first",
            f"{seconds(fig['eager_launch_s_first'])} ({mode})")
    if fig.get("tail_s"):
        row("waiting for the longest", "tail_s", seconds(fig["tail_s"]))
    row("output tokens/s", "output_tokens_per_s", f"{fig['output_tokens_per_s']:,.0f}")
    # below one a second, three significant figures (a long generation read "0.00")
    rate = fig["sequences_per_s"]
    row("sequences/s", "sequences_per_s", f"{rate:,.2f}" if rate >= 1 else f"{rate:.3g}")
    if data.get("gpu_hours") is not None:
        row("GPU hours", "gpu_hours", f"[bold]{hours(fig['gpu_hours'])}[/bold] for "
            f"{fig['sequences']:,.0f} sequences")
    print_table(console, _QUANTITY_COLS, table, notes=notes, wide=wide,
                title="Generation (GiB = 2^30 bytes)")
    if data.get("cost_usd"):
        cost = [[esc(c["provider"]), esc(instance_billed(c["instance"], c.get("billing", ""))),
                 usd(c["on_demand_usd"]),
                 usd(c["spot_usd"]), esc(str(c["as_of"]))] for c in data["cost_usd"]]
        print_table(console, (Col("provider"), Col("instance", stack=True),
                              Col("on-demand", "number", "right"),
                              Col("spot", "number", "right"), Col("as of", "number", "right")),
                    cost, notes=notes, wide=wide,
                    title="Cost of the GPU hours, whole instances billed")
        print_price_flags(console, ((c["provider"], c["instance"], c.get("flags") or [])
                                    for c in data["cost_usd"]))
    elif data.get("gpu_hours") is not None and not data.get("cost_rows_left_out"):
        console.print(f"[dim]no catalog price for {esc(data['gpu'])}[/dim]")
    if data.get("cost_rows_left_out"):
        out = data["cost_rows_left_out"]
        console.print(f"[dim]left out of the cost: {esc(', '.join(out['rows']))}: "
                      f"{esc(out['reason'])}[/dim]")
    console.print(f"[dim]{esc(data['basis'])}[/dim]")
    if data.get("setup_chosen"):
        console.print(f"[yellow]warning:[/yellow] {esc(data['setup_chosen'])}")
    if data.get("track_record"):
        from gpuhours.estimate.track_record import TrackRecord

        console.print(esc(TrackRecord.model_validate(data["track_record"]).text()))
    console.print("[dim]assumptions: " + esc("; ".join(
        f"{a['name']} = {a['value']:g} {a['unit']}" for a in data["assumptions"])) + "[/dim]")


def render_transfer(x: Any, e: TrainingEstimate, console: Console) -> None:
    """A step measured on another device, carried to this estimate's GPU
    (gpuhours.track.transfer.Transfer), beside the estimate's own figures."""
    notes = Notes()
    rows = [["step time, transferred", seconds(x.step_s), esc(x.basis)],
            ["  range", f"{seconds(x.low_s)}-{seconds(x.high_s)}",
             "the measured residual all in the compute part, or all in the memory-bound part"],
            ["tokens/s per GPU", si(x.tokens_per_s_per_gpu), "tokens per step / step time"],
            ["step time, analytic", seconds(x.analytic_step_s), "this estimate, above"]]
    if e.totals is not None:
        scale = x.step_s / e.step_time_s.value
        rows.append(["GPU hours at that step", si(e.totals.gpu_hours.value * scale),
                     f"the estimate's {si(e.totals.gpu_hours.value)} x {scale:.3g}"])
    print_table(console, (Col("quantity"), Col("value", "number", "right"), Col("basis", "basis")),
                rows, notes=notes, title=f"Measured elsewhere: ledger #{x.ledger_id}, carried to "
                                         f"{esc(e.gpu)}")
