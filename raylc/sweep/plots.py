"""Length plots (matplotlib, Agg backend, PNG): 100-LongBench Figures 6/7 and HELMET Figure 3.

- :func:`plot_score_vs_length`: score ``S_l`` against context length, one line per model, one panel per
  task (100-LongBench Figure 6 plots the task-averaged ``overall`` rows).
- :func:`plot_longscore_vs_length`: LongScore ``LC_l`` (percent) against length, one line per model in
  its own colour (100-LongBench Figure 7), with bootstrap bands when present.
- :func:`plot_correlation_heatmap`: Spearman matrix from :func:`raylc.sweep.longscore.task_correlation`
  (HELMET Figure 3).

Every function takes frames and an output path and returns the path of the PNG written.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import polars as pl

from raylc.io.figures import model_colors, pyplot, save_figure


def _length_label(tokens: int) -> str:
    k = tokens / 1024
    if k >= 1024 and (k / 1024).is_integer():
        return f"{int(k / 1024)}M"
    return f"{int(k)}K" if k.is_integer() else f"{tokens}"


def _grid(n: int, width: float = 4.2, height: float = 3.3, cols: int = 4, sharey: bool = False,
          layout: str | None = None):
    plt = pyplot()
    cols = min(n, cols)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols, height * rows), squeeze=False, sharey=sharey,
                             layout=layout)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    return plt, fig, list(axes.flat[:n])


#: length panels: three a row, each large enough to read at the report page's width
PANEL = {"width": 4.6, "height": 3.6, "cols": 3, "sharey": True, "layout": "constrained"}


def _figure_legend(fig, axes) -> None:
    """One legend for the whole figure, above the panels (every panel has the same models)."""
    handles, labels = {}, []
    for ax in axes:
        for h, label in zip(*ax.get_legend_handles_labels()):
            if label not in handles:
                handles[label] = h
                labels.append(label)
    fig.legend([handles[label] for label in labels], labels, loc="outside upper center",
               ncol=min(len(labels), 4), frameon=False, fontsize=9)


def _tasks(frame: pl.DataFrame, tasks: Sequence[str] | None) -> list[str]:
    if tasks is not None:
        return list(tasks)
    names = sorted(frame["task"].unique().to_list())
    return sorted(names, key=lambda t: t == "overall", reverse=True)  # overall first


def _length_axis(ax, lengths: list[int]) -> None:
    ax.set_xscale("log", base=2)
    ax.set_xticks(lengths)
    ax.set_xticklabels([_length_label(x) for x in lengths], rotation=45 if len(lengths) > 6 else 0)
    ax.minorticks_off()
    ax.set_xlabel("context length (tokens)")
    ax.grid(alpha=0.3)


def plot_score_vs_length(
    per_length: pl.DataFrame,
    path: str | Path,
    *,
    tasks: Sequence[str] | None = None,
    value: str = "score",
    title: str | None = None,
) -> Path:
    """Score against length per model (100-LongBench Figure 6); base lengths shaded when ``is_base`` exists.

    ``per_length``: ``longscore()["per_length"]`` or any frame with ``model, task, length, <value>``
    (sample-level rows are averaged).
    """
    cells = per_length.group_by("model", "task", "length").agg(pl.col(value).mean())
    if "is_base" in per_length.columns:
        cells = cells.join(per_length.group_by("task", "length").agg(pl.col("is_base").first()),
                           on=["task", "length"], how="left")
    names = _tasks(cells, tasks)
    plt, fig, axes = _grid(len(names), **PANEL)
    colors = model_colors(cells["model"].unique())
    for ax, task in zip(axes, names):
        sub = cells.filter(pl.col("task") == task).sort("length")
        for (model,), line in sub.group_by("model", maintain_order=True):
            ax.plot(line["length"], line[value], marker="o", ms=3, label=model, color=colors[model])
        if "is_base" in sub.columns:
            base = sub.filter(pl.col("is_base"))["length"]
            if base.len():
                ax.axvspan(base.min() / 2**0.25, base.max() * 2**0.25, color="0.9", zorder=0, label="base lengths")
        _length_axis(ax, sorted(sub["length"].unique().to_list()))
        ax.set_title(task)
        ax.set_ylabel(value)
    top = cells[value].max()  # one y axis from 0 for every panel (scores are in [0, 1], or percent)
    axes[0].set_ylim(0, 1.05 * (top if top is not None and top > 1 else 1.0))
    _figure_legend(fig, axes)
    return save_figure(fig, path, title)


def plot_longscore_vs_length(
    per_length: pl.DataFrame,
    path: str | Path,
    *,
    tasks: Sequence[str] | None = None,
    include_base: bool = False,
    title: str | None = None,
) -> Path:
    """LongScore ``LC_l`` (percent) against length per model (100-LongBench Figure 7).

    One colour per model (:func:`raylc.io.figures.model_colors`, as in the score figure; the
    paper shades by Base Ability instead); bootstrap intervals (``lc_lo``, ``lc_hi``) are drawn
    as bands. Only long lengths unless ``include_base``.
    """
    frame = per_length if include_base or "is_base" not in per_length.columns else per_length.filter(~pl.col("is_base"))
    names = _tasks(frame, tasks)
    plt, fig, axes = _grid(len(names), **PANEL)
    colors = model_colors(per_length["model"].unique())
    for ax, task in zip(axes, names):
        sub = frame.filter(pl.col("task") == task).sort("length")
        for (model,), line in sub.group_by("model", maintain_order=True):
            color = colors[model]
            ax.plot(line["length"], line["lc"], marker="o", ms=3, color=color, label=model)
            if "lc_lo" in line.columns and line["lc_lo"].null_count() < line.height:
                ok = line.filter(pl.col("lc_lo").is_not_null())
                ax.fill_between(ok["length"], ok["lc_lo"], ok["lc_hi"], color=color, alpha=0.15, lw=0)
        ax.axhline(0, color="0.5", lw=0.8)
        _length_axis(ax, sorted(sub["length"].unique().to_list()))
        ax.set_title(task)
        ax.set_ylabel("LongScore LC_l (%)")
    _figure_legend(fig, axes)  # one y axis for every panel, with 0 (no change from Base) drawn
    return save_figure(fig, path, title)


def blank_note(corr: pl.DataFrame) -> str | None:
    """Why some cells of a correlation panel are blank (None when none is): Spearman rho is
    undefined with fewer than 3 models scored on both sides, or when a side's score is the same
    for every model (:func:`raylc.sweep.longscore.task_correlation`)."""
    blank = corr.filter(pl.col("rho").is_null() & (pl.col("a") != pl.col("b")))
    if blank.height == 0:
        return None
    what = "every pair" if blank.height == corr.filter(pl.col("a") != pl.col("b")).height else "blank cells"
    if "n" in blank.columns and blank["n"].max() < 3:
        return f"{what}: {blank['n'].max()} model(s) scored on both sides; Spearman rho needs 3"
    return f"{what}: Spearman rho undefined (fewer than 3 models, or a score equal for every model)"


def plot_correlation_heatmap(
    corr: pl.DataFrame,
    path: str | Path,
    *,
    group: object = None,
    annotate: bool = True,
    title: str | None = None,
) -> Path:
    """Heatmap of a long correlation frame ``[<group>,] a, b, rho`` (HELMET Figure 3).

    With several groups (e.g. one matrix per length), ``group`` picks one; by default every group gets
    a panel. Null rho is left blank, and the panel says why (:func:`blank_note`).
    """
    gcol = next((c for c in corr.columns if c not in ("a", "b", "rho", "n", "slope", "intercept")), None)
    if gcol is not None and group is not None:
        corr = corr.filter(pl.col(gcol) == group)
        if corr.height == 0:
            raise ValueError(f"no correlations for {gcol} = {group!r}")
    groups = corr[gcol].unique(maintain_order=True).to_list() if gcol is not None else [None]
    size = max(3.5, 0.55 * corr["a"].n_unique() + 1.5)
    plt, fig, axes = _grid(len(groups), width=size + 0.8, height=size)
    import numpy as np

    for ax, g in zip(axes, groups):
        sub = corr if gcol is None else corr.filter(pl.col(gcol).is_null() if g is None else pl.col(gcol) == g)
        names = sub["a"].unique().sort().to_list()
        index = {n: i for i, n in enumerate(names)}
        mat = np.full((len(names), len(names)), np.nan)
        for a, b, rho in sub.select("a", "b", "rho").iter_rows():
            if rho is not None:
                mat[index[a], index[b]] = rho
        im = ax.imshow(mat, vmin=-1, vmax=1, cmap="RdBu_r")
        labels = [_length_label(n) if isinstance(n, int) else str(n) for n in names]
        ax.set_xticks(range(len(names)), labels, rotation=45, ha="right", fontsize=8)
        ax.set_yticks(range(len(names)), labels, fontsize=8)
        if annotate and len(names) <= 20:
            for i in range(len(names)):
                for j in range(len(names)):
                    if not np.isnan(mat[i, j]):
                        ax.text(j, i, f"{mat[i, j]:.2f}", ha="center", va="center", fontsize=7,
                                color="white" if abs(mat[i, j]) > 0.6 else "black")
        if gcol is not None and g is not None:
            label = _length_label(g) if gcol == "length" else g
            ax.set_title(f"{gcol} = {label}")
        note = blank_note(sub)
        if note:
            ax.set_xlabel(note, fontsize=7, wrap=True)
        fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04, label="Spearman rho")
    return save_figure(fig, path, title, tight=True)
