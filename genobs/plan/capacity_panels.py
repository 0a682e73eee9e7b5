"""Dashboard rows of the capacity signals: goodput and efficiency next to
throughput, headroom (running against max_num_seqs, KV pool, trends) and GPUs."""

from __future__ import annotations

from genobs import promql as q
from genobs.plan.context import Context
from genobs.plan.dashboard import threshold_steps
from genobs.plan.model import Panel, Row, Target
from genobs.spec_capacity import Gpu
from genobs.units import parse_ratio

_WEEK = 7 * 86400


class _Sel:
    def __init__(self, ctx: Context, names: dict[str, str]):
        self.ctx, self.names = ctx, names

    def __call__(self, key: str, extra: tuple = ()) -> str:
        return q.selector(self.names[key], self.ctx.panel_matchers() + extra)

    def legend(self, text: str) -> str:
        parts = [f"{{{{{label}}}}}" for label in self.ctx.group if label not in dict(self.ctx.selector)]
        return " ".join([*parts, text])


def _wire(ctx: Context, key: str) -> str:
    """The engine's own name of a signal, as its profile writes it (panel descriptions)."""
    return ctx.catalog.name(key, ctx.version) or key


def goodput_row(ctx: Context, names: dict[str, str], objective: float | None, eff_line: float | None) -> Row | None:
    s = _Sel(ctx, names)
    panels: list[Panel] = []
    if "goodput_upper" in names:
        targets = [Target(s("finished"), s.legend("finished"))]
        for key, text in (("goodput_ttft", "within TTFT bound"), ("goodput_tpot", "within TPOT bound")):
            if key in names:
                targets.append(Target(s(key), s.legend(text)))
        targets += [
            Target(s("goodput_upper"), s.legend("goodput (upper bound)")),
            Target(s("goodput_lower"), s.legend("goodput (lower bound)")),
        ]
        panels.append(
            Panel(
                "Goodput (req/s)",
                ctx.words(
                    "Finished requests per second and those within each latency bound. {engine} has no joint "
                    "histogram of TTFT and TPOT, so goodput (within every bound and not aborted or failed) lies "
                    "between the lower and the upper bound; the gap is what the histograms cannot tell."
                ),
                "reqps",
                tuple(targets),
            )
        )
        panels.append(
            Panel(
                "Goodput vs total output (tok/s)",
                "Output tokens per second of all requests against the goodput bounds times the mean output length "
                "(the output length of good requests is not counted apart). System throughput, not per-user speed.",
                "tok/s",
                (
                    Target(s("generation_tps"), s.legend("total output")),
                    Target(s("goodput_upper_tokens"), s.legend("goodput (upper bound)")),
                    Target(s("goodput_lower_tokens"), s.legend("goodput (lower bound)")),
                ),
            )
        )
    share = []
    if "goodput_upper_ratio" in names:
        share += [
            Target(s("goodput_upper_ratio"), s.legend("upper bound")),
            Target(s("goodput_lower_ratio"), s.legend("lower bound")),
        ]
    if "goodput_gateway_ratio" in names:
        share.append(Target(s("goodput_gateway_ratio"), s.legend("gateway (exact)")))
    if share:
        panels.append(
            Panel(
                "Goodput share",
                ctx.words(
                    "Share of finished requests within every latency bound. The gateway line, where configured, "
                    "counts each request; the bounds come from {engine}'s separate histograms."
                ),
                "percentunit",
                tuple(share),
                thresholds=threshold_steps((("warning", objective),), "below") if objective is not None else (),
                max=1,
            )
        )
    if "efficiency" in names:
        panels.append(
            Panel(
                "System efficiency",
                "Finished requests against arrivals (finished + growth of running and waiting). About 1.0 is healthy; "
                "below about 0.7 the queue fills faster than the GPUs drain it. No value while the queue drains.",
                "none",
                (Target(s("efficiency"), s.legend("efficiency")),),
                thresholds=threshold_steps((("warning", eff_line),), "below") if eff_line is not None else (),
                min=0,
            )
        )
        panels.append(
            Panel(
                "Arrivals vs finished (req/s)",
                "Estimated arrivals (finished + d/dt of running and waiting requests) against finished requests.",
                "reqps",
                (Target(s("arrivals"), s.legend("arrivals")), Target(s("finished"), s.legend("finished"))),
            )
        )
    return Row("Goodput and system efficiency", tuple(panels)) if panels else None


def headroom_row(ctx: Context, names: dict[str, str], max_num_seqs: int | None, baseline: str | None) -> Row:
    s = _Sel(ctx, names)
    panels: list[Panel] = []
    if "max_num_seqs_used" in names:
        panels.append(
            Panel(
                "Running requests per engine vs max_num_seqs",
                f"Running requests of the fullest engine (data-parallel rank) against --max-num-seqs ({max_num_seqs}). "
                "At the limit new requests wait even with free KV blocks.",
                "short",
                (Target(s("running_per_engine"), s.legend("running (fullest engine)")),),
                thresholds=threshold_steps((("critical", float(max_num_seqs or 0)),), "above"),
                min=0,
            )
        )
        panels.append(
            Panel(
                "max_num_seqs used: daily peak and 7-day trend",
                "Daily peak share of max_num_seqs and its linear trend projected one week ahead (predict_linear over "
                "the last 7 days of daily peaks). Plan capacity before the projection reaches 100 %.",
                "percentunit",
                (
                    Target(s("max_num_seqs_peak"), s.legend("daily peak")),
                    Target(f"predict_linear({s('max_num_seqs_peak')}[7d], {_WEEK})", s.legend("in 7 days (trend)")),
                ),
                min=0,
            )
        )
    panels.append(
        Panel(
            "KV cache: daily peak and 7-day trend",
            "Daily peak of KV-cache usage (fullest rank) and its linear trend one week ahead. The pool size is in "
            "the KV pool panel.",
            "percentunit",
            (
                Target(s("kv_peak"), s.legend("daily peak")),
                Target(f"predict_linear({s('kv_peak')}[7d], {_WEEK})", s.legend("in 7 days (trend)")),
            ),
            min=0,
        )
    )
    if "kv_pool" in names:
        panels.append(
            Panel(
                f"KV pool ({_wire(ctx, 'cache_config_info')})",
                "KV blocks the engines allocated (num_gpu_blocks, block_size tokens each) and the VRAM share reserved "
                f"(gpu_memory_utilization), as labels of {_wire(ctx, 'cache_config_info')}: free blocks = (1 - KV usage) x "
                "num_gpu_blocks. PromQL cannot turn a label into a number; some releases report num_gpu_blocks as None.",
                "short",
                (
                    Target(
                        s("kv_pool"),
                        s.legend("{{num_gpu_blocks}} blocks x {{block_size}} tokens, gpu_memory_utilization {{gpu_memory_utilization}}"),
                    ),
                ),
            )
        )
    if baseline is not None:
        panels.append(
            Panel(
                "TTFT p99 against the baseline",
                f"TTFT p99 (1h average) now and the same hour {baseline} earlier; the ratio is what the degradation "
                "alert compares.",
                "s",
                (
                    Target(s("ttft_p99_1h", (("quantile", "=", "0.99"),)), s.legend("now (1h avg)")),
                    Target(
                        f"{s('ttft_p99_1h', (('quantile', '=', '0.99'),))} offset {baseline}",
                        s.legend(f"{baseline} earlier"),
                    ),
                ),
            )
        )
    return Row("Capacity headroom", tuple(panels))


def gpu_row(ctx: Context, names: dict[str, str], gpu: Gpu | None) -> Row | None:
    """DCGM utilisation and framebuffer per engine pod, beside the same pod's queue."""
    if gpu is None or "gpu_util_pod" not in names:
        return None
    s = _Sel(ctx, names)
    saturation = parse_ratio(gpu.saturation)
    reserved = parse_ratio(gpu.memory_utilization)
    floor = reserved * parse_ratio(gpu.reservation_floor)
    return Row(
        "GPUs (DCGM)",
        (
            Panel(
                "GPU utilisation per pod",
                ctx.words(
                    "DCGM_FI_DEV_GPU_UTIL averaged over each {engine} pod's GPUs (the share of time a kernel ran), "
                    "and the mean over the model's pods. High with a short queue is good economics; high with a "
                    "long queue (next panel, same pod) is saturation."
                ),
                "percentunit",
                (
                    Target(s("gpu_util_pod"), s.legend("{{pod}}")),
                    Target(s("gpu_util"), s.legend("mean over pods")),
                ),
                thresholds=threshold_steps((("warning", saturation),), "above"),
                min=0,
                max=1,
            ),
            Panel(
                "Waiting requests per pod",
                f"{_wire(ctx, 'requests_waiting')} summed over each pod's engines: the queue the saturation alert pairs "
                "with the same pod's GPU utilisation.",
                "short",
                (Target(s("waiting_pod"), s.legend("{{pod}}")),),
                thresholds=threshold_steps((("warning", float(gpu.waiting_per_replica)),), "above"),
                min=0,
            ),
            Panel(
                "GPU framebuffer used: emptiest GPU per pod",
                "Used / (used + free) framebuffer (DCGM_FI_DEV_FB_USED, DCGM_FI_DEV_FB_FREE) of each pod's "
                + ctx.words(
                    f"emptiest GPU. {{engine}} reserves {{hint:memory_flag}} ({reserved:g}) of every GPU at start; "
                    "far below it the engine did not take its reservation ({hint:memory_missing_causes})."
                ),
                "percentunit",
                (Target(s("gpu_fb_used_min_pod"), s.legend("{{pod}}")),),
                thresholds=threshold_steps((("warning", floor),), "below"),
                min=0,
                max=1,
            ),
            Panel(
                "GPU framebuffer used: fullest GPU per pod",
                ctx.words(
                    "The same share on each pod's fullest GPU. Near 100 % the next allocation outside {engine}'s "
                    "pool (CUDA graphs, NCCL, another process) can fail with CUDA out of memory."
                ),
                "percentunit",
                (Target(s("gpu_fb_used_max_pod"), s.legend("{{pod}}")),),
                thresholds=threshold_steps((("warning", 1 - parse_ratio(gpu.min_free)),), "above"),
                min=0,
                max=1,
            ),
        ),
        collapsed=True,  # a series per pod (and GPU)
    )
