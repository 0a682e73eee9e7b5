"""Edge and global tiers (docs/backends.md): what an edge cluster ships and what the global
ruler costs.

1. Series shipped per pod, with and without the edge's write_relabel_configs: a real
   Prometheus scrapes N pods of vLLM 0.33's real /metrics body (bench/vllm_0.33_exposition.txt,
   its counters, sums, counts and buckets growing with time so every rate and ratio has a value)
   with specs/chat.yaml's edge rules, and remote-writes to a real VictoriaMetrics twice: through
   the generated filter and unfiltered. Per pod = the difference between two fleet sizes.
2. Rule evaluation time of the global tier against every rule on one Prometheus, on the same
   data: bench_rules' synthetic fleet (N pods, half in cluster a and half in cluster b), the
   spec with `service.cluster_label: cluster`, every recording rule backfilled, then each rule
   expression timed once per evaluation (bench_rules.measure); cost per minute = ms x 60 / interval.

    .venv/bin/python bench/bench_tiers.py                       # series: 1 and 10 pods; rules: 500 pods
    .venv/bin/python bench/bench_tiers.py --ship-pods 1 4 --rule-pods 50
"""

from __future__ import annotations

import argparse
import contextlib
import http.server
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import yaml

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path[:0] = [str(BENCH), str(REPO)]
import bench_rules  # noqa: E402
import synthetic_fleet  # noqa: E402

EXPOSITION = BENCH / "vllm_0.33_exposition.txt"
SPEC = REPO / "specs" / "chat.yaml"
_SAMPLE = re.compile(r"^([^{\s]+)((?:\{.*\})?)\s+(\S+)$")


def moving_body(seconds: float) -> bytes:
    """The real exposition with every counter-like sample (counters, histogram and summary
    parts, not their _created stamps) scaled by 1 + seconds / 10, gauges as they are."""
    types: dict[str, str] = {}
    out = []
    for line in EXPOSITION.read_text().splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(maxsplit=3)
            types[name] = kind
        m = _SAMPLE.match(line)
        if m and not line.startswith("#"):
            name = m.group(1)
            family = next((f for f in types if name.startswith(f)), None)
            if family and types[family] != "gauge" and not name.endswith("_created"):
                line = f"{name}{m.group(2)} {float(m.group(3)) * (1 + seconds / 10):.6g}"
        out.append(line)
    return ("\n".join(out) + "\n").encode()


@contextlib.contextmanager
def exporter() -> Iterator[int]:
    t0 = time.monotonic()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            body = moving_body(time.monotonic() - t0)
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def shipped(pods: int, work: Path) -> tuple[int, int]:
    """(series through the edge filter, series unfiltered) that reach VictoriaMetrics from `pods` pods."""
    from genobs.build import render_spec
    from genobs.commands.scrape_config import relabel_configs
    from genobs.compiler import load_plan
    from genobs.plan import tiers
    from tests.e2e_support import Prometheus, poll
    from tests.vm_support import VictoriaMetrics, running

    work.mkdir(parents=True, exist_ok=True)
    data = yaml.safe_load(SPEC.read_text())
    data |= {"rate_window": "1m", "evaluation_interval": "1s"}
    data["service"]["models"] = ["demo-model"]  # the model the exposition serves
    spec = work / "chat.yaml"
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    out = render_spec(spec, tier="edge")
    rules = {n.split("/")[-1]: b for n, b in out.files.items() if n.startswith("prometheus/")}
    edge_filter = tiers.write_relabel_configs(load_plan(spec)[1])
    mark = lambda v: {"target_label": "shipped", "replacement": v, "action": "replace"}  # noqa: E731
    with exporter() as port, running(VictoriaMetrics(work / "vm")) as vm:
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s", "external_labels": {"cluster": "a"}},
            "scrape_configs": [
                {
                    "job_name": "vllm-chat",
                    "scrape_interval": "1s",
                    "scrape_timeout": "1s",
                    "static_configs": [
                        {"targets": [f"127.0.0.1:{port}"], "labels": {"namespace": "llm-prod", "pod": f"p{i}", "instance": f"10.0.0.{i}:8000"}}
                        for i in range(pods)  # one address, a pod and an instance of its own each
                    ],
                    "metric_relabel_configs": relabel_configs(),
                }
            ],
            "remote_write": [
                {"url": vm.remote_write_url, "write_relabel_configs": [*edge_filter, mark("edge")]},
                {"url": vm.remote_write_url, "write_relabel_configs": [mark("all")]},
            ],
        }
        prom = Prometheus(work / "prom", config, rules)
        try:
            prom.start()
            poll(lambda: vm.query('count({shipped="edge", __name__=~"genobs:.*"})'), time.monotonic() + 90)
            time.sleep(75)  # the 1m windows fill: every ratio with a value has one

            def count(v: str) -> int:
                rows = vm.query(f'count({{shipped="{v}"}})')
                return int(float(rows[0]["value"][1])) if rows else 0

            return count("edge"), count("all")
        finally:
            prom.stop()


def rule_cost(pods: int, repeat: int, keep: Path | None) -> str:
    """Per-minute evaluation cost of the global tier and of every rule, on one synthetic fleet."""
    from genobs.build import render_spec
    from genobs.compiler import load_plan
    from genobs.plan import tiers

    plain_labels = synthetic_fleet.pod_labels
    synthetic_fleet.pod_labels = lambda pod: {**plain_labels(pod), "cluster": "ab"[pod % 2]}
    work = Path(tempfile.mkdtemp(prefix=f"genobs-bench-tiers-{pods}-", dir=keep))
    try:
        data = yaml.safe_load(SPEC.read_text())
        data["service"]["cluster_label"] = "cluster"
        spec = work / "chat.yaml"
        spec.write_text(yaml.safe_dump(data, sort_keys=False))
        out = render_spec(spec)
        files = {Path(k).name: v for k, v in out.files.items() if k.startswith("prometheus/") and k.endswith(".rules.yaml")}
        dash = next(v for k, v in out.files.items() if k.startswith("grafana/"))
        import json

        variant = bench_rules.load_variant("chat, cluster_label", files, json.loads(dash))
        split = tiers.split(load_plan(spec)[1])
        global_rules = {(g.name, getattr(r, "record", None) or r.name, r.expr) for g in split.global_ for r in g.rules}
        end = int(time.time()) // 60 * 60 - 120
        start = end - (bench_rules.HISTORY_STEPS - 1) * synthetic_fleet.SCRAPE_SECONDS
        fleet = work / "fleet.om"
        synthetic_fleet.write(fleet, pods, start, bench_rules.HISTORY_STEPS)
        raw = work / "raw"
        raw.mkdir()
        subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics", "-q", str(fleet), str(raw)],
                       check=True, stdout=subprocess.DEVNULL)
        fleet.unlink()
        result = bench_rules.run_variant(variant, raw, work / "v", pods, start, end, repeat)
    finally:
        synthetic_fleet.pod_labels = plain_labels
        if keep is None:
            shutil.rmtree(work, ignore_errors=True)

    def per_minute(measured, full: bool) -> float:
        return sum((m.full_ms if full else m.ms) * 60 / m.rule.interval for m in measured)

    every = result.measured
    glob = [m for m in every if (m.rule.group, m.rule.name, m.rule.expr) in global_rules]
    lines = [f"# rule evaluation, {pods} pods in 2 clusters (chat, cluster_label: cluster), ms of query time per minute"]
    for full in (False, True):
        a, g = per_minute(every, full), per_minute(glob, full)
        what = "windows at full length (bench_rules' estimate)" if full else "as measured (34 min of recorded history)"
        lines.append(f"{what}: every rule on one Prometheus {a:,.0f}; global tier {g:,.0f} "
                     f"({len(glob)} of {len(every)} rules); ratio {g / a:.3f}")
    return "\n".join(lines)


def ship_report(a: int, b: int) -> str:
    with tempfile.TemporaryDirectory(prefix="genobs-bench-ship-") as tmp:
        small, large = shipped(a, Path(tmp) / "a"), shipped(b, Path(tmp) / "b")
    per_pod_edge = (large[0] - small[0]) / (b - a)
    per_pod_all = (large[1] - small[1]) / (b - a)
    return "\n".join(
        [
            "# series shipped to the global backend (vLLM 0.33's exposition, specs/chat.yaml's edge rules)",
            f"{a} pods: {small[0]} through the edge filter, {small[1]} unfiltered",
            f"{b} pods: {large[0]} through the edge filter, {large[1]} unfiltered",
            f"per pod: {per_pod_edge:.1f} through the edge filter, {per_pod_all:.1f} unfiltered",
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ship-pods", type=int, nargs=2, default=[1, 10], metavar=("A", "B"),
                        help="the two fleet sizes whose difference gives the series per pod (default 1 10)")
    parser.add_argument("--rule-pods", type=int, default=500, help="pods of the rule-cost fleet (default 500; 0 skips)")
    parser.add_argument("--no-ship", action="store_true", help="skip the series-shipped measurement")
    parser.add_argument("--repeat", type=int, default=3, help="runs per query; the median time is reported")
    parser.add_argument("--keep", type=Path, help="keep the work files in this folder")
    args = parser.parse_args()
    if not args.no_ship:
        print(ship_report(*args.ship_pods), flush=True)
    if args.rule_pods:
        print(rule_cost(args.rule_pods, args.repeat, args.keep))


if __name__ == "__main__":
    main()
