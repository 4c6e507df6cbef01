"""Terminal rendering of storage reports and prune results (rich). Sizes in binary units:
KiB = 2^10, MiB = 2^20, GiB = 2^30, TiB = 2^40 bytes. Every path, run name, reason and metric
name comes from the user's disk or options and goes through `esc` (report/text.py)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from gpuhours.report.text import esc
from gpuhours.storage.cache import Eviction
from gpuhours.storage.pruning import PruneResult
from gpuhours.storage.report import StorageReport
from gpuhours.storage.retention import RetentionPlan


def size(n_bytes: float) -> str:
    for factor, unit in ((2**40, "TiB"), (2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if abs(n_bytes) >= factor:
            return f"{n_bytes / factor:,.2f} {unit}"
    return f"{n_bytes:,.0f} B"


def _metric(v: float | None) -> str:
    return "-" if v is None else f"{v:.6g}"


def _few(paths: list[str], n: int) -> str:
    return ", ".join(esc(p) for p in paths[:n])


def render_plan(plan: RetentionPlan, out: Console, applied_paths: set[str] | None = None) -> None:
    if not plan.decisions:
        out.print("No checkpoints found (checkpoint-<step> directories, or checkpoint files "
                  "named by step or epoch such as checkpoint_step_500.pt or epoch_3.ckpt).")
        return
    metric = plan.policy.metric
    t = Table(title=f"Checkpoints: {esc(plan.policy_text)}")
    for col in ("run", "checkpoint", "step", "size", esc(metric or "metric"), "action",
                "why kept"):
        t.add_column(col, justify="right" if col in ("step", "size") else "left",
                     no_wrap=col != "why kept" and col != "run", overflow="fold")
    for d in plan.decisions:
        action: str = d.action
        if applied_paths is not None and d.action == "remove":
            action = "removed" if d.path in applied_paths else "not removed"
        style = "red" if d.action == "remove" else ""
        step = str(d.step) if d.step_in_name else f"epoch {d.epoch}"
        t.add_row(esc(d.run), esc(d.path.rsplit("/", 1)[-1]), step, size(d.bytes),
                  _metric(d.metric), f"[{style}]{action}[/{style}]" if style else action,
                  esc("; ".join(d.reasons)))
    out.print(t)


def render_report(r: StorageReport, out: Console) -> None:
    t = Table(title=f"Storage under {esc(r.root)} (apparent size; allocated on disk as `du` "
                    "counts)")
    for col in ("kind", "files", "size", "on disk"):
        t.add_column(col, justify="left" if col == "kind" else "right")
    for k in r.kinds:
        if k.files:
            t.add_row(k.kind, f"{k.files:,}", size(k.bytes), size(k.disk_bytes))
    t.add_row("[bold]total[/bold]", f"{r.total_files:,}", size(r.total_bytes),
              size(r.total_disk_bytes))
    out.print(t)
    render_plan(r.retention, out)
    removing = r.retention.to_remove
    if removing:
        out.print(f"The policy would remove {len(removing)} checkpoint(s): "
                  f"{size(r.retention.remove_bytes)}, freeing {size(r.retention.frees_disk_bytes)} "
                  "on disk (`gpuhours storage prune` with the same options shows it, --yes does it).")
    elif r.retention.decisions:
        out.print("The policy would remove nothing.")
    _render_extras(r.trash, r.unreadable, out)
    if r.links:
        outside = sum(1 for x in r.links if not x.inside)
        out.print(f"{len(r.links):,} symbolic link(s), not followed; {outside:,} point outside.")
    if r.mount_points:
        out.print(f"{len(r.mount_points):,} mount point(s) (another filesystem or a bind mount), "
                  f"not entered: {_few(r.mount_points, 3)}.")
    out.print(f"[dim]Classification: {esc(r.classification)}[/dim]")
    out.print(f"[dim]Scanned {r.total_files:,} entries in {r.scan_s:.2f} s.[/dim]")


def _render_extras(trash: list[str], unreadable: list[str], out: Console) -> None:
    if trash:
        out.print(f"[yellow]{len(trash)} trash director(ies) left by an interrupted prune[/yellow] "
                  f"({_few(trash, 3)}); the next `prune --yes` deletes them.")
    if unreadable:
        out.print(f"[yellow]Could not read {len(unreadable)} path(s)[/yellow]: "
                  f"{_few(unreadable, 5)}; checkpoints with unreadable parts are kept.")


def render_prune(r: PruneResult, out: Console) -> None:
    removed = {x.path for x in r.removed}
    render_plan(r.plan, out, removed if r.applied else None)
    plan = r.plan
    if not r.applied:
        if plan.to_remove:
            out.print(f"Dry run, nothing removed. With --yes this removes "
                      f"{len(plan.to_remove)} checkpoint(s): {size(plan.remove_bytes)}, freeing "
                      f"{size(plan.frees_disk_bytes)} on disk.")
        _render_extras([t.path for t in r.trash], [], out)
        return
    # what was really deleted, counted file by file as it was deleted
    freed = sum(x.bytes_removed for x in r.removed)
    out.print(f"Removed {len(r.removed)} checkpoint(s), {size(freed)} "
              f"({sum(x.files_removed for x in r.removed):,} files).")
    partial = r.partly_removed
    if partial:
        out.print(f"[red]{len(partial)} removal(s) stopped part-way[/red] after deleting "
                  f"{sum(x.files_removed for x in partial):,} file(s), "
                  f"{size(sum(x.bytes_removed for x in partial))}.")
    for x in r.removals + r.trash:
        if x.outcome != "removed" or x in r.trash:
            colour = "red" if x.outcome == "failed" else "yellow" if x.outcome == "skipped" else ""
            label = f"[{colour}]{x.outcome}[/{colour}]" if colour else x.outcome
            out.print(f"  {label} {esc(x.path)}: {esc(x.detail)}")


def _age(seconds_ago: float) -> str:
    for unit, n in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds_ago >= n:
            return f"{seconds_ago / n:.1f} {unit} ago"
    return f"{max(seconds_ago, 0):.0f} s ago"


def render_eviction(r: Eviction, out: Console, now: float | None = None, shown: int = 20) -> None:
    import time

    t = time.time() if now is None else now
    out.print(f"Cache {esc(r.directory)}: {size(r.bytes_before)} in files, cap "
              f"{size(r.max_bytes)} ({r.max_bytes:,} bytes).")
    if not r.files:
        out.print("Nothing to evict." if not r.over_cap else "")
    else:
        table = Table(title="Least recently used first")
        for col in ("file", "size", "last used"):
            table.add_column(col, justify="left" if col == "file" else "right",
                             overflow="fold")
        for f in r.files[:shown]:
            table.add_row(esc(f.path), size(f.bytes), _age(t - f.last_used))
        out.print(table)
        if len(r.files) > shown:
            out.print(f"... and {len(r.files) - shown:,} more.")
        verb = "Removed" if r.applied else "Dry run, nothing removed. With --yes this removes"
        out.print(f"{verb} {len(r.files):,} file(s), {size(r.evicted_bytes)}: the cache "
                  f"{'is' if r.applied else 'would be'} {size(r.bytes_after)}.")
    out.print("[dim]Last use: the later of access and modification time (a filesystem "
              "mounted noatime records no reads).[/dim]")
    if r.over_cap:
        out.print(f"[yellow]Still over the cap[/yellow]: {size(r.bytes_after)}; "
                  f"{r.too_recent:,} file(s) were modified within the settle window and are "
                  "never evicted (they may still be being written).")


def render_consolidation(plan: dict[str, object], out: Console) -> None:
    files = plan["files"]
    assert isinstance(files, list)
    total = plan["bytes"]
    assert isinstance(total, int)
    how = ("loaded with torch.load(weights_only=True) and saved as one object"
           if plan["format"] == "torch" else "concatenated byte for byte, with an index")
    out.print(f"{len(files):,} file(s), {size(total)}, into {esc(plan['dest'])}: {how}.")
    if plan.get("natural_order"):
        out.print(f"[yellow]Note[/yellow]: merged in the order given, not by the numbers in "
                  f"the names ({esc(', '.join(files[:3]))}, ...): a shell glob sorts batch_10 "
                  "before batch_2. Pass them sorted (ls -v, sort -V) if the order matters.")
    result = plan["result"]
    if not plan["applied"]:
        then = "keeps them" if plan["keep_originals"] else "then deletes the originals"
        out.print(f"Dry run, nothing written. With --yes this writes {esc(plan['dest'])} "
                  f"atomically, checks it by reading it back, and only {then}.")
        return
    assert isinstance(result, dict)
    out.print(f"Wrote {esc(result['dest'])} ({size(result['bytes'])}) and verified it"
              + (f"; index {esc(result['index'])}" if result.get("index") else "") + ".")
    removed = result["removed"]
    assert isinstance(removed, list)
    out.print(f"Deleted {len(removed):,} original(s)." if removed
              else "Kept the originals (--keep-originals).")
