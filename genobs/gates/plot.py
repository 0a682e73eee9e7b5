"""PNG charts of the gate commands (matplotlib, imported only here, headless Agg).

matplotlib is an optional dependency: `pip install 'genobs[plot]'`."""

from __future__ import annotations

from pathlib import Path

from genobs.errors import printable

INSTALL_HINT = "--plot needs matplotlib: pip install 'genobs[plot]' (or pip install matplotlib)"


class PlotUnavailable(Exception):
    pass


def check_path(path: Path) -> None:
    """Refuse, before any work, a --plot target that cannot become a PNG file. A symbolic link
    there is fine: the chart replaces the link (_save), never the file it points to."""
    if path.is_dir() and not path.is_symlink():
        raise PlotUnavailable(f"--plot {printable(str(path))}: is a folder; give a file name ending in .png")
    if path.suffix.lower() != ".png":
        raise PlotUnavailable(f"--plot {printable(str(path))}: the chart is a PNG; give a file name ending in .png")
    if not path.parent.is_dir():
        raise PlotUnavailable(f"--plot {printable(str(path))}: the folder {printable(str(path.parent))} does not exist")


def _plain(text: str) -> str:
    """Text as matplotlib should draw it: '$' would start mathtext (and fail on an odd count)."""
    return printable(text).replace("$", r"\$")


def check_plotting() -> None:
    """PlotUnavailable now, not after the work, when matplotlib is missing."""
    _pyplot()


def save(fig, path: Path, tight: bool = False) -> None:
    """The PNG written with writer.write_file: whole or not at all, through no symbolic link."""
    import io

    from genobs.writer import write_file

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", metadata={"Software": None}, **({"bbox_inches": "tight"} if tight else {}))
    try:
        write_file(path, buffer.getvalue())
    except OSError as exc:
        raise PlotUnavailable(f"--plot {printable(str(path))}: cannot write: {exc.strerror or exc}") from None


_save = save


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
    xlabel: str,
    system: list[float | None],
    per_user: list[float | None],
    threshold: float | None,
    threshold_label: str,
    title: str,
) -> None:
    """System output tok/s (left axis) and output tok/s/user (right axis) against the swept load
    (concurrency or request rate, named by xlabel)."""
    plt = _pyplot()
    fig, left = plt.subplots(figsize=(8, 4.8), dpi=100)
    right = left.twinx()
    xs = [c for c, v in zip(concurrency, system) if v is not None]
    left.plot(xs, [v for v in system if v is not None], "o-", color="tab:blue", label="system output tok/s")
    us = [(c, v) for c, v in zip(concurrency, per_user) if v is not None]
    right.plot([c for c, _ in us], [v for _, v in us], "s-", color="tab:orange", label="output tok/s/user")
    if threshold is not None:
        right.axhline(threshold, color="tab:red", linestyle="--", linewidth=1.2, label=_plain(threshold_label))
    if concurrency and max(concurrency) / max(min(concurrency), 1e-9) >= 8:
        left.set_xscale("log", base=2)
    left.set_xticks(concurrency)
    left.set_xticklabels([f"{c:g}" for c in concurrency])
    left.set_xlabel(xlabel)
    left.set_ylabel("system output tok/s (all sessions)", color="tab:blue")
    right.set_ylabel("output tok/s per user", color="tab:orange")
    left.set_ylim(bottom=0)
    top = max([v for _, v in us] + ([threshold] if threshold is not None else []), default=1.0)
    right.set_ylim(0, top * 1.15)
    left.grid(True, alpha=0.3)
    handles = left.get_legend_handles_labels()[0] + right.get_legend_handles_labels()[0]
    labels = left.get_legend_handles_labels()[1] + right.get_legend_handles_labels()[1]
    left.legend(handles, labels, loc="upper center", fontsize=8, framealpha=0.9)
    left.set_title(_plain(title), fontsize=10)
    fig.tight_layout()
    try:
        _save(fig, path)
    finally:
        plt.close(fig)


def before_after_chart(path: Path, rows: list[tuple[str, float, float, bool]], title: str) -> None:
    """One bar per KPI from the baseline (1×) to candidate ÷ baseline on a log scale, so a
    40× TTFT and a 10 % ITL change stay readable in one chart; failing KPIs in red."""
    plt = _pyplot()
    from matplotlib.ticker import FuncFormatter

    height = max(2.5, 0.38 * len(rows) + 1.4)
    fig, ax = plt.subplots(figsize=(9, height), dpi=100)
    names = [_plain(r[0]) for r in rows][::-1]
    ratios = [min(100.0, max(0.01, (r[2] / r[1]) if r[1] else 1.0)) for r in rows][::-1]
    colours = ["tab:red" if r[3] else "tab:green" for r in rows][::-1]
    ax.barh(names, [x - 1.0 for x in ratios], left=1.0, color=colours, alpha=0.8)
    ax.axvline(1.0, color="black", linewidth=1)
    ax.set_xscale("log")
    lo, hi = min(ratios + [0.5]), max(ratios + [2.0])
    ax.set_xlim(lo / 1.6, hi * 1.6)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}×"))
    for y, x in enumerate(ratios):
        if x <= 0.01 or x >= 100:  # clipped: label inside the bar
            ax.text(
                1.0 if x < 1 else x / 1.1,
                y,
                f" {'≤' if x < 1 else '≥'} {x:g}× ",
                va="center",
                ha="right",
                fontsize=7,
                color="white",
            )
        else:
            ax.text(
                x * (1.05 if x >= 1 else 0.95),
                y,
                f"{x:.2g}×",
                va="center",
                ha="left" if x >= 1 else "right",
                fontsize=7,
            )
    ax.set_xlabel("candidate ÷ baseline (log scale; red: fails the gate)")
    ax.tick_params(axis="y", labelsize=8)
    ax.set_title(_plain(title), fontsize=10)
    ax.grid(True, axis="x", alpha=0.3)
    fig.tight_layout()
    try:
        _save(fig, path)
    finally:
        plt.close(fig)
