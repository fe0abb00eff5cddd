"""PNG figures: category bars (Figure 2), lambda-k plane (Figure 11), sensitivity (Section 6)."""

from __future__ import annotations

import struct

import numpy as np
import polars as pl
import pytest
from dolce_reference import synth_task

from raylc.dolce.fit import fit_observations
from raylc.dolce.options import FitOptions
from raylc.dolce.plots import category_bar_order, exponential_ticks, plot_categories, plot_lambda_k, plot_sensitivity
from raylc.dolce.sensitivity import run_sensitivity

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def assert_png(path, min_bytes=8_000, min_px=200):
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    assert width >= min_px and height >= min_px // 2
    assert len(data) >= min_bytes
    assert data[-12:-4] == b"\x00\x00\x00\x00IEND"
    from PIL import Image

    with Image.open(path) as img:
        img.verify()


@pytest.fixture(scope="module")
def fitted():
    obs = pl.concat([synth_task("mix", 11, 11, seed=1, stride=1), synth_task("pig", 0, 6, seed=4, stride=1),
                    synth_task("cow", 5, 0, seed=3, stride=1)])
    problems, tasks = fit_observations(obs,
                                       FitOptions(uncertainty_steps=20))  # intervals drawn; 10x cheaper than 200 steps
    sens = run_sensitivity(obs, every=(2, 5), thresholds=(0.25, 0.5, 0.75))
    return problems, tasks, sens


def test_exponential_ticks():
    assert exponential_ticks(60) == [0, 1, 2, 5, 10, 20, 50, 100]
    assert exponential_ticks(1) == [0, 1]


def test_category_bars(fitted, tmp_path):
    out = plot_categories(fitted[1], tmp_path / "sub" / "categories.png")
    assert out == tmp_path / "sub" / "categories.png"
    assert_png(out)


def test_figure_2_draws_one_interval_per_share_beside_the_bars(fitted, tmp_path, monkeypatch):
    """Issue 29 item 2: each (bar, category) share is one dot with one whisker, in a panel beside
    the stacked bars, at the stored share and interval (no error bars at segment ends)."""
    import raylc.dolce.plots as plots

    figures = []
    real = plots.save_figure
    monkeypatch.setattr(plots, "save_figure", lambda fig, *a, **kw: (figures.append(fig), real(fig, *a, **kw))[1])
    tasks = fitted[1]
    assert_png(plot_categories(tasks, tmp_path / "c.png"))
    fig = figures[0]
    bars, dots = fig.axes[0], fig.axes[1]
    assert not bars.lines and not bars.collections  # the bars carry no whiskers
    cow = category_bar_order(tasks, "COW")
    assert len(dots.containers) == 5  # one errorbar per category
    for container, c in zip(dots.containers, ("I", "II", "III", "IV", "V")):
        line, _, (whiskers,) = container.lines
        assert line.get_xdata() == pytest.approx(100 * cow[f"share_{c}"].to_numpy())
        ends = [end for seg in whiskers.get_segments() for end in (seg[0][0], seg[1][0])]  # one whisker per bar
        assert ends == pytest.approx([100 * cow[f"share_{c}_{e}"][i] for i in range(cow.height) for e in ("lo", "hi")])


def test_category_bar_order_is_figure_2s():
    shares = {"share_I": 0.0, "share_II": 0.0, "share_IV": 0.0, "share_V": 0.0}
    tasks = pl.DataFrame([
        {"task": "a", "subset": "a", "scenario": "COW", **shares, "share_III": 0.2},
        {"task": "b", "subset": "b", "scenario": "COW", **shares, "share_III": 0.9},
        {"task": "c", "subset": "c/COW", "scenario": "COW", **shares, "share_III": 0.5},
        {"task": "c", "subset": "c/PIG", "scenario": "PIG", **shares, "share_III": 1.0},
        {"task": "d", "subset": "d", "scenario": "COW", **{**shares, "share_V": 0.3}, "share_III": 0.2},
    ])
    # bottom to top: ascending share of III-V; among equal shares the first task is drawn on top
    order = category_bar_order(tasks, "COW")
    assert order["subset"].to_list() == ["a", "d", "c/COW", "b"]
    assert order["focus"].to_list() == pytest.approx([0.2, 0.5, 0.5, 0.9])
    assert category_bar_order(tasks, "PIG")["subset"].to_list() == ["c/PIG"]


def test_lambda_k_plane(fitted, tmp_path):
    problems = fitted[0]
    problems = problems.with_columns(  # one closed-book problem so that lambda = 0 is drawn
        lam=pl.when(pl.col("problem_id") == "cow-b000").then(0).otherwise(pl.col("lam")),
        category=pl.when(pl.col("problem_id") == "cow-b000").then(pl.lit("I")).otherwise(pl.col("category")),
    )
    assert_png(plot_lambda_k(problems, tmp_path / "lk.png"))
    assert_png(plot_lambda_k(problems, tmp_path / "lk_jitter.png", jitter=0.15))


def _drawn_lambda_k(problems: pl.DataFrame, tmp_path, monkeypatch):
    """:func:`plot_lambda_k` of ``problems`` (its PNG checked), and the figure it saved with a
    renderer to measure it on (saved and closed: a canvas of its own)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    import raylc.dolce.plots as plots

    figures = []
    real = plots.save_figure
    monkeypatch.setattr(plots, "save_figure", lambda fig, *a, **kw: (figures.append(fig), real(fig, *a, **kw))[1])
    assert_png(plot_lambda_k(problems, tmp_path / "lk.png"))
    return figures[0], FigureCanvasAgg(figures[0]).get_renderer()


def test_lambda_k_percent_labels_never_overlap(tmp_path, monkeypatch):
    """Neighbouring (lambda, k) cells on the symlog axes (100-130, a few pixels apart): the labels
    drawn do not overlap, the largest share keeps its label and one that would overlap is left
    out (issue 18)."""
    cells = [(lam, k) for lam in (100, 110, 120, 130) for k in (100, 110, 120, 130)] + [(1, 1)]
    rows = [(f"p{i:03d}-{j}", lam, k) for i, (lam, k) in enumerate(cells) for j in range(1 + (i == 0) * 9)]
    problems = pl.DataFrame(rows, schema=["problem_id", "lam", "k"], orient="row").with_columns(
        task=pl.lit("t"), subset=pl.lit("COW"), category=pl.lit("III"))
    fig, renderer = _drawn_lambda_k(problems, tmp_path, monkeypatch)
    ax = fig.axes[0]
    texts = [t for t in ax.texts if t.get_text().endswith("%")]
    boxes = [t.get_window_extent(renderer) for t in texts]
    assert all(not a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])
    shown = {t.get_text() for t in texts}
    assert f"{100 * 10 / len(rows):.0f}%" in shown  # the largest cell, (100, 100)
    assert 2 < len(texts) < len(cells) - 4  # labels left out; the far cell (1, 1) keeps its own
    assert any(t.xy == (1, 1) for t in texts)


def test_lambda_k_legend_markers_are_one_size_inside_the_legend(tmp_path, monkeypatch):
    """A cell holding every problem of its panel draws a marker of 3,060 points squared; its legend
    entry is drawn at one small size, inside the legend's frame, whatever the cell's share."""

    rows = [(f"a{i}", "a", 1, 1, "III") for i in range(10)]
    rows += [(f"b{i}", "b", 1, 1 + i % 2, "II" if i % 2 else "III") for i in range(10)]
    problems = pl.DataFrame(rows, schema=["problem_id", "task", "lam", "k", "category"], orient="row").with_columns(
        subset=pl.col("task"))
    fig, renderer = _drawn_lambda_k(problems, tmp_path, monkeypatch)
    for ax in fig.axes:
        legend = ax.get_legend()
        frame = legend.get_frame().get_window_extent(renderer)
        for handle in legend.legend_handles:  # each marker disc, centre and radius in pixels, within the frame
            radius = np.sqrt(handle.get_sizes()) / 2 * fig.dpi / 72
            centre = handle.get_offset_transform().transform(handle.get_offsets())
            assert (centre - radius[:, None] >= [frame.x0, frame.y0]).all(), (handle.get_sizes(), frame)
            assert (centre + radius[:, None] <= [frame.x1, frame.y1]).all(), (handle.get_sizes(), frame)


def test_sensitivity_plot(fitted, tmp_path):
    assert_png(plot_sensitivity(fitted[2], tmp_path / "sensitivity.png"))


def test_plots_reject_empty_or_incomplete_frames(fitted, tmp_path):
    with pytest.raises(ValueError, match="empty"):
        plot_categories(fitted[1].clear(), tmp_path / "x.png")
    with pytest.raises(ValueError, match="lam"):
        plot_lambda_k(fitted[0].drop("lam"), tmp_path / "x.png")
    with pytest.raises(ValueError, match="rho_k"):
        plot_sensitivity(fitted[2].drop("rho_k"), tmp_path / "x.png")
    assert not (tmp_path / "x.png").exists()
