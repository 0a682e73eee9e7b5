"""PNG charts of the gate commands (matplotlib, imported only here, headless Agg).

matplotlib is an optional dependency: `pip install 'genobs[plot]'`."""

from __future__ import annotations

from pathlib import Path

INSTALL_HINT = "--plot needs matplotlib: pip install 'genobs[plot]' (or pip install matplotlib)"


class PlotUnavailable(Exception):
    pass


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise PlotUnavailable(INSTALL_HINT) from None
    matplotlib.use("Agg")  # no display in CI
    import matplotlib.pyplot as plt

    return plt


def sweep_chart(
    path: Path,
    concurrency: list[float],
    system: list[float | None],
    per_user: list[float | None],
    threshold: float | None,
    threshold_label: str,
    title: str,
) -> None:
    """System output tok/s (left axis) and output tok/s/user (right axis) against concurrency."""
    plt = _pyplot()
    fig, left = plt.subplots(figsize=(8, 4.8), dpi=100)
    right = left.twinx()
    xs = [c for c, v in zip(concurrency, system) if v is not None]
    left.plot(xs, [v for v in system if v is not None], "o-", color="tab:blue", label="system output tok/s")
    us = [(c, v) for c, v in zip(concurrency, per_user) if v is not None]
    right.plot([c for c, _ in us], [v for _, v in us], "s-", color="tab:orange", label="output tok/s/user")
    if threshold is not None:
        right.axhline(threshold, color="tab:red", linestyle="--", linewidth=1.2, label=threshold_label)
    if concurrency and max(concurrency) / max(min(concurrency), 1e-9) >= 8:
        left.set_xscale("log", base=2)
    left.set_xticks(concurrency)
    left.set_xticklabels([f"{c:g}" for c in concurrency])
    left.set_xlabel("concurrency (sessions)")
    left.set_ylabel("system output tok/s (all sessions)", color="tab:blue")
    right.set_ylabel("output tok/s per user", color="tab:orange")
    left.set_ylim(bottom=0)
    top = max([v for _, v in us] + ([threshold] if threshold is not None else []), default=1.0)
    right.set_ylim(0, top * 1.15)
    left.grid(True, alpha=0.3)
    handles = left.get_legend_handles_labels()[0] + right.get_legend_handles_labels()[0]
    labels = left.get_legend_handles_labels()[1] + right.get_legend_handles_labels()[1]
    left.legend(handles, labels, loc="upper center", fontsize=8, framealpha=0.9)
    left.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, metadata={"Software": None})
    plt.close(fig)


def before_after_chart(path: Path, rows: list[tuple[str, float, float, bool]], title: str) -> None:
    """One bar pair per KPI, candidate relative to baseline (baseline = 100 %); regressions in red."""
    plt = _pyplot()
    height = max(2.5, 0.42 * len(rows) + 1.2)
    fig, ax = plt.subplots(figsize=(8, height), dpi=100)
    names = [r[0] for r in rows][::-1]
    rel = [(r[2] / r[1] * 100.0 if r[1] else 0.0) for r in rows][::-1]
    colours = ["tab:red" if r[3] else "tab:green" for r in rows][::-1]
    ax.barh(names, rel, color=colours, alpha=0.8, label="candidate")
    ax.axvline(100, color="black", linewidth=1, label="baseline = 100 %")
    for y, v in enumerate(rel):
        ax.text(v, y, f" {v:.0f} %", va="center", fontsize=7)
    ax.set_xlabel("candidate as % of baseline (red: regression beyond threshold or tolerance)")
    ax.tick_params(axis="y", labelsize=8)
    ax.set_title(title, fontsize=10)
    ax.set_xlim(0, max(rel + [100]) * 1.2)
    fig.tight_layout()
    fig.savefig(path, metadata={"Software": None})
    plt.close(fig)
