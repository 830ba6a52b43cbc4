"""Plots for the reports (matplotlib, headless). Plain data in, a PNG file out."""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from pathlib import Path


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def series_plot(
    path: Path, title: str, panels: Sequence[tuple[str, Mapping[str, Sequence[tuple[float, float]]]]], xlabel: str
) -> Path:
    """One panel per (y label, {series name: [(x, y), ...]}), stacked vertically, shared x axis."""
    plt = _pyplot()
    fig, axes = plt.subplots(len(panels), 1, figsize=(8, 3 * len(panels)), sharex=True, squeeze=False)
    for ax, (ylabel, series) in zip(axes[:, 0], panels, strict=True):
        for name, points in series.items():
            if points:
                xs, ys = zip(*points, strict=True)
                ax.plot(xs, ys, marker=".", label=name)
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
        if len(series) > 1:
            ax.legend(fontsize="small")
    axes[-1, 0].set_xlabel(xlabel)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def bar_plot(path: Path, title: str, ylabel: str, groups: Sequence[str], bars: Mapping[str, Sequence[float | None]]):
    """Grouped bars: one group per label, one bar per series (None = missing)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(groups)), 4))
    width = 0.8 / max(1, len(bars))
    for i, (name, values) in enumerate(bars.items()):
        xs = [g + i * width for g in range(len(groups))]
        ax.bar(xs, [v if v is not None else 0.0 for v in values], width, label=name)
    ax.set_xticks([g + width * (len(bars) - 1) / 2 for g in range(len(groups))], groups, rotation=20, ha="right")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize="small")
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def inline_png(path: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode()
