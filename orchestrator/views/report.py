"""`orchestrator report`: a self-contained HTML page and a PNG of a run's timeline.

The PNG (matplotlib, no display needed) shows segments as bars coloured by how they ended, and the
iteration reached over wall time with the time lost shaded. The HTML embeds the PNG and repeats the
timeline as elements with hover text (job, nodes, culprit, evidence), plus the segments and the
blacklist.
"""

from __future__ import annotations

import base64
import html
import io
import re
from datetime import datetime
from pathlib import Path
from typing import Any

from orchestrator.model import Role
from orchestrator.state import RunState, SegmentRecord
from orchestrator.views.ettr import human, run_metrics, segment_label
from orchestrator.views.lossplot import has_losses, loss_panel
from orchestrator.views.restarts import RestartEvent, job_cell, job_spares, restarts, summary_text
from orchestrator.views.status import drain_commands, lost_text
from orchestrator.views.text import clean, cut

COLOURS = {
    "success": "#2e7d32", "timelimit": "#78909c", "preempted": "#90a4ae", "gpu_ecc": "#c62828",
    "gpu_lost": "#ad1457", "gpu_oom_startup": "#d84315", "node_fail": "#6a1b9a", "hang": "#ef6c00",
    "nccl_timeout": "#f9a825", "network": "#fbc02d", "filesystem": "#0277bd", "host_oom": "#8d6e63",
    "user_bug": "#212121", "user_oom": "#424242", "segfault": "#5d4037", "bus_error": "#4e342e",
    "unknown": "#9e9e9e", "cancelled": "#607d8b", "running": "#1e88e5", "loss_anomaly": "#7b1fa2",
    "lost: no checkpoint": "#b71c1c",
    "exit 0 before the goal": "#e57373",
}


def _end(s: SegmentRecord, now: datetime) -> datetime:
    return s.ended_at or now


def _cause(s: SegmentRecord) -> str:
    return segment_label(s) if s.cause else "running"


def render_png(state: RunState, now: datetime) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    segs = [s for s in state.segments if s.submitted_at]
    rows = 3 if has_losses(segs) else 2  # the loss panel only when the ranks printed a loss
    with plt.rc_context({"font.size": 12, "axes.titlesize": 13, "axes.labelsize": 12}):
        # constrained layout: the time panels' rotated labels need room the loss panel's do not
        fig = plt.figure(figsize=(12, 7 + 3 * (rows - 2)), layout="constrained")
        outer = fig.add_gridspec(rows - 1, 1, height_ratios=[3, 1.6][:rows - 1])
        grid = outer[0].subgridspec(2, 1, height_ratios=[1, 2])
        top = fig.add_subplot(grid[0])
        axes = [top, fig.add_subplot(grid[1], sharex=top)]
        axes += [fig.add_subplot(outer[1])] if rows == 3 else []
        _segment_bars(axes[0], segs, now)
        axes[0].set_title(_totals(state, now), loc="left")
        _iterations(axes[1], segs, now)
        if rows == 3:
            loss_panel(axes[2], segs, COLOURS)
        axes[0].tick_params(labelbottom=False)
        plt.setp(axes[1].get_xticklabels(), rotation=30, ha="right")
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=110)
        plt.close(fig)
    return buf.getvalue()


def _totals(state: RunState, now: datetime) -> str:
    m = run_metrics(state, now)
    ettr = f"{m['ettr']:.0%}" if m["ettr"] is not None else "-"
    goal = f" of {state.target_iteration}" if state.target_iteration else ""
    lost, _ = lost_text(m)
    again = summary_text(restarts(state))
    return _no_math(f"run {clean(state.run)}: {state.status.value}, iteration "
            f"{state.best_iteration()}{goal}, {len(state.segments)} segments\neffective training "
            f"time {ettr} of {human(m['wall_s'])}; time lost: {lost}"
                    + (f"\nrestarts: {again}" if again else ""))


def _no_math(s: str) -> str:
    """matplotlib reads $...$ as mathtext (a stray `$` from a tampered state would raise)."""
    return s.replace("$", r"\$")


def _segment_bars(ax: Any, segs: list[SegmentRecord], now: datetime) -> None:
    """One bar per segment coloured by how it ended, labelled with its index and culprits; a
    legend."""
    from matplotlib.patches import Patch

    for s in segs:
        assert s.submitted_at is not None
        start, end = _num(s.submitted_at), _num(_end(s, now))
        ax.barh(0, end - start, left=start, color=COLOURS.get(_cause(s), "#9e9e9e"),
                edgecolor="white",
                # a restart inside the job: no queue
                hatch="//" if s.in_job_of is not None else None)
        culprit = _no_math(f"\n{cut(','.join(s.culprit_nodes), 24)}") if s.culprit_nodes else ""
        ax.text((start + end) / 2, 0, f"{s.index}{culprit}", ha="center", va="center", fontsize=11,
                color="white", fontweight="bold")
    ax.set_yticks([])
    causes = list(dict.fromkeys(_cause(s) for s in segs))
    handles = [Patch(color=COLOURS.get(c, "#9e9e9e"), label=c) for c in causes]
    if any(s.in_job_of is not None for s in segs):
        handles.append(Patch(facecolor="#9e9e9e", hatch="//", edgecolor="white",
                             label="restart inside the job"))
    ax.legend(handles=handles, loc="upper left",
              bbox_to_anchor=(1.0, 1.0), title="how it ended", fontsize=10)


def _iterations(ax: Any, segs: list[SegmentRecord], now: datetime) -> None:
    from matplotlib.patches import Patch

    for i, s in enumerate(segs):
        if s.first_progress_at and s.last_progress_at and s.end_iteration is not None:
            ax.plot([s.first_progress_at, s.last_progress_at], [s.start_iteration, s.end_iteration],
                    color=COLOURS.get(_cause(s), "#1e88e5"), linewidth=2.5)
        nxt = segs[i + 1] if i + 1 < len(segs) else None
        lost_from = s.last_progress_at or s.submitted_at
        lost_to = (nxt.first_progress_at or _end(nxt, now)) if nxt else None
        if lost_from and lost_to and lost_to > lost_from:
            ax.axvspan(lost_from, lost_to, color="#ef9a9a", alpha=0.35, linewidth=0)
    ax.set_ylabel("iteration")
    ax.set_xlabel("wall time (UTC)")
    ax.set_title("iteration reached over wall time", loc="left")
    ax.legend(handles=[Patch(color="#ef9a9a", alpha=0.35, label="time lost (no progress)")],
              loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=10)
    ax.xaxis.set_major_formatter(_fmt("%m-%d %H:%M:%S"))
    ax.grid(alpha=0.3)


STYLE = """
body { font: 14px system-ui, sans-serif; margin: 24px; color: #222; }
.timeline { position: relative; height: 42px; background: #eceff1; border-radius: 4px; \
margin: 12px 0 4px; }
.seg { position: absolute; top: 4px; height: 34px; color: #fff; font-size: 12px; overflow: hidden;
        white-space: nowrap; border-radius: 3px; padding: 0 4px; line-height: 34px; \
box-sizing: border-box;
        border-right: 2px solid #fff; }
table { border-collapse: collapse; margin: 8px 0 20px; }
td, th { border: 1px solid #cfd8dc; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #eceff1; } pre { background: #f5f5f5; padding: 8px; white-space: pre-wrap; }
img { max-width: 100%; border: 1px solid #cfd8dc; }
"""


def render_html(state: RunState, now: datetime, png: bytes) -> str:
    e = html.escape
    segs = [s for s in state.segments if s.submitted_at]
    m = run_metrics(state, now)
    lost, _ = lost_text(m)
    drains = "\n".join(drain_commands(state, now))
    ettr = f"{m['ettr']:.1%}" if m["ettr"] is not None else "-"
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>run {e(state.run)}</title>
<style>{STYLE}</style></head><body>
<h1>run {e(state.run)}: {e(state.status.value)}</h1>
<p>{e(state.stop_reason)}</p>
<p>iteration {state.best_iteration()}\
{f" of {state.target_iteration}" if state.target_iteration else ""};
effective training time {ettr} of {human(m['wall_s'])} wall time; time lost: {e(lost)}</p>
<h2>Timeline</h2>
<div class="timeline" id="timeline">{_timeline_bars(segs, now)}</div>
<p>Hover over a segment for its job, nodes, culprit and evidence.</p>
<img alt="timeline and iterations" src="data:image/png;base64,{base64.b64encode(png).decode()}">
<h2>Segments</h2>
<table><tr><th>seg</th><th>job</th><th>nodes</th><th>excluded</th><th>iterations</th><th>cause</th>
<th>culprit</th><th>action</th><th>reason</th></tr>{_segment_rows(segs)}</table>
{restarts_html(state)}
{_slow_html(state)}
<h2>Blacklist</h2>
<table><tr><th>node</th><th>cause</th><th>strikes</th><th>expires</th><th>evidence</th></tr>\
{_blacklist_rows(state)}</table>
{f"<p>For an admin:</p><pre>{e(drains)}</pre>" if drains else ""}
</body></html>
"""


def _timeline_bars(segs: list[SegmentRecord], now: datetime) -> str:
    """One positioned <div> per submitted segment, with hover text; widths are shares of the whole
    run."""
    e = html.escape
    t0 = segs[0].submitted_at if segs else now
    assert t0 is not None
    total = max((max((_end(s, now) for s in segs), default=now) - t0).total_seconds(), 1.0)
    bars = []
    for s in segs:
        assert s.submitted_at is not None
        left = (s.submitted_at - t0).total_seconds() / total * 100
        width = max((_end(s, now) - s.submitted_at).total_seconds() / total * 100, 0.4)
        bars.append(f'<div class="seg" data-index="{s.index}" title="{e(_tooltip(s))}" '
                    f'style="left:{left:.3f}%;width:{width:.3f}%;background:'
                    f'{COLOURS.get(_cause(s), "#9e9e9e")}">'
                    f"{s.index} {e(_cause(s))}</div>")
    return "".join(bars)


def _tooltip(s: SegmentRecord) -> str:
    ev = next((x for x in s.evidence if x.role == Role.ROOT), None)
    job = job_cell(s) if s.in_job_of is not None else f"job {s.job_id}"
    return (f"segment {s.index} {job}\nnodes {','.join(s.nodes)}\nexcluded "
            f"{','.join(s.excluded) or '-'}\niterations {s.start_iteration}->{s.end_iteration}\n"
            f"cause {_cause(s)}\nculprit {','.join(s.culprit_nodes) or '-'}\naction "
            f"{s.action.value if s.action else '-'}"
            + (f"\nevidence {ev.node}: {ev.text[:200]}" if ev else ""))


def _segment_rows(segs: list[SegmentRecord]) -> str:
    e = html.escape
    return "".join(
        f"<tr><td>{s.index}</td><td>{e(job_cell(s))}</td><td>{e(','.join(s.nodes))}</td>"
        f"<td>{e(','.join(s.excluded) or '-')}</td>"
        f"<td>{s.start_iteration}&rarr;{s.end_iteration}</td>"
        f"<td>{e(_cause(s))}</td><td>{e(','.join(s.culprit_nodes) or '-')}</td>"
        f"<td>{e(s.action.value if s.action else '-')}</td><td>{e(s.reason[:160])}</td></tr>"
        for s in segs)


def _where(r: RestartEvent) -> str:
    return f"inside job {r.job_id}" if r.in_job else f"new job {r.job_id or '-'}"


def _swaps(r: RestartEvent) -> str:
    return ', '.join(f'{b} for {a}' for a, b in zip(r.dropped, r.promoted, strict=False))


def restarts_html(state: RunState) -> str:
    """The restarts (inside the job or by a new submission, and how long each took) and the spares
    of every job that held some; nothing for a run without restarts or spares."""
    e, rows, jobs = html.escape, restarts(state), job_spares(state)
    if not rows and not jobs:
        return ""
    took = "".join(
        f"<tr><td>{r.segment}</td><td>{r.after}</td><td>{e(r.cause)}</td>"
        f"<td>{e(','.join(r.culprits) or '-')}</td><td>{e(_where(r))}</td>"
        f"<td>{e(_swaps(r) or '-')}</td>"
        f"<td>{human(r.seconds)}</td></tr>" for r in rows)
    spares = "".join(
        f"<tr><td>{e(j.job_id or '-')}</td><td>{j.submitted_by}</td><td>"
        f"{e(','.join(map(str, j.segments)))}</td><td>"
        f"{e(','.join(j.spares) or f'{j.spare_count} asked for')}</td><td>"
        f"{e(','.join(j.promoted) or '-')}</td>"
        f"<td>{e(','.join(j.free) if j.allocation else '-')}</td></tr>" for j in jobs)
    return f"""<h2>Restarts</h2>
<p>{e(summary_text(rows) or "none")}; time: from the failed segment's end to the next segment's \
first progress.</p>
<table id="restarts"><tr><th>seg</th><th>after seg</th><th>cause</th><th>culprit</th><th>where</th>
<th>spare promoted</th><th>time</th></tr>{took}</table>
<h2>Spare nodes</h2>
<table id="spares"><tr><th>job</th><th>submitted by seg</th><th>segments</th><th>spares</th>\
<th>promoted</th>
<th>free</th></tr>{spares}</table>"""


def _slow_html(state: RunState) -> str:
    """The nodes found slowing the job (none: nothing)."""
    e = html.escape
    rows = "".join(f"<tr><td>{s.index}</td><td>{e(f.node)}</td><td>{f.factor:.2f}x</td>"
                   f"<td>{e(f.since.isoformat(timespec='seconds'))}</td>"
                   f"<td>{e(f.action)}</td><td>{e(f.evidence[:300])}</td></tr>"
                   for s in state.segments for f in s.slow_nodes)
    return ("<h2>Slow nodes</h2>\n<table id=\"slow\"><tr><th>seg</th><th>node</th><th>slowdown</th>"
            f"<th>since</th><th>action</th><th>evidence</th></tr>{rows}</table>" if rows else "")


def _blacklist_rows(state: RunState) -> str:
    e = html.escape
    return "".join(f"<tr><td>{e(b.node)}</td><td>{e(b.cause.value)}</td><td>{b.strikes}</td>"
                   f"<td>{e(b.expires.isoformat(timespec='minutes'))}</td>"
                   f"<td>{e(b.evidence[:200])}</td></tr>" for b in state.blacklist.entries)


def write_report(state: RunState, now: datetime, out_dir: Path) -> tuple[Path, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    png = render_png(state, now)
    # a tampered name stays in out_dir
    stem = re.sub(r"[^A-Za-z0-9_.+-]", "_", state.run).lstrip(".") or "run"
    png_path, html_path = out_dir / f"{stem}-report.png", out_dir / f"{stem}-report.html"
    png_path.write_bytes(png)
    html_path.write_text(render_html(state, now, png), encoding="utf-8")
    return html_path, png_path


def _num(t: datetime) -> float:
    import matplotlib.dates as mdates

    return float(mdates.date2num(t))  # type: ignore[no-untyped-call]


def _fmt(pattern: str) -> Any:
    import matplotlib.dates as mdates

    return mdates.DateFormatter(pattern)  # type: ignore[no-untyped-call]
