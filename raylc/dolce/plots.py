"""Figures of DOLCE results (matplotlib, Agg backend, PNG).

* :func:`plot_categories` - per (task, subset) stacked bars of the focus categories I-V,
  sorted by the share of Categories III-V among COW or PIG peers (paper Figure 2);
* :func:`plot_lambda_k` - the estimated (lambda, k) of every problem on the lambda-k plane,
  one panel per (task, subset), with the exponential candidates as ticks and lambda = 0
  (Category I) visible (paper Figure 11);
* :func:`plot_sensitivity` - Spearman rho(lambda) and rho(k) per setting of each
  sensitivity experiment (Section 6, Appendix K.1 / K.4; Figures 12, 13 and 17).

Each function takes frames and an output path, writes a PNG and returns the path.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl

from raylc.dolce.categories import CATEGORIES
from raylc.io.figures import pyplot, save_figure

plt = pyplot()

__all__ = ["CATEGORY_COLORS", "exponential_ticks", "plot_categories", "plot_category_shares_by_run", "plot_lambda_k",
           "plot_sensitivity"]

#: One colour per category I .. V (retrieval-focused III in green, holistic V in red).
CATEGORY_COLORS = {"I": "#9e9e9e", "II": "#80b1d3", "III": "#4daf4a", "IV": "#fdb462", "V": "#e41a1c"}


def exponential_ticks(max_value: float) -> list[int]:
    """0, 1, 2, 5, 10, 20, 50, ... up to the first value >= ``max_value`` (Section 3.4)."""
    out, scale = [0], 1
    while True:
        for m in (1, 2, 5):
            out.append(m * scale)
            if m * scale >= max_value:
                return out
        scale *= 10


def _checked(frame: pl.DataFrame, name: str, need: list[str]) -> pl.DataFrame:
    """``frame`` with the ``need`` columns checked, non-empty, and ``subset`` defaulting to ``task``."""
    missing = [c for c in need if c not in frame.columns]
    if missing:
        raise ValueError(f"{name} frame is missing column(s): {', '.join(missing)}")
    if frame.height == 0:
        raise ValueError(f"{name} frame is empty")
    return frame if "subset" in frame.columns else frame.with_columns(subset=pl.col("task"))


def _label(task: str, subset: str) -> str:
    return subset if subset and subset != task else task


def category_bar_order(tasks: pl.DataFrame, scenario: str) -> pl.DataFrame:
    """The (task, subset) rows of one scenario in Figure 2's order, bottom bar first: by the
    share of Categories III-V (``focus``) ascending, so the largest is drawn at the top."""
    focus = pl.sum_horizontal(*(pl.col(f"share_{c}").fill_null(0.0) for c in ("III", "IV", "V")))
    return (tasks.filter(pl.col("scenario") == scenario).with_columns(focus=focus)
            .sort(["focus", "task", "subset"], descending=[False, True, True]))


def plot_categories(tasks: pl.DataFrame, path) -> Path:
    """Stacked horizontal bars of the category shares I-V per (task, subset) (Figure 2).

    ``tasks`` is the tasks frame of :func:`raylc.dolce.fit.fit_observations` (columns task,
    subset (optional), scenario, share_I .. share_V). One row of panels per scenario (COW, PIG);
    bars are sorted by share_III + share_IV + share_V, the largest at the top, and show
    percentages. With share_c_lo / share_c_hi a panel beside the bars draws each share as a dot
    with its 95% interval as a whisker (:mod:`raylc.dolce.shares`), one line per (bar, category).
    """
    df = _checked(tasks, "tasks", ["task", "scenario", *(f"share_{c}" for c in CATEGORIES)])
    scenarios = [s for s in ("COW", "PIG") if s in set(df["scenario"].to_list())] or sorted(set(df["scenario"]))
    heights = [max(1, df.filter(pl.col("scenario") == s).height) for s in scenarios]
    whiskers = all(f"share_{c}_lo" in df.columns and f"share_{c}_hi" in df.columns for c in CATEGORIES)
    fig, axes = plt.subplots(
        len(scenarios), 2 if whiskers else 1, figsize=(12 if whiskers else 8,
                                                       1.2 + 0.45 * sum(heights) + 0.6 * len(scenarios)),
        gridspec_kw={"height_ratios": heights, **({"width_ratios": [3, 2]} if whiskers else {})},
        squeeze=False, layout="constrained",
    )
    for row, scen in zip(axes, scenarios):
        ax = row[0]
        part = category_bar_order(df, scen)
        labels = [_label(t, s) for t, s in zip(part["task"], part["subset"])]
        if "n_problems" in part.columns:  # n on every bar: a bar of one problem is not a 100% share
            labels = [f"{lab} (n={n})" for lab, n in zip(labels, part["n_problems"])]
        y = np.arange(part.height)
        left = np.zeros(part.height)
        for c in CATEGORIES:
            share = 100.0 * part[f"share_{c}"].fill_null(0.0).to_numpy()
            ax.barh(y, share, left=left, color=CATEGORY_COLORS[c], edgecolor="white", linewidth=0.5,
                    label=f"Category {c}")
            for yi, (l0, w) in enumerate(zip(left, share)):
                if w >= 8:
                    ax.text(l0 + w / 2, yi, f"{w:.0f}", ha="center", va="center", fontsize=7)
            left += share
        ax.set_yticks(y, labels, fontsize=8)
        ax.set_xlim(0, 100)
        ax.set_xlabel("problems (%)")
        ax.set_title(f"{scen} scenario: sorted by Categories III-V", fontsize=9)
        if whiskers:
            _share_whiskers(row[1], part, y)
    fig.legend(*axes[0, 0].get_legend_handles_labels(), ncol=5, fontsize=7, loc="outside upper center", frameon=False)
    return save_figure(fig, path)


def _share_whiskers(ax, part: pl.DataFrame, y: np.ndarray) -> None:
    """Each bar's five shares as dots with their 95% intervals, on the bars' rows."""
    for j, c in enumerate(CATEGORIES):
        share = 100.0 * part[f"share_{c}"].to_numpy()
        lo = 100.0 * part[f"share_{c}_lo"].to_numpy()
        hi = 100.0 * part[f"share_{c}_hi"].to_numpy()
        yy = y + 0.3 - 0.15 * j  # category I at the top of the bar's row, V at the bottom
        shown = ~np.isnan(lo) & ~np.isnan(hi)
        ax.errorbar(share[shown], yy[shown], xerr=np.vstack([share - lo, hi - share])[:, shown], fmt="o", ms=3,
                    color=CATEGORY_COLORS[c], ecolor=CATEGORY_COLORS[c], elinewidth=1.2, capsize=2)
        ax.plot(share[~shown], yy[~shown], "o", ms=3, color=CATEGORY_COLORS[c])
    ax.set_yticks(y, [""] * len(y))
    ax.set_ylim(-0.5, len(y) - 0.5)
    ax.set_xlim(0, 100)
    ax.set_xlabel("share (%) and its 95% interval")
    ax.set_title("each category: share and 95% interval", fontsize=9)
    ax.grid(True, axis="x", lw=0.3, alpha=0.5)


def plot_category_shares_by_run(shares: pl.DataFrame, path) -> Path:
    """Category shares with 95% intervals per run, one panel per (task, subset): for each
    category I-V a bar per run in its model's colour (:func:`raylc.io.figures.model_colors`),
    one error bar per bar from ``share_lo``/``share_hi`` (:mod:`raylc.dolce.shares`), n in the
    legend. ``shares``: the ``categories``
    table of :func:`raylc.compare.category_shares`."""
    from raylc.io.figures import model_colors

    df = _checked(shares, "shares", ["run_id", "model", "task", "subset", "category", "n_problems", "share",
                                     "share_lo", "share_hi"])
    groups = df.select("task", "subset").unique(maintain_order=True).sort("task", "subset")
    runs = df.select("run_id", "model").unique(maintain_order=True).sort("run_id")
    colors = model_colors(runs["model"])
    cols = min(groups.height, 3)
    rows = -(-groups.height // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.6 * cols, 4.2 * rows), squeeze=False, layout="constrained")
    width = 0.8 / max(runs.height, 1)
    x = np.arange(len(CATEGORIES))
    for ax, (task, subset) in zip(axes.flat, groups.iter_rows()):
        part = df.filter((pl.col("task") == task) & (pl.col("subset") == subset))
        for i, (run_id, model) in enumerate(runs.iter_rows()):
            r = part.filter(pl.col("run_id") == run_id)
            if not r.height:
                continue
            r = r.with_columns(pl.col("category").replace_strict({c: j for j, c in enumerate(CATEGORIES)},
                                                                 return_dtype=pl.Int64).alias("pos")).sort("pos")
            share = 100 * r["share"].to_numpy()
            err = np.nan_to_num(np.vstack([share - 100 * r["share_lo"].fill_null(float("nan")).to_numpy(),
                                           100 * r["share_hi"].fill_null(float("nan")).to_numpy() - share]))
            hatch = "//" if list(runs["model"]).count(model) > 1 and i % 2 else None
            ax.bar(x[r["pos"].to_numpy()] - 0.4 + width * (i + 0.5), share, width, yerr=err, capsize=2,
                   color=colors[model], hatch=hatch, edgecolor="white", linewidth=0.4,
                   label=f"{run_id} ({model}), n={int(r['n_problems'][0])}")
        ax.set_xticks(x, [f"Cat. {c}" for c in CATEGORIES], fontsize=8)
        ax.set_ylim(0, 100)
        ax.set_ylabel("problems (%), 95% interval", fontsize=8)
        ax.set_title(_label(task, subset), fontsize=9)
        ax.legend(fontsize=8, frameon=False)
    for ax in list(axes.flat)[groups.height:]:
        ax.axis("off")
    return save_figure(fig, path)


#: the lambda-k scatter's legend markers (points squared): a marker's own size says its share
LEGEND_MARKER_SIZE = 40.0
#: the lambda-k scatter's percentage labels: readable at the report page's width
LABEL_FONTSIZE = 8.5


def _label_cells(fig, ax, lam: np.ndarray, k: np.ndarray, share: np.ndarray) -> None:
    """Label each (lambda, k) marker with its share in percent, largest first, leaving out a
    label whose box would overlap one already placed (its marker's area still shows the share)."""
    renderer = fig.canvas.get_renderer()
    placed = []
    for i in np.argsort(-share, kind="stable"):
        text = ax.annotate(f"{share[i]:.0f}%", (lam[i], k[i]), fontsize=LABEL_FONTSIZE, ha="center", va="center")
        text.set_in_layout(False)
        box = text.get_window_extent(renderer).expanded(1.1, 1.1)
        if any(box.overlaps(other) for other in placed):
            text.remove()
        else:
            placed.append(box)


def plot_lambda_k(problems: pl.DataFrame, path, *, jitter: float = 0.0, seed: int = 0, max_panels: int = 12) -> Path:
    """The lambda-k plane per (task, subset) (Figure 11).

    ``problems`` is the problems frame of :func:`raylc.dolce.fit.fit_observations` (task,
    subset (optional), lam, k, category). Axes are symmetric-log (linear below 1) so that
    lambda = 0 (Category I, closed-book / zero-shot) is drawn; ticks are the exponential
    candidates 0, 1, 2, 5, 10, ... With ``jitter = 0`` each distinct (lambda, k) is one marker
    whose area grows linearly with its share of the panel's problems (60 + 30 x the share in
    percent, in points squared), labelled in percent (largest first; a label that would overlap
    a placed one is left out), coloured by the majority category; with ``jitter > 0`` every
    problem is a point, displaced by a multiplicative factor exp(U(-jitter, jitter)) (seeded),
    coloured by its category. The legend's markers are one size, :data:`LEGEND_MARKER_SIZE`.
    At most ``max_panels`` (task, subset) panels are drawn, in sorted order.
    """
    df = _checked(problems, "problems", ["task", "lam", "k", "category"])
    groups = df.select("task", "subset").unique().sort("task", "subset").head(max_panels)
    n = groups.height
    cols = min(n, 2)  # two panels a row: at the page's width (72rem) the figure is drawn near its own size
    rows = -(-n // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.6 * cols, 5.0 * rows), squeeze=False, layout="constrained")
    rng = np.random.default_rng(seed)
    labels = []
    top = max(int(df["lam"].max()), int(df["k"].max()), 1)
    ticks = exponential_ticks(top)
    for ax, (task, subset) in zip(axes.ravel(), groups.iter_rows()):
        g = df.filter((pl.col("task") == task) & (pl.col("subset") == subset))
        if jitter > 0:
            for c in CATEGORIES:
                sub = g.filter(pl.col("category") == c)
                if sub.height == 0:
                    continue
                f = np.exp(rng.uniform(-jitter, jitter, (2, sub.height)))
                ax.scatter(sub["lam"].to_numpy() * f[0], sub["k"].to_numpy() * f[1], s=14, alpha=0.7,
                           color=CATEGORY_COLORS[c], label=c, edgecolors="none")
        else:
            cells = (
                g.group_by("lam", "k", "category").len("n")
                .sort(["lam", "k", "n", "category"], descending=[False, False, True, False])
                .group_by("lam", "k", maintain_order=True)
                .agg(pl.col("n").sum(), pl.col("category").first())
            )
            share = 100.0 * cells["n"].to_numpy() / g.height
            for c in CATEGORIES:
                m = (cells["category"] == c).to_numpy()
                if m.any():
                    ax.scatter(cells["lam"].to_numpy()[m], cells["k"].to_numpy()[m], s=60 + 30 * share[m],
                               color=CATEGORY_COLORS[c], alpha=0.75, label=c, edgecolors="black", linewidths=0.3)
        for axis in ("x", "y"):
            getattr(ax, f"set_{axis}scale")("symlog", linthresh=1.0, linscale=0.5)
        ax.set_xticks(ticks, [str(t) for t in ticks], fontsize=9)
        ax.set_yticks(ticks, [str(t) for t in ticks], fontsize=9)
        ax.minorticks_off()
        ax.set_xlim(-0.5, top * 1.6)
        ax.set_ylim(-0.5, top * 1.6)
        if jitter <= 0:
            labels.append((ax, cells["lam"].to_numpy(), cells["k"].to_numpy(), share))
        ax.set_xlabel("λ (complexity)")
        ax.set_ylabel("k (redundancy)")
        ax.set_title(f"{_label(task, subset)} (n = {g.height})", fontsize=11)
        ax.grid(True, lw=0.3, alpha=0.5)
        legend = ax.legend(fontsize=8, title="category", title_fontsize=8, loc="best")  # off the markers
        for handle in legend.legend_handles:  # one size for every entry, whatever its cell's share
            handle.set_sizes([LEGEND_MARKER_SIZE])
    for ax in axes.ravel()[n:]:
        ax.set_visible(False)
    if labels:
        fig.draw_without_rendering()  # the constrained layout fixes where each marker lands
        for args in labels:
            _label_cells(fig, *args)
    return save_figure(fig, path)


def plot_sensitivity(sensitivity: pl.DataFrame, path) -> Path:
    """Spearman rho(lambda) and rho(k) per setting (Section 6, Appendix K.1 / K.4).

    ``sensitivity`` is the frame of :func:`raylc.dolce.sensitivity.run_sensitivity` (experiment,
    setting, task, subset, rho_lam, rho_k). One row of panels per experiment (a sampling
    strategy's setting, or the binarization threshold), left rho(lambda), right rho(k); one
    line per (task, subset).
    NaN values (a constant side, e.g. k = 1 everywhere) are drawn as hollow markers at
    rho = 0 and leave a gap in the line.
    """
    df = _checked(sensitivity, "sensitivity", ["experiment", "setting", "task", "rho_lam", "rho_k"])
    experiments = sorted(set(df["experiment"].to_list()))
    xlabels = {"take_every": "take every N (start % N == 0)", "threshold": "binarization threshold",
               "take_ip_rate": "take-ip-rate f (stride floor(f C))", "sample_rate": "sample rate r",
               "sample_ip_rate": "sample-ip rate r (probability min(1, r / C))",
               "min_length": "only lengths C >= setting", "max_length": "only lengths C <= setting"}
    fig, axes = plt.subplots(
        len(experiments), 2, figsize=(10, 3.4 * len(experiments)), squeeze=False, layout="constrained"
    )
    for row, exp in zip(axes, experiments):
        part = df.filter(pl.col("experiment") == exp)
        for ax, col, name in zip(row, ("rho_lam", "rho_k"), (r"$\rho(\lambda)$", r"$\rho(k)$")):
            has_nan = False
            for (task, subset), g in part.sort("setting").group_by("task", "subset", maintain_order=True):
                x = g["setting"].to_numpy()
                y = g[col].fill_null(float("nan")).to_numpy()
                line = ax.plot(x, y, marker="o", ms=4, lw=1.2, label=_label(task, subset))[0]
                nan = np.isnan(y)
                if nan.any():
                    ax.scatter(x[nan], np.zeros(nan.sum()), facecolors="none", edgecolors=line.get_color(), s=30)
                    has_nan = True
            ax.set_ylim(-1.05, 1.05)
            if has_nan:
                ax.text(0.01, 0.02, "hollow at 0: NaN (a side is constant)", transform=ax.transAxes, fontsize=7,
                        color="grey")
            ax.axhline(0.9, color="grey", lw=0.6, ls="--")
            ax.set_xlabel(xlabels.get(exp, exp))
            ax.set_ylabel(name)
            ax.set_title(f"{exp}: {name} vs reference", fontsize=9)
            if exp == "take_every":
                ax.set_xscale("log")
                ticks = sorted(set(part["setting"].to_list()))
                ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
                ax.minorticks_off()
            ax.grid(True, lw=0.3, alpha=0.5)
        row[1].legend(fontsize=7, loc="lower left")
    return save_figure(fig, path)
