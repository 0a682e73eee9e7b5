"""Rule-cost benchmark: what the generated rules of specs/chat.yaml cost a real Prometheus
on a synthetic vLLM 0.33 fleet, before and after a change, against one refresh of vLLM's
official Grafana dashboard on the same server. Method: bench/README.md.

    .venv/bin/python bench/bench_rules.py                 # 10 pods (make bench)
    .venv/bin/python bench/bench_rules.py --pods 10 200 500
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import synthetic_fleet  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SPEC = "chat"
BEFORE = "08bb534"  # the rules before the restructuring
HISTORY_STEPS = 81  # 40 minutes of raw samples, 30 s apart
RECORDED_FROM = 6 * 60  # recording rules are backfilled from 6 minutes in (after one rate window)
DASHBOARD_RANGE = 30 * 60  # one dashboard refresh: the last 30 minutes
DASHBOARD_STEP = 30  # Grafana's step on a 30 s scrape interval
RATE_INTERVAL = "2m"  # Grafana's $__rate_interval for a 30 s scrape interval
MODEL = synthetic_fleet.MODEL
FLEET = 'namespace="llm-prod",job="vllm-chat"'  # the selector labels of specs/chat.yaml the fleet carries
SERIES_COST_METRIC = "vllm:time_to_first_token_seconds_bucket"  # the histogram the per-series and per-sample costs are read on
# vLLM 0.33 examples/observability/prometheus_grafana/grafana.json: every panel query
_Q = ("0.99", "0.95", "0.9", "0.5")


def _histogram_panel(metric: str) -> list[str]:
    sel = f'{{model_name="{MODEL}"}}[{RATE_INTERVAL}]'
    return [f"histogram_quantile({q}, sum by(le) (rate({metric}_bucket{sel})))" for q in _Q] + [
        f"rate({metric}_sum{sel})\n/\nrate({metric}_count{sel})"
    ]


def official_dashboard() -> list[str]:
    sel = f'{{model_name="{MODEL}"}}'
    w = f"[{RATE_INTERVAL}]"
    return [
        *_histogram_panel("vllm:e2e_request_latency_seconds"),
        f"rate(vllm:prompt_tokens_total{sel}{w})",
        f"rate(vllm:generation_tokens_total{sel}{w})",
        *_histogram_panel("vllm:inter_token_latency_seconds"),
        *_histogram_panel("vllm:request_time_per_output_token_seconds"),
        f"vllm:num_requests_running{sel}",
        f"vllm:num_requests_waiting{sel}",
        *_histogram_panel("vllm:time_to_first_token_seconds"),
        f"vllm:kv_cache_usage_perc{sel}",
        f"sum by(le) (increase(vllm:request_prompt_tokens_bucket{sel}{w}))",
        f"sum by(le) (increase(vllm:request_generation_tokens_bucket{sel}{w}))",
        f"sum by(finished_reason) (increase(vllm:request_success_total{sel}{w}))",
        f"rate(vllm:request_queue_time_seconds_sum{sel}{w})",
        f"rate(vllm:request_prefill_time_seconds_sum{sel}{w})",
        f"rate(vllm:request_decode_time_seconds_sum{sel}{w})",
        f"rate(vllm:request_max_num_generation_tokens_sum{sel}{w})",
    ]


# --- the rules under test -------------------------------------------------------------------


@dataclass
class Rule:
    group: str
    interval: float  # seconds
    name: str  # record or alert name
    expr: str
    recording: bool
    labels: dict[str, str] = field(default_factory=dict)
    level: int = 0  # dependency pass: 0 reads only exported series


@dataclass
class Variant:
    label: str
    files: dict[str, bytes]  # rule file name -> content
    dashboard: dict
    rules: list[Rule] = field(default_factory=list)


def seconds(duration: str) -> float:
    from genobs.units import prom_duration_seconds

    return prom_duration_seconds(duration)


def load_variant(label: str, files: dict[str, bytes], dashboard: dict) -> Variant:
    from genobs.promql import metric_names

    v = Variant(label, files, dashboard)
    for data in files.values():
        for g in yaml.safe_load(data)["groups"]:
            for r in g["rules"]:
                name = r.get("record") or r["alert"]
                v.rules.append(
                    Rule(
                        g["name"], seconds(g.get("interval", "1m")), name, r["expr"], "record" in r, r.get("labels", {})
                    )
                )
    records = {r.name for r in v.rules if r.recording}
    levels: dict[str, int] = {}
    for _ in range(len(v.rules)):
        for r in v.rules:
            deps = metric_names(r.expr) & records
            r.level = 1 + max((levels.get(d, 0) for d in deps), default=-1)
            if r.recording:
                levels[r.name] = max(levels.get(r.name, 0), r.level)
    return v


def variant_from_git(rev: str) -> Variant:
    def show(path: str) -> bytes:
        return subprocess.run(["git", "show", f"{rev}:{path}"], cwd=REPO, capture_output=True, check=True).stdout

    listing = subprocess.run(
        ["git", "ls-tree", "--name-only", f"{rev}:out/{SPEC}/prometheus"], cwd=REPO, capture_output=True, check=True
    ).stdout.decode()
    files = {n: show(f"out/{SPEC}/prometheus/{n}") for n in listing.split() if n.endswith(".rules.yaml")}
    dash = next(
        n
        for n in subprocess.run(
            ["git", "ls-tree", "--name-only", f"{rev}:out/{SPEC}/grafana"], cwd=REPO, capture_output=True, check=True
        )
        .stdout.decode()
        .split()
    )
    return load_variant(f"before ({rev})", files, json.loads(show(f"out/{SPEC}/grafana/{dash}")))


def variant_current() -> Variant:
    from genobs.build import render_spec

    out = render_spec(REPO / "specs" / f"{SPEC}.yaml")
    files = {Path(k).name: v for k, v in out.files.items() if k.startswith("prometheus/") and k.endswith(".rules.yaml")}
    dash = next(v for k, v in out.files.items() if k.startswith("grafana/"))
    return load_variant("after (working tree)", files, json.loads(dash))


def dashboard_queries(dash: dict) -> list[str]:
    """Panel queries with the dashboard variables as Grafana sets them on load: the fleet's one
    model, the first replica for the single-choice `instance`, every value of the others."""
    variables = {v["name"]: ".*" for v in dash.get("templating", {}).get("list", [])}
    variables.update({"model_name": MODEL, "instance": "10.0.0.1:8000"})
    out = []
    for panel in _panels(dash):
        for t in panel.get("targets", []):
            expr = t.get("expr", "")
            for name, value in variables.items():
                expr = expr.replace(f"${name}", value)
            if expr:
                out.append(expr)
    return out


def _panels(node: dict) -> list[dict]:
    """The panels a dashboard load queries: Grafana runs a collapsed row's queries only when
    someone opens that row, so its panels are left out (of both dashboards alike)."""
    found = []
    for p in node.get("panels", []) + [p for r in node.get("rows", []) for p in r.get("panels", [])]:
        found.append(p)
        if not p.get("collapsed"):
            found.extend(_panels(p))
    return found


# --- a Prometheus on loopback -----------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, data: Path, log: Path):
        self.data, self.log = data, log
        self.proc: subprocess.Popen | None = None
        self.url = ""

    def start(self) -> None:
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        config = self.data.parent / "prometheus.yml"
        config.write_text("global: {scrape_interval: 30s}\n")
        self.proc = subprocess.Popen(
            [
                shutil.which("prometheus") or "/usr/bin/prometheus",
                f"--config.file={config}",
                f"--storage.tsdb.path={self.data}",
                "--storage.tsdb.retention.time=30d",
                f"--web.listen-address=127.0.0.1:{port}",
                "--query.max-samples=2000000000",
                "--query.timeout=30m",
            ],
            stdout=subprocess.DEVNULL,
            stderr=self.log.open("ab"),
        )
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=5) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.5)
        raise SystemExit(f"prometheus did not become ready; see {self.log}")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=120)
            self.proc = None

    def blocks_loaded(self) -> int:
        with urllib.request.urlopen(f"{self.url}/metrics", timeout=60) as r:
            for line in r.read().decode().splitlines():
                if line.startswith("prometheus_tsdb_blocks_loaded "):
                    return int(float(line.split()[1]))
        return -1

    def rss_mib(self) -> float:
        assert self.proc is not None
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return 0.0

    def query(self, expr: str, at: float, range_: tuple[float, float, float] | None = None) -> tuple[float, int]:
        """(execTotalTime seconds, totalQueryableSamples) of an instant or range query."""
        params = {"query": expr, "stats": "all"}
        if range_ is None:
            path, params["time"] = "query", f"{at:.3f}"
        else:
            path = "query_range"
            params.update(start=f"{range_[0]:.3f}", end=f"{range_[1]:.3f}", step=f"{range_[2]:g}")
        body = urllib.parse.urlencode(params).encode()
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}", data=body, timeout=3600) as r:
            answer = json.load(r)
        if answer.get("status") != "success":
            raise SystemExit(f"query failed: {expr}: {answer}")
        stats = answer["data"]["stats"]
        return stats["timings"]["execTotalTime"], stats["samples"]["totalQueryableSamples"]


def timed(server: Server, expr: str, at: float, repeat: int, range_=None) -> tuple[float, int]:
    runs = [server.query(expr, at, range_) for _ in range(repeat)]
    return statistics.median(t for t, _ in runs), runs[0][1]


# --- backfill and measurement --------------------------------------------------------------------


def backfill(server: Server, variant: Variant, work: Path, start: float, end: float) -> float:
    """Recorded series for [start, end], one dependency level per pass: create-blocks-from
    rules queries the server, so a level's inputs must be loaded before it is evaluated."""
    spent = 0.0
    for level in range(max(r.level for r in variant.rules if r.recording) + 1):
        groups: dict[str, dict] = {}
        for r in variant.rules:
            if r.recording and r.level == level:
                g = groups.setdefault(r.group, {"name": r.group, "interval": f"{int(r.interval)}s", "rules": []})
                g["rules"].append({"record": r.name, "expr": r.expr, **({"labels": r.labels} if r.labels else {})})
        if not groups:
            continue
        rules_file = work / f"level{level}.rules.yaml"
        rules_file.write_text(yaml.safe_dump({"groups": list(groups.values())}, sort_keys=False))
        out = work / f"level{level}-blocks"
        out.mkdir()
        t0 = time.monotonic()
        subprocess.run(
            [
                "promtool",
                "tsdb",
                "create-blocks-from",
                "rules",
                "-q",
                f"--start={int(start)}",
                f"--end={int(end)}",
                f"--url={server.url}",
                f"--output-dir={out}",
                str(rules_file),
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        spent += time.monotonic() - t0
        server.stop()
        for block in out.iterdir():
            shutil.move(str(block), server.data / block.name)
        server.start()
    settle(server)
    return spent


def settle(server: Server, timeout: float = 900) -> int:
    """Wait until Prometheus has merged the backfilled blocks: create-blocks-from writes one
    block per group and pass, all overlapping the raw one, and Prometheus merges overlapping
    blocks about a minute after it starts. Measured before that, every query of a recorded
    series opens each of some 130 blocks (a live server keeps those hours in one head block),
    and the merge itself runs during the measurement. Returns the blocks left."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        spans = []
        for meta in server.data.glob("*/meta.json"):
            m = json.loads(meta.read_text())
            spans.append((m["minTime"], m["maxTime"]))
        spans.sort()
        overlapping = any(b[0] < a[1] for a, b in zip(spans, spans[1:]))
        if not overlapping and server.blocks_loaded() == len(spans):
            return len(spans)
        time.sleep(2)
    raise SystemExit(f"Prometheus did not merge the backfilled blocks within {timeout:.0f} s; see {server.log}")


def ranges(expr: str) -> list[tuple[float, set[str]]]:
    """(range seconds, metric names under it) of every range selector and subquery."""
    import promql_parser

    out: list[tuple[float, set[str]]] = []

    def visit(node) -> bool:
        if isinstance(node, promql_parser.MatrixSelector):
            out.append((node.range.total_seconds(), {node.vector_selector.name}))
        return True

    promql_parser.walk(promql_parser.parse(expr), visit)
    return out


@dataclass
class Measured:
    rule: Rule
    ms: float
    samples: int
    full_samples: float = 0.0
    full_ms: float = 0.0


def sample_price(server: Server, at: float, history: float, repeat: int) -> float:
    """ms one more sample in a range costs: the fleet's TTFT bucket series read over all but the
    last minute of their history, less the same series read once (their per-series part), over
    the extra samples. A long window adds samples to the series a rule already reads."""
    sel = f"{SERIES_COST_METRIC}{{{FLEET}}}"
    minutes = int(history // 60) - 1
    timed(server, f"count({sel})", at, 1)  # warm
    t1, n1 = timed(server, f"count({sel})", at, repeat)
    tr, nr = timed(server, f"count(count_over_time({sel}[{minutes}m]))", at, repeat)
    return max(0.0, (tr - t1) * 1000 / max(nr - n1, 1))


def measure(
    server: Server, variant: Variant, at: float, history: dict[str, float], repeat: int, per_sample: float
) -> list[Measured]:
    out = []
    for r in variant.rules:
        t, n = timed(server, r.expr, at, repeat)
        out.append(Measured(r, t * 1000, n))
    # a range longer than the history the series have read only part of a live window: scale
    # the samples by range / history and add the extra ones at this run's marginal cost per sample
    for m in out:
        factor = 1.0
        for length, names in ranges(m.rule.expr):
            have = min(history.get(n, history["raw"]) for n in names) if names else history["raw"]
            factor = max(factor, length / have if have < length else 1.0)
        m.full_samples = m.samples * factor
        m.full_ms = m.ms + (m.full_samples - m.samples) * per_sample
    return out


@dataclass
class Result:
    label: str
    pods: int
    groups: list[tuple[str, float, float, int, float, float]]  # name, interval, ms, samples, full samples, full ms
    dashboard: tuple[float, int]
    official: tuple[float, int]
    backfill_s: float
    rss_mib: float
    measured: list[Measured] = field(default_factory=list)
    floor: tuple[float, int, float, int] = (0.0, 0, 0.0, 0)  # interval, raw series, ms, metric names
    per_sample_ms: float = 0.0  # marginal cost of one more sample in a range (full-window estimates)
    official_runs: tuple[float, float] = (0.0, 0.0)  # ms of the official refresh before and after the rules


def raw_floor(server: Server, variant: Variant, at: float, repeat: int) -> tuple[float, int, float, int]:
    """What the fastest groups cannot go below: every exported series they read, each touched once
    by one instant `count()` (a rate() over the same series costs the same: --series-cost). The
    interval of those groups, the series, the ms and the number of metric names."""
    from genobs.promql import metric_names

    fastest = min(r.interval for r in variant.rules)
    records = {r.name for r in variant.rules if r.recording}
    names = sorted({n for r in variant.rules if r.interval == fastest for n in metric_names(r.expr)} - records)
    sel = f'{{__name__=~"{"|".join(names)}",{FLEET}}}'
    timed(server, f"count({sel})", at, 1)  # warm, as a rule evaluated every interval is
    t, n = timed(server, f"count({sel})", at, repeat)
    return fastest, n, t * 1000, len(names)


def run_variant(variant: Variant, raw_blocks: Path, work: Path, pods: int, start: int, end: int, repeat: int) -> Result:
    data = work / "data"
    shutil.copytree(raw_blocks, data, copy_function=os.link)  # blocks are immutable: hard links
    server = Server(data, work / "prometheus.log")
    server.start()
    try:
        rec_start = start + RECORDED_FROM
        spent = backfill(server, variant, work, rec_start, end)
        at = end - 1
        records = {r.name for r in variant.rules if r.recording}
        history = {"raw": at - start, **{n: at - rec_start for n in records}}
        window = (at - DASHBOARD_RANGE, at, DASHBOARD_STEP)
        # the official refresh once before the rules and once after: its time moves more than
        # theirs from one minute to the next on a shared machine; the mean of the two is compared
        first = [timed(server, q, at, repeat, window) for q in official_dashboard()]
        per_sample = sample_price(server, at, history["raw"], repeat)
        measured = measure(server, variant, at, history, repeat, per_sample)
        floor = raw_floor(server, variant, at, repeat)
        ours = [timed(server, q, at, repeat, window) for q in dashboard_queries(variant.dashboard)]
        second = [timed(server, q, at, repeat, window) for q in official_dashboard()]
        theirs = [((a[0] + b[0]) / 2, a[1]) for a, b in zip(first, second)]
        official_runs = (sum(t for t, _ in first) * 1000, sum(t for t, _ in second) * 1000)
        rss = server.rss_mib()
    finally:
        server.stop()
    groups = []
    for name in dict.fromkeys(m.rule.group for m in measured):
        ms = [m for m in measured if m.rule.group == name]
        groups.append(
            (
                name,
                ms[0].rule.interval,
                sum(m.ms for m in ms),
                sum(m.samples for m in ms),
                sum(m.full_samples for m in ms),
                sum(m.full_ms for m in ms),
            )
        )
    total = lambda xs: (sum(t for t, _ in xs) * 1000, sum(n for _, n in xs))  # noqa: E731
    return Result(
        variant.label, pods, groups, total(ours), total(theirs), spent, rss, measured, floor, per_sample, official_runs
    )


def top(r: Result, n: int) -> str:
    """The n rule expressions with the most full-window ms: where a group's time goes."""
    if n <= 0:
        return ""
    lines = [f"### the {n} most expensive rules ({r.label}, {r.pods} pods)", ""]
    lines.append("| group | rule | ms | samples | full-window ms | full-window samples | expression |")
    lines.append("|---|---|---|---|---|---|---|")
    for m in sorted(r.measured, key=lambda m: -m.full_ms)[:n]:
        expr = " ".join(m.rule.expr.split())
        expr = (expr if len(expr) <= 120 else expr[:117] + "...").replace("|", "\\|")
        lines.append(
            f"| {m.rule.group} | {m.rule.name} | {m.ms:.1f} | {m.samples:,} | {m.full_ms:.1f} | "
            f"{m.full_samples:,.0f} | `{expr}` |"
        )
    return "\n".join(lines) + "\n"


def series_cost(raw_blocks: Path, work: Path, end: int, repeat: int) -> str:
    """What one histogram's bucket read costs by window: an instant read (one sample per series)
    and rate() over 1m to 10m read the same series, so the time left at "instant" is per series."""
    data = work / "data"
    shutil.copytree(raw_blocks, data, copy_function=os.link)
    server = Server(data, work / "prometheus.log")
    server.start()
    sel = f'{SERIES_COST_METRIC}{{{FLEET},model_name=~"{MODEL}"}}'
    by = "sum by (model_name, namespace, job, le)"
    queries = [("instant", f"{by} ({sel})")] + [(w, f"{by} (rate({sel}[{w}]))") for w in ("1m", "2m", "5m", "10m")]
    lines = [f"### cost per series vs per sample: `{by} (rate({SERIES_COST_METRIC}{{...}}[w]))`", ""]
    lines += ["| window | ms | samples | series | µs per series |", "|---|---|---|---|---|"]
    try:
        series = len(
            json.load(urllib.request.urlopen(f"{server.url}/api/v1/series?match[]={urllib.parse.quote(sel)}"))["data"]
        )
        for window, expr in queries:
            timed(server, expr, end - 1, 1)  # warm the caches as a rule evaluated every interval has
            t, n = timed(server, expr, end - 1, repeat)
            lines.append(f"| {window} | {t * 1000:.1f} | {n:,} | {series:,} | {t * 1e6 / max(series, 1):.1f} |")
    finally:
        server.stop()
        shutil.rmtree(data, ignore_errors=True)
    return "\n".join(lines) + "\n"


def report(r: Result) -> str:
    lines = [f"## {r.label}, {r.pods} pods ({r.pods * synthetic_fleet.series_per_pod():,} series)", ""]
    lines.append(
        "| group | interval | ms/eval | % of interval | samples | full-window samples | full-window ms | full-window % |"
    )
    lines.append("|---|---|---|---|---|---|---|---|")
    share = full_share = 0.0
    per30 = full_per30 = 0.0
    samples30 = full_samples30 = 0.0
    for name, interval, ms, n, full_n, full_ms in r.groups:
        pct, full_pct = ms / (interval * 10), full_ms / (interval * 10)
        share += pct
        full_share += full_pct
        per30 += ms * 30 / interval
        full_per30 += full_ms * 30 / interval
        samples30 += n * 30 / interval
        full_samples30 += full_n * 30 / interval
        lines.append(
            f"| {name} | {interval:g}s | {ms:.1f} | {pct:.2f} % | {n:,} | {full_n:,.0f} | {full_ms:.1f} | {full_pct:.2f} % |"
        )
    lines.append(f"| **all groups** | | | **{share:.2f} %** | | | | **{full_share:.2f} %** |")
    off_ms, off_n = r.official
    lines += [
        "",
        f"- rules per 30 s: {per30:.1f} ms, {samples30:,.0f} samples (full windows: {full_per30:.1f} ms, "
        f"{full_samples30:,.0f} samples)",
        f"- vLLM's official dashboard, one refresh (last 30m): {off_ms:.1f} ms (mean of {r.official_runs[0]:.0f} ms "
        f"before the rules and {r.official_runs[1]:.0f} ms after), {off_n:,} samples; "
        f"rules per 30 s = {full_per30 / off_ms:.3f} of it in time, {full_samples30 / max(off_n, 1):.4f} in samples "
        "(full windows)",
        f"- full windows: samples beyond the history priced at {r.per_sample_ms * 1e6:.0f} ns each (the marginal "
        "cost of a sample, measured on the fleet's TTFT buckets)",
        f"- genobs dashboard, one refresh (last 30m): {r.dashboard[0]:.1f} ms, {r.dashboard[1]:,} samples "
        f"= 1/{off_n / max(r.dashboard[1], 1):,.0f} of the official refresh in samples",
        f"- floor of the {r.floor[0]:g}s groups: the {r.floor[1]:,} exported series of the {r.floor[3]} metrics they "
        f"read, each touched once (one instant count()): {r.floor[2]:.1f} ms = {r.floor[2] / (r.floor[0] * 10):.2f} % "
        "of their interval",
        f"- backfill of the recorded series: {r.backfill_s:.0f} s; Prometheus RSS after the run: {r.rss_mib:,.0f} MiB",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, nargs="+", default=[10], help="fleet sizes (default: 10)")
    parser.add_argument(
        "--before", default=BEFORE, help=f"git revision of the rules to compare with (default {BEFORE})"
    )
    parser.add_argument("--no-before", action="store_true", help="measure only the working tree's rules")
    parser.add_argument("--repeat", type=int, default=3, help="runs per query; the median time is reported")
    parser.add_argument("--top", type=int, default=0, help="also list the N most expensive rule expressions")
    parser.add_argument(
        "--series-cost", action="store_true", help="also time one histogram's bucket read at several windows"
    )
    parser.add_argument("--keep", type=Path, help="keep the work files in this folder")
    args = parser.parse_args()
    variants = [variant_current()]
    if not args.no_before:
        variants.insert(0, variant_from_git(args.before))
    if args.keep is not None:
        args.keep.mkdir(parents=True, exist_ok=True)
    for pods in args.pods:
        work = Path(tempfile.mkdtemp(prefix=f"genobs-bench-{pods}-", dir=args.keep))
        try:
            end = int(time.time()) // 60 * 60 - 120
            start = end - (HISTORY_STEPS - 1) * synthetic_fleet.SCRAPE_SECONDS
            t0 = time.monotonic()
            fleet = work / "fleet.om"
            size = synthetic_fleet.write(fleet, pods, start, HISTORY_STEPS)
            t1 = time.monotonic()
            raw = work / "raw"
            raw.mkdir()
            subprocess.run(
                ["promtool", "tsdb", "create-blocks-from", "openmetrics", "-q", str(fleet), str(raw)],
                check=True,
                stdout=subprocess.DEVNULL,
            )
            fleet.unlink()
            print(
                f"# {pods} pods: {size / 2**20:,.0f} MiB of OpenMetrics in {t1 - t0:.0f} s, "
                f"blocks in {time.monotonic() - t1:.0f} s",
                flush=True,
            )
            if args.series_cost:
                print(series_cost(raw, work / "probe", end, args.repeat), flush=True)
            for i, variant in enumerate(variants):
                result = run_variant(variant, raw, work / f"v{i}", pods, start, end, args.repeat)
                print(report(result), flush=True)
                if args.top:
                    print(top(result, args.top), flush=True)
        finally:
            if args.keep is None:
                shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
