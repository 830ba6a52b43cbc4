"""Plots for the reports (matplotlib, headless). Plain data in, a figure (``*_figure``) or a PNG file out.

Every figure has a title that says what it shows, axis labels with units, and a legend named after what differs
(the arms, the runs). Time panels leave the warm-up iterations out (one 7-second first step would flatten a
400-millisecond steady state) and say so in their title. The ``*_figure`` builders return the open figure so tests
can read titles and labels from matplotlib's objects; :func:`save` writes and closes it.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

Points = Sequence[tuple[float, float]]


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
                ax.plot(xs, ys, marker=".", label=name)
        for name, points in panel.references.items():
            if points:
                xs, ys = zip(*points, strict=True)
                ax.plot(xs, ys, linestyle="--", color="0.4", label=name)
        ax.set_ylabel(panel.ylabel)
        ax.set_title(panel.ylabel.split(" (")[0] + (f" — {panel.note}" if panel.note else ""), fontsize="small")
        ax.grid(True, alpha=0.3)
        if len(panel.series) + len(panel.references) > 1:
            ax.legend(fontsize="small")
    axes[-1, 0].set_xlabel(xlabel)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def bar_figure(
    title: str,
    ylabel: str,
    groups: Sequence[str],
    bars: Mapping[str, Sequence[float | None]],
    errors: Mapping[str, Sequence[tuple[float, float] | None]] | None = None,
    xlabel: str = "",
) -> Any:
    """Grouped bars: one group per label, one bar per series (None = missing, drawn as nothing). ``errors`` gives a
    (low, high) interval per bar, drawn as an asymmetric error bar around the bar's value."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(6.0, 1.8 * len(groups) * max(1, len(bars)) / 2), 4.5))
    width = 0.8 / max(1, len(bars))
    for i, (name, values) in enumerate(bars.items()):
        xs = [g + i * width for g in range(len(groups))]
        heights = [v if v is not None else 0.0 for v in values]
        yerr = None
        if errors and name in errors:
            lows, highs = [], []
            for v, interval in zip(values, errors[name], strict=True):
                lo, hi = interval if interval is not None and v is not None else (v or 0.0, v or 0.0)
                lows.append(max(0.0, (v or 0.0) - lo))
                highs.append(max(0.0, hi - (v or 0.0)))
            yerr = [lows, highs]
        ax.bar(xs, heights, width, label=name, yerr=yerr, capsize=4 if yerr else 0)
    ax.set_xticks([g + width * (len(bars) - 1) / 2 for g in range(len(groups))], groups, rotation=15, ha="right")
    ax.set_ylabel(ylabel)
    if xlabel:
        ax.set_xlabel(xlabel)
    ax.set_title(title)
    ax.legend(fontsize="small")
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    return fig


def save(fig: Any, path: Path, dpi: int = 100) -> Path:
    plt = _pyplot()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path


def series_plot(path: Path, title: str, panels: Sequence[tuple[str, Mapping[str, Points]] | Panel], xlabel: str):
    """:func:`series_figure`, written to ``path``; a (ylabel, series) pair is a panel without a note."""
    as_panels = [p if isinstance(p, Panel) else Panel(p[0], p[1]) for p in panels]
    return save(series_figure(title, as_panels, xlabel), path)


def bar_plot(path: Path, title: str, ylabel: str, groups: Sequence[str], bars, errors=None, xlabel: str = ""):
    return save(bar_figure(title, ylabel, groups, bars, errors, xlabel), path)


def inline_png(path: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode()
