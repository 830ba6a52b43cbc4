"""Plots for the reports (matplotlib, headless). Plain data in, a figure (``*_figure``) or a PNG file out.

Every figure has a title that says what it shows, axis labels with units, and a legend named after what differs
(the arms, the runs). Time panels leave the warm-up iterations out (one 7-second first step would flatten a
400-millisecond steady state) and say so in their title. The ``*_figure`` builders return the open figure so tests
can read titles and labels from matplotlib's objects; :func:`save` writes and closes it.
"""

from __future__ import annotations

import base64
import io
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .atomic import write_atomic

Points = Sequence[tuple[float, float]]
# Axes titles sit just above their axes (where matplotlib puts them when nothing is drawn above an axes, as in every
# figure here): a given position spares matplotlib's search for one, a tenth of a figure's drawing time.
TITLE_Y = 1.0


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


@dataclass
class Panel:
    """One stacked panel: a y label with its unit, named series of (x, y) points, an optional note (under the
    panel title) and dashed reference series (a golden curve)."""

    ylabel: str
    series: Mapping[str, Points]
    note: str | None = None
    references: Mapping[str, Points] = field(default_factory=dict)
    styles: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # per series: matplotlib line keywords


def time_panel(ylabel: str, series: Mapping[str, Points], warmup: int) -> Panel:
    """A panel of per-iteration values without the first ``warmup`` iterations (x <= warmup); the note gives the
    range of the values left out, so the reader knows they exist."""
    kept = {name: [(x, y) for x, y in pts if x > warmup] for name, pts in series.items()}
    dropped = [y for pts in series.values() for x, y in pts if x <= warmup]
    note = None
    if dropped:
        unit = ylabel[ylabel.rfind("(") + 1 : -1] if ylabel.endswith(")") and "(" in ylabel else ""
        span = f"{min(dropped):,.1f}-{max(dropped):,.1f} {unit}".strip()
        note = f"warm-up iterations 1-{warmup} not shown ({span})"
    return Panel(ylabel, kept, note)


def series_figure(title: str, panels: Sequence[Panel], xlabel: str) -> Any:
    """Panels stacked vertically on a shared x axis."""
    plt = _pyplot()
    fig, axes = plt.subplots(len(panels), 1, figsize=(9, 3.2 * len(panels)), sharex=True, squeeze=False)
    for ax, panel in zip(axes[:, 0], panels, strict=True):
        for name, points in panel.series.items():
            if points:
                xs, ys = zip(*points, strict=True)
                ax.plot(xs, ys, **{"marker": ".", "label": name, **panel.styles.get(name, {})})
        for name, points in panel.references.items():
            if points:
                xs, ys = zip(*points, strict=True)
                ax.plot(xs, ys, linestyle="--", color="0.4", label=name)
        ax.set_ylabel(panel.ylabel)
        ax.set_title(panel.ylabel.split(" (")[0] + (f" — {panel.note}" if panel.note else ""), fontsize="small",
                     y=TITLE_Y)
        ax.grid(True, alpha=0.3)
        if len([n for n in panel.series if not n.startswith("_")]) + len(panel.references) > 1:
            ax.legend(fontsize="small")
    axes[-1, 0].set_xlabel(xlabel)
    fig.suptitle(title)
    fig.tight_layout()
    fig.set_layout_engine(None)  # else a placeholder engine is left, and savefig lays the figure out again
    return fig


@dataclass
class RangeRow:
    """One horizontal row of :func:`range_figure`: a label, a middle value with its (low, high) spread, the values
    it summarises (drawn as dots), whether it is the best of its group, and a note for a row without a value (why
    it has none: a failure)."""

    label: str
    value: float | None
    spread: tuple[float, float] | None = None
    points: Sequence[float] = ()
    best: bool = False
    note: str | None = None
    group: str = ""


def range_figure(title: str, xlabel: str, rows: Sequence[RangeRow], best_label: str = "best of its group",
                 spread_label: str = "p10-p90 spread", points_label: str = "each timed value",
                 other_label: str = "other", bars: bool = True) -> Any:
    """One labelled row per item, top to bottom in the given order, labels on the y axis (they never overlap,
    however many and however long): a bar to the middle value, an error bar for the spread, a dot per value. A row
    without a value shows its note instead. Groups (``RangeRow.group``) are separated by a line.

    ``bars=False`` draws a dot at the middle value instead of a bar from 0 and starts the axis near the data, so a
    1 % difference is not lost against the whole bar; the axis label then says where the axis starts."""
    plt = _pyplot()
    n = max(1, len(rows))
    fig, ax = plt.subplots(figsize=(10.5, 1.3 + 0.5 * n))
    ys = list(range(n))[::-1]
    right = max([r.spread[1] for r in rows if r.spread] + [max(r.points) for r in rows if r.points]
                + [r.value for r in rows if r.value is not None] + [1.0])
    left = 0.0
    if not bars:
        low = min([r.spread[0] for r in rows if r.spread] + [min(r.points) for r in rows if r.points]
                  + [r.value for r in rows if r.value is not None], default=0.0)
        right = max([r.spread[1] for r in rows if r.spread] + [max(r.points) for r in rows if r.points]
                    + [r.value for r in rows if r.value is not None], default=1.0)
        pad = max(right - low, abs(right) * 0.01, 1e-9) * 0.08
        left = max(0.0, low - pad)
        right += pad
    for y, row in zip(ys, rows, strict=False):
        if row.value is None:
            note = textwrap.shorten(row.note or "no value", 150, placeholder=" ...")
            ax.text(left + (right - left) * 0.01, y, textwrap.fill(note, 75), va="center", ha="left",
                    fontsize="small", color="#a00000")
            continue
        if bars:
            ax.barh(y, row.value, height=0.5, color="#76b900" if row.best else "#8da9c4",
                    label=best_label if row.best else other_label)
        else:
            ax.plot(row.value, y, "o", markersize=9, zorder=5, color="#3c8d00" if row.best else "#3b6a99",
                    label=best_label if row.best else other_label)
        if row.spread is not None:
            lo, hi = row.spread
            ax.errorbar(row.value, y, xerr=[[max(0.0, row.value - lo)], [max(0.0, hi - row.value)]], fmt="none",
                        ecolor="black", elinewidth=2, capsize=6, zorder=4, label=spread_label)
        if row.points:
            ax.plot(list(row.points), [y - 0.37] * len(row.points), "|", color="0.15", markersize=7, alpha=0.6,
                    zorder=3, label=points_label)
    for i in range(1, len(rows)):
        if rows[i].group != rows[i - 1].group:
            ax.axhline(ys[i] + 0.5, color="0.5", linewidth=0.8, linestyle="--")
    ax.set_yticks(ys, [_tick(r.label) for r in rows], fontsize="small")
    ax.set_ylim(-0.6, n - 0.4)
    if bars:
        ax.set_xlim(0, right * 1.08)
        ax.set_xlabel(xlabel)
    else:
        ax.set_xlim(left, right)
        ax.set_xlabel(xlabel + (f"; the axis starts at {left:,.4g}, not at 0" if left > 0 else ""))
    ax.set_title(title, y=TITLE_Y)
    ax.grid(True, axis="x", alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles, strict=True))
    if unique:
        ax.legend(unique.values(), unique.keys(), fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.set_layout_engine(None)  # else a placeholder engine is left, and savefig lays the figure out again
    return fig


# A y tick label's line beyond this is shortened (" ..."): a cell labelled by twenty differing settings would leave no
# room for the axes (the tables under the figures hold every label in full).
TICK_LINE = 70


def _tick(label: str) -> str:
    return "\n".join(textwrap.shorten(line, TICK_LINE, placeholder=" ...") if len(line) > TICK_LINE else line
                     for line in label.split("\n"))


LEVEL_COLOURS = {"ok": "#3c8d00", "warn": "#c98a00", "bad": "#b00000", "none": "#555555"}


@dataclass
class ChangeRow:
    """One row of :func:`change_figure`: a change (%) with its interval, coloured by what it means (``level``: ok
    for a winner, warn for within noise, bad for not comparable); ``note`` replaces a missing change."""

    label: str
    change: float | None
    interval: tuple[float, float] | None = None
    level: str = "none"
    note: str | None = None


def change_figure(title: str, xlabel: str, rows: Sequence[ChangeRow]) -> Any:
    """A forest plot: one row per comparison, a dot at the change, a whisker for its interval, a line at 0 (no
    change). Rows whose interval crosses 0 are within noise at a glance."""
    plt = _pyplot()
    n = max(1, len(rows))
    fig, ax = plt.subplots(figsize=(10.5, 1.5 + 0.55 * n))
    ys = list(range(n))[::-1]
    spans = [abs(v) for r in rows for v in ([r.change] if r.change is not None else []) + list(r.interval or ())]
    reach = max([*spans, 1.0]) * 1.25
    for y, row in zip(ys, rows, strict=False):
        colour = LEVEL_COLOURS.get(row.level, "#555555")
        if row.change is None:
            note = textwrap.shorten(row.note or "no change", 150, placeholder=" ...")
            ax.text(-reach * 0.97, y, textwrap.fill(note, 80), va="center", ha="left", fontsize="small",
                    color=LEVEL_COLOURS["bad"])
            continue
        if row.interval is not None:
            lo, hi = row.interval
            ax.errorbar(row.change, y, xerr=[[max(0.0, row.change - lo)], [max(0.0, hi - row.change)]], fmt="o",
                        color=colour, ecolor=colour, elinewidth=2.5, capsize=6, markersize=8)
        else:
            ax.plot(row.change, y, "o", color=colour, markersize=8)
        ax.annotate(f"{row.change:+.1f} %", (row.change, y), textcoords="offset points", xytext=(0, 9),
                    ha="center", fontsize="small", color=colour)
    ax.axvline(0.0, color="black", linewidth=1)
    meaning = {"ok": "winner: interval excludes 0", "warn": "no winner: interval includes 0", "none": "tie"}
    shown = [level for level in meaning if any(r.level == level and r.change is not None for r in rows)]
    if shown:
        from matplotlib.lines import Line2D

        ax.legend([Line2D([], [], color=LEVEL_COLOURS[lv], marker="o", linewidth=2.5) for lv in shown],
                  [meaning[lv] for lv in shown], fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.set_yticks(ys, [_tick(r.label) for r in rows], fontsize="small")
    ax.set_ylim(-0.8, n - 0.2)
    ax.set_xlim(-reach, reach)
    ax.set_xlabel(xlabel)
    ax.set_title(title, y=TITLE_Y)
    ax.grid(True, axis="x", alpha=0.3)
    fig.tight_layout()
    fig.set_layout_engine(None)  # else a placeholder engine is left, and savefig lays the figure out again
    return fig


def save(fig: Any, path: Path, dpi: int = 100) -> Path:
    """The figure as a PNG at ``path``, rendered in memory and written by the one writer (atomic.py)."""
    plt = _pyplot()
    buf = io.BytesIO()
    try:
        fig.savefig(buf, dpi=dpi, format="png")
    finally:
        plt.close(fig)
    return write_atomic(path, buf.getvalue())


def series_plot(path: Path, title: str, panels: Sequence[tuple[str, Mapping[str, Points]] | Panel], xlabel: str):
    """:func:`series_figure`, written to ``path``; a (ylabel, series) pair is a panel without a note."""
    as_panels = [p if isinstance(p, Panel) else Panel(p[0], p[1]) for p in panels]
    return save(series_figure(title, as_panels, xlabel), path)


def inline_png(path: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode()
