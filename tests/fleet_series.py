"""promtool `input_series` for production-shaped vLLM fleets, independent of genobs' plan.

A fleet is one or more pools of replicas (pods, `instance`/`pod` labels), each with N
data-parallel engines (`engine="0"`, `"1"`, ...), scraped under a job and namespace. Every
replica follows a traffic model (request rate, finish-reason mix, latency distributions,
gauges, speculative decoding, NIXL, HTTP answers) that events can change over time (a
replica hangs at minute 10, a pod is down from minute 5 to 12, ...). The generator turns
that into the series vLLM really exports for the chosen release: wire names, labels and
default buckets come from `tests/fleet_metrics.yaml`, a hand copy of vLLM's metric
catalog and a real 0.33.0 `/metrics` body. Nothing here imports genobs.

Counters are cumulative, monotonic and integer where vLLM's are (requests, tokens,
bucket counts); `_sum` series are floats. Histogram buckets come from a piecewise-linear
latency distribution (through p50 / p90 / p99), so `histogram_quantile` lands close to
the distribution's quantile. A replica that is down exports `up 0` and nothing else
(stale markers, as Prometheus writes them when a scrape fails); when it comes back its
counters restart from zero, like a restarted pod.
"""

from __future__ import annotations

import copy
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

Labels = tuple[tuple[str, str], ...]
STEP = 30  # seconds between samples (the scrape interval)
DATA = yaml.safe_load((Path(__file__).with_name("fleet_metrics.yaml")).read_text())

STATES = ("serving", "hung", "zero_metrics", "down", "absent")

# A healthy interactive chat replica on a large model (per replica, summed over its engines).
DEFAULT_TRAFFIC: dict[str, Any] = {
    "state": "serving",
    "rate": 5.0,  # finished requests per second
    "finish": {"stop": 1.0},  # shares of finished requests by finished_reason
    "http_4xx": 0.0,  # share of requests answered 4xx by the API server (never reach the engine)
    "http_5xx": 0.0,  # share answered 5xx by the API server (never reach the engine)
    "http_5xx_per_s": 0.0,  # 5xx answers per second besides the engine's traffic (the API server fails them all)
    "admission_rejections": 0.0,  # rejected admissions per second (vLLM >= 0.32)
    # requests per second whose clients give up before the engine finishes them: vLLM's API server
    # counts each as a 2xx answer when it ends and (V1 front end) the engine counts no finish.
    # None: none while serving; every arrival (`rate`) while hung, as clients time out on it
    "abandoned": None,
    "handler": "/v1/chat/completions",
    "model_list_polls": 0.1,  # GET /v1/models per second: HTTP traffic that is not inference
    "ttft": {"p50": 0.18, "p99": 0.7},
    "itl": {"p50": 0.022, "p99": 0.045},  # per engine step
    "tpot": None,  # default: itl / tokens per step
    "queue": {"p50": 0.004, "p99": 0.12},
    "prefill": {"p50": 0.12, "p99": 0.5},
    # "auto": per request, decode = (output tokens - 1) x mean TPOT, e2e = TTFT + decode,
    # inference = prefill + decode, so speeds and latencies agree with each other
    "decode": "auto",
    "e2e": "auto",
    "inference": "auto",
    "prompt_tokens": {"p50": 900, "p99": 6000},
    "output_tokens": {"p50": 250, "p99": 1000},
    "running": 30,  # requests running on the replica (split over engines)
    "waiting": 0,  # requests waiting on the replica
    "waiting_deferred": 0,  # of which deferred (KV transfer, LoRA budget), vLLM >= 0.20
    "kv": 0.55,  # KV-cache usage per engine (a number, or a list per engine)
    "preemptions": 0.0,  # per second per replica
    "prefix_hit": 0.35,
    "spec_decode": None,  # {accept: [a0, a1, ...]}: acceptance per draft position (k = len)
    "nixl": None,  # {transfers:/s, failed:/s, failed_notifications:/s, kv_expired:/s, xfer_time:, post_time:, bytes:}
    "hung_engines": [],  # data-parallel ranks (engine label values as ints) that hang while the others serve
    "scrape_fails_every": 0,  # every Nth scrape of the replica times out (up 0, its series stale for a step); 0: never
    "rss": 3.2e9,
    "rss_growth": 0.0,  # fraction per hour
    # NVIDIA dcgm-exporter, exported only with the fleet's `gpus:` block
    "gpu_util": 60.0,  # DCGM_FI_DEV_GPU_UTIL (%) of each of the replica's GPUs
    "gpu_memory": 0.9,  # framebuffer share in use per GPU (a number, or a list per GPU): vLLM's reservation
}

# `gpus:` of a fleet: the DCGM exporter's view of each replica's GPUs.
DEFAULT_GPUS: dict[str, Any] = {
    "per_replica": 2,  # GPUs allocated to each vLLM pod (tensor parallel)
    "job": "dcgm-exporter",
    "honor_labels": True,  # false: the workload labels arrive as exported_pod, exported_namespace, ...
    "memory_mib": 81559,  # framebuffer of an H100 80GB (used + free)
    "model": "NVIDIA H100 80GB HBM3",
}

# Real vLLM 0.33.0 k=3 ngram drafts (vllm_real_exposition.txt): 217 drafts, accepted per
# position 142 / 67 / 29 -> 0.654 / 0.309 / 0.134; aggregate 238/651 = 0.366; 2.1 tokens/step.
REAL_K3_ACCEPTANCE = [142 / 217, 67 / 217, 29 / 217]


def seconds(value: str | int | float) -> int:
    if isinstance(value, (int, float)):
        return int(value)
    m = re.fullmatch(r"(\d+)(s|m|h)", str(value).strip())
    if not m:
        raise ValueError(f"duration {value!r}: write e.g. 30s, 10m, 1h")
    return int(m.group(1)) * {"s": 1, "m": 60, "h": 3600}[m.group(2)]


def version(v: str) -> tuple[int, ...]:
    parts = [int(p) for p in re.findall(r"\d+", str(v))[:3]]
    return tuple(parts + [0] * (3 - len(parts)))


def in_range(entry: dict, v: tuple[int, ...]) -> bool:
    since = version(entry.get("since", "0"))
    until = entry.get("until")
    return since <= v and (until is None or v < version(until))


def names_for(kind: str, key: str, v: tuple[int, ...]) -> list[dict]:
    return [e for e in DATA[kind][key] if in_range(e, v)]


@dataclass(frozen=True)
class Dist:
    """Piecewise-linear CDF through (x, F) knots; a single knot is a constant."""

    knots: tuple[tuple[float, float], ...]

    @staticmethod
    def of(spec: Any) -> Dist:
        if isinstance(spec, Dist):
            return spec
        key = repr(spec)
        if key not in _DISTS:
            _DISTS[key] = Dist._of(spec)
        return _DISTS[key]

    @staticmethod
    def _of(spec: Any) -> Dist:
        if isinstance(spec, (int, float)):
            return Dist(((float(spec), 1.0),))
        p50, p99 = float(spec["p50"]), float(spec["p99"])
        pts = [(float(spec.get("min", p50 * 0.25)), 0.0), (p50, 0.5)]
        if "p90" in spec:
            pts.append((float(spec["p90"]), 0.9))
        pts += [(p99, 0.99), (float(spec.get("max", p99 * 1.25)), 1.0)]
        return Dist(tuple(pts))

    def cdf(self, x: float) -> float:
        if len(self.knots) == 1:
            return 1.0 if x >= self.knots[0][0] else 0.0
        if x <= self.knots[0][0]:
            return 0.0
        for (x0, f0), (x1, f1) in zip(self.knots, self.knots[1:]):
            if x <= x1:
                return f0 + (f1 - f0) * (x - x0) / (x1 - x0)
        return 1.0

    def mean(self) -> float:
        if len(self.knots) == 1:
            return self.knots[0][0]
        return sum((f1 - f0) * (x0 + x1) / 2 for (x0, f0), (x1, f1) in zip(self.knots, self.knots[1:]))

    def scaled(self, factor: float) -> Dist:
        return Dist(tuple((x * factor, f) for x, f in self.knots))

    def shifted(self, delta: float) -> Dist:
        return Dist(tuple((max(x + delta, 0.0), f) for x, f in self.knots))

    def cdfs(self, bounds: tuple[float, ...]) -> list[float]:
        key = (self, bounds)
        if key not in _CDFS:
            _CDFS[key] = [self.cdf(b) for b in bounds]
        return _CDFS[key]


_DISTS: dict[str, Dist] = {}
_CDFS: dict[tuple, list[float]] = {}


def one_two_five(max_model_len: int) -> list[float]:
    out, base = [], 1
    while True:
        for m in (1, 2, 5):
            if m * base > max_model_len:
                return out
            out.append(float(m * base))
        base *= 10


def le_text(b: float) -> str:
    """The `le` value as prometheus_client writes it (floatToGoString): 1.0, 0.001, 2.097152e+06."""
    if b == math.inf:
        return "+Inf"
    s = repr(float(b))
    dot = s.find(".")
    if b > 0 and dot > 6:  # Go switches to exponents sooner than Python
        mantissa = f"{s[0]}.{s[1:dot]}{s[dot + 1 :]}".rstrip("0.")
        return f"{mantissa}e+0{dot - 1}"
    return s


def merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        if k not in DEFAULT_TRAFFIC:
            raise ValueError(f"unknown traffic field {k!r}; known: {', '.join(sorted(DEFAULT_TRAFFIC))}")
        out[k] = v
    return out


@dataclass
class Replica:
    pool: str
    index: int
    instance: str
    pod: str
    labels: dict[str, str]
    traffic: dict[str, Any]
    version: tuple[int, ...]  # the vLLM release the replica runs (a pool's own during a rollout)
    events: list[dict] = field(default_factory=list)
    _memo: dict[tuple, dict[str, Any]] = field(default_factory=dict)

    def at(self, t: int) -> dict[str, Any]:
        active = tuple(i for i, e in enumerate(self.events) if e["from"] <= t < e["to"])
        if active in self._memo:
            return self._memo[active]
        p = self.traffic
        for i in active:
            p = merge(p, self.events[i]["set"])
        self._memo[active] = p
        if p["state"] not in STATES:
            raise ValueError(f"state {p['state']!r}: one of {', '.join(STATES)}")
        return p


class Series:
    """Accumulates one series' samples (None = no sample, 'stale' = staleness marker)."""

    def __init__(self, name: str, labels: Labels, integer: bool) -> None:
        self.name, self.labels, self.integer = name, labels, integer
        self.values: list[float | str | None] = []
        self.acc = self.start()

    def start(self) -> float:
        # integer counters round (start at 0.5, floor later) so a rare event lands mid-window
        return 0.5 if self.integer else 0.0

    def text(self) -> str:
        body = ",".join(f'{k}="{v}"' for k, v in sorted(self.labels))
        return f"{self.name}{{{body}}}"


def encode(values: list[float | str | None]) -> str:
    """promtool's expanding notation: runs with a constant step become `a+dxN`."""
    out: list[str] = []
    i = 0
    while i < len(values):
        v = values[i]
        if v is None or v == "stale":
            j = i
            while j + 1 < len(values) and values[j + 1] == v:
                j += 1
            n = j - i + 1
            tok = "_" if v is None else "stale"
            out.append(tok if n == 1 else (f"_x{n}" if v is None else " ".join([tok] * n)))
            i = j + 1
            continue
        j = i
        if i + 1 < len(values) and isinstance(values[i + 1], float):
            d = values[i + 1] - v  # type: ignore[operator]
            j = i + 1
            while (
                j + 1 < len(values)
                and isinstance(values[j + 1], float)
                and abs((values[j + 1] - values[j]) - d) <= 1e-9 * max(1.0, abs(values[j + 1]))  # type: ignore[operator]
            ):
                j += 1
        if j - i >= 2:
            out.append(f"{num(v)}{'+' if d >= 0 else '-'}{num(abs(d))}x{j - i}")  # type: ignore[arg-type]
            i = j + 1
        else:
            out.append(num(v))  # type: ignore[arg-type]
            i += 1
    return " ".join(out)


def num(v: float) -> str:
    if v == int(v) and abs(v) < 1e15:
        return str(int(v))
    return format(v, ".12g")


class Fleet:
    """A fleet description (the scenario's `fleet:` mapping) and the series it exports."""

    def __init__(self, data: dict, spec: dict | None = None) -> None:
        data = copy.deepcopy(data or {})
        service = (spec or {}).get("service", {}) or {}
        selector = dict(service.get("selector") or {})
        self.version = version(data.pop("version", service.get("engine_version", "0.33.0")))
        self.job = data.pop("job", selector.get("job", "vllm"))
        self.namespace = data.pop("namespace", selector.get("namespace", "llm-prod"))
        # every selector label lands on every target of the fleet (that is what the selector matches)
        self.target_labels = {k: str(v) for k, v in selector.items() if k not in ("job", "namespace")}
        self.target_labels.update({k: str(v) for k, v in (data.pop("target_labels", {}) or {}).items()})
        models = service.get("models") or []
        self.model = data.pop("model_name", models[0] if models else "model")
        self.duration = seconds(data.pop("duration", "60m"))
        self.dialect = data.pop("dialect", service.get("metric_names", "colon"))
        # the serving engine: vllm, or sglang (series written from its real bodies, DATA["sglang"])
        self.engine = data.pop("engine", service.get("engine", "vllm"))
        if self.engine not in ("vllm", "sglang", "trtllm"):
            raise ValueError(f"engine {self.engine!r}: vllm, sglang or trtllm")
        has_engine = self.version >= version(DATA["engine_label_since"]) and self.engine == "vllm"
        # data-parallel ranks per replica (vLLM engines, SGLang dp_rank schedulers; trtllm-serve has none)
        ranks = {"vllm": 2 if has_engine else 1, "sglang": 2, "trtllm": 1}[self.engine]
        self.engines = int(data.pop("engines", ranks))
        self.engine_label = has_engine
        self.max_model_len = int(data.pop("max_model_len", 8192))
        # --custom-histogram-buckets (vLLM >= 0.32): {ttft: [0.1, 0.5, 2.0, ...]} per histogram
        self.custom_buckets = {k: [float(b) for b in v] for k, v in (data.pop("custom_buckets", {}) or {}).items()}
        unknown = set(self.custom_buckets) - set(DATA["histograms"])
        if unknown:
            raise ValueError(f"custom_buckets: unknown histograms {sorted(unknown)}")
        follows_dp = self.version >= version(DATA["api_server_count_follows_dp_since"])
        self.api_servers = int(data.pop("api_servers", self.engines if follows_dp else 1))
        if self.engine != "vllm":
            self.api_servers = 0  # prometheus_client multiprocess mode: no process_* families
        base = merge(DEFAULT_TRAFFIC, data.pop("traffic", {}) or {})
        pools = data.pop("pools", None)
        if pools is None:
            pools = [{"name": "", "replicas": data.pop("replicas", 4), "labels": {}, "traffic": {}}]
        events = data.pop("events", []) or []
        self.others = data.pop("other_targets", []) or []
        # the same pods scraped twice under one job, by a ServiceMonitor (its targets carry
        # `service`) and a PodMonitor (they do not): every replica series exists twice
        self.duplicate_monitor = bool(data.pop("duplicate_monitor", False))
        gateway = data.pop("gateway", None)
        gw_spec = (spec or {}).get("gateway") or {}
        kind = {"dynamo": DynamoModel, "otel-genai-server": OtelServerModel}.get(gw_spec.get("engine"), GatewayModel)
        self.gateway = None if gateway is None and not gw_spec else kind(gateway or {}, gw_spec, self.namespace, self.job)
        client = data.pop("client", None)
        cl_spec = (spec or {}).get("client") or {}
        self.client = None if client is None and not cl_spec else ClientModel(client or {}, cl_spec, self.model)
        gpus = data.pop("gpus", None)
        self.gpus = None if gpus is None else {**DEFAULT_GPUS, **gpus}
        if self.gpus is not None and set(self.gpus) - set(DEFAULT_GPUS):
            raise ValueError(f"unknown gpus fields: {', '.join(sorted(set(self.gpus) - set(DEFAULT_GPUS)))}")
        if data:
            raise ValueError(f"unknown fleet fields: {', '.join(sorted(data))}")
        self.replicas: list[Replica] = []
        for p_idx, pool in enumerate(pools):
            name = pool.get("name", "")
            traffic = merge(base, pool.get("traffic", {}) or {})
            # a pool may run another release than the fleet (pods already upgraded, or not yet)
            release = version(pool["version"]) if "version" in pool else self.version
            for i in range(int(pool["replicas"])):
                pod = f"{self.job}-{name + '-' if name else ''}{i}"
                instance = f"10.0.{p_idx}.{11 + i}:8000"
                self.replicas.append(
                    Replica(
                        name, i, instance, pod, {k: str(v) for k, v in (pool.get("labels") or {}).items()}, traffic, release
                    )
                )
        if isinstance(self.gateway, DynamoModel):  # Dynamo workers: the engine's series with Dynamo's labels
            for n, r in enumerate(self.replicas):
                extra = {**DATA["dynamo"]["worker_labels"], "worker_id": f"{0x694d9a2b0c1e + n:x}", "model": self.model}
                r.labels.update({k: v for k, v in extra.items() if k not in r.labels})
        for e in events:
            self._add_event(e)

    def _add_event(self, e: dict) -> None:
        which = e.get("replicas", "all")
        start = seconds(e.get("from", 0))
        end = seconds(e["to"]) if "to" in e else self.duration + STEP
        targets = [r for r in self.replicas if self._selects(which, r)]
        if not targets:
            raise ValueError(f"event {e!r} selects no replica")
        for r in targets:
            r.events.append({"from": start, "to": end, "set": merge({}, e.get("set", {}) or {})})

    @staticmethod
    def _selects(which: Any, r: Replica) -> bool:
        if which == "all":
            return True
        items = which if isinstance(which, list) else [which]
        for w in items:
            if isinstance(w, int) and not r.pool and w == r.index:
                return True
            if isinstance(w, str) and w in (r.pool, r.pod, r.instance, f"{r.pool}-{r.index}"):
                return True
        return False

    # --- naming -------------------------------------------------------------------------

    def wire(self, name: str) -> str:
        if self.dialect != "underscore":
            return name
        return name.replace("vllm:", "vllm_").replace("sglang:", "sglang_")

    def steps(self) -> range:
        return range(0, self.duration + 1, STEP)

    # --- generation ---------------------------------------------------------------------

    def series(self) -> list[dict[str, str]]:
        return [{"series": s.text(), "values": encode(s.values)} for s in self.built()]

    def built(self) -> list[Series]:
        """Every target's series: the replicas', their GPUs', other targets', the gateway's and the
        application's."""
        out: list[Series] = []
        kind = {"sglang": SglangReplicaSeries, "trtllm": TrtllmReplicaSeries}.get(self.engine, ReplicaSeries)
        for r in self.replicas:
            built = kind(self, r).build()
            out.extend(built)
            if self.duplicate_monitor:
                for one in built:
                    twin = Series(one.name, (*one.labels, ("service", self.job)), one.integer)
                    twin.values = one.values
                    out.append(twin)
        if self.gpus is not None:
            for node, r in enumerate(self.replicas):
                out.extend(self._dcgm(node, r))
        for o in self.others:
            out.extend(self._other(o))
        if self.gateway is not None:
            kind = {DynamoModel: DynamoSeries, OtelServerModel: OtelServerSeries}.get(type(self.gateway), GatewaySeries)
            for i, target in enumerate(gateway_targets(self, self.gateway)):
                out.extend(kind(self, self.gateway, target, i).build())
        if self.client is not None:
            for i in range(self.client.instances):
                out.extend(ClientSeries(self, self.client, i).build())
        return out

    @staticmethod
    def metric_names(series: list[dict[str, str]]) -> set[str]:
        """Names in `series` (the output of `series()`), histograms also without _bucket/_sum/_count."""
        names = {s["series"].split("{", 1)[0] for s in series}
        return names | {re.sub(r"_(bucket|sum|count)$", "", n) for n in names}

    def _dcgm(self, node: int, r: Replica) -> list[Series]:
        """The GPUs of one replica as its node's dcgm-exporter exports them. The GPUs stay
        allocated to the pod while it exists; a pod that is down holds no memory and runs
        nothing; an absent pod has released its GPUs (no pod labels, idle). A hung engine
        keeps its memory and shows the utilisation its traffic says."""
        g = self.gpus
        assert g is not None
        target = {"job": g["job"], "instance": f"10.0.8.{11 + node}:9400"}
        if not g["honor_labels"]:  # the exporter pod's own target labels win; the workload's are renamed
            target.update({"namespace": "gpu-operator", "pod": f"dcgm-exporter-{node:05d}"})
        names = DATA["dcgm"]
        out: dict[tuple[str, Labels], Series] = {}
        total = float(g["memory_mib"])
        for t in self.steps():
            p = r.at(t)
            state = p["state"]
            for i in range(int(g["per_replica"])):
                device = dict(
                    zip(
                        DATA["dcgm_device_labels"],
                        (
                            str(i),
                            f"GPU-{node:08x}-77aa-4c1e-9d3b-{i:012x}",
                            f"00000000:{0x18 + i:02X}:00.0",
                            f"nvidia{i}",
                            g["model"],
                            f"gpu-node-{node}",
                        ),
                    )
                )
                if state != "absent":
                    workload = dict(zip(DATA["dcgm_pod_labels"], (r.pod, self.namespace, "vllm")))
                    if not g["honor_labels"]:
                        workload = {f"exported_{k}": v for k, v in workload.items()}
                    device.update(workload)
                labels = tuple({**target, **device}.items())
                mem = p["gpu_memory"][i] if isinstance(p["gpu_memory"], list) else p["gpu_memory"]
                busy = state in ("serving", "hung", "zero_metrics")
                used = float(round(total * float(mem))) if busy else 0.0
                util = float(p["gpu_util"]) if busy else 0.0
                for key, value in (("gpu_util", util), ("fb_used", used), ("fb_free", total - used)):
                    s = out.get((key, labels))
                    if s is None:
                        s = out[(key, labels)] = Series(names[key], labels, False)
                        s.values = [None] * (t // STEP)
                    s.values.append(value)
        # a series whose labels changed (the pod went away) ends there with a staleness marker
        n = len(self.steps())
        for s in out.values():
            if len(s.values) < n:
                s.values += ["stale"] + [None] * (n - len(s.values) - 1)
        return list(out.values())

    def _other(self, o: dict) -> list[Series]:
        """A non-vLLM target in the same namespace: node-exporter, kube-state-metrics, Prometheus."""
        o = dict(o)
        job = o.pop("job")
        count = int(o.pop("instances", 1))
        port = int(o.pop("port", 9100))
        up_events = o.pop("down", None)  # [from, to] or true
        rss = float(o.pop("rss", 5e7))
        growth = float(o.pop("rss_growth", 0.0))
        namespace = o.pop("namespace", self.namespace)
        if o:
            raise ValueError(f"unknown other_targets fields: {', '.join(sorted(o))}")
        series: list[Series] = []
        for i in range(count):
            labels = tuple(
                {
                    "job": job,
                    "namespace": namespace,
                    "instance": f"10.0.9.{11 + i}:{port}",
                    **self.target_labels,
                }.items()
            )
            up = Series("up", labels, True)
            mem = Series("process_resident_memory_bytes", labels, False)
            cpu = Series("process_cpu_seconds_total", labels, False)
            was_up = False
            for t in self.steps():
                down = up_events is True or (
                    isinstance(up_events, list) and seconds(up_events[0]) <= t < seconds(up_events[1])
                )
                up.values.append(0.0 if down else 1.0)
                if down:
                    mem.values.append("stale" if was_up else None)
                    cpu.values.append("stale" if was_up else None)
                else:
                    mem.values.append(float(round(rss * (1 + growth * t / 3600))))
                    cpu.values.append(round(0.05 * t, 3))
                was_up = not down
            series += [up, mem, cpu]
        return series


class ReplicaSeries:
    """Every series one replica exports, step by step."""

    def __init__(self, fleet: Fleet, r: Replica) -> None:
        self.f, self.r = fleet, r
        self.series: dict[tuple[str, Labels], Series] = {}
        v = self.version = r.version
        self.reasons = next(e["reasons"] for e in reversed(DATA["finished_reasons"]) if in_range(e, v))
        base = {"job": fleet.job, "namespace": fleet.namespace, "instance": r.instance, "pod": r.pod}
        base.update(fleet.target_labels)
        base.update(r.labels)
        self.base: Labels = tuple(base.items())
        self.model: Labels = (*self.base, ("model_name", fleet.model))
        self.engine: list[Labels] = [
            (*self.model, ("engine", str(e))) if fleet.engine_label else self.model for e in range(fleet.engines)
        ]
        if "worker_id" in r.labels:  # a Dynamo worker labels each data-parallel rank's series with dp_rank too
            self.engine = [(*labels, ("dp_rank", str(e))) for e, labels in enumerate(self.engine)]
        self.names = {
            kind: {key: [e["name"] for e in DATA[kind][key] if in_range(e, v)] for key in DATA[kind]}
            for kind in ("counters", "gauges")
        }
        self.hists: dict[str, list[tuple[str, tuple[float, ...], list[str]]]] = {}
        for key, entries in DATA["histograms"].items():
            self.hists[key] = []
            for e in entries:
                if in_range(e, v):
                    spec = fleet.custom_buckets.get(key) or DATA["buckets"][e["buckets"]]
                    bounds = one_two_five(fleet.max_model_len) if spec == "one_two_five" else [float(b) for b in spec]
                    bounds = [*bounds, math.inf]
                    self.hists[key].append((e["name"], tuple(bounds), [le_text(b) for b in bounds]))

    def _s(self, name: str, labels: Labels, integer: bool) -> Series:
        s = self.series.get((name, labels))
        if s is None:
            s = self.series[(name, labels)] = Series(self.f.wire(name), labels, integer)
        return s

    def _add(self, name: str, labels: Labels, inc: float, integer: bool = True) -> None:
        s = self._s(name, labels, integer)
        s.acc += inc
        s.values.append(float(math.floor(s.acc + 1e-9)) if integer else round(s.acc, 6))

    def _counter(self, key: str, labels: Labels, inc: float) -> None:
        for name in self.names["counters"][key]:
            self._add(name, labels, inc)

    def _gauge(self, key: str, labels: Labels, value: float) -> None:
        for name in self.names["gauges"][key]:
            self._s(name, labels, False).values.append(float(value))

    def _hist(self, key: str, labels: Labels, n: float, dist: Dist) -> None:
        for name, bounds, les in self.hists[key]:
            bucket = f"{name}_bucket"
            for le, c in zip(les, dist.cdfs(bounds)):
                self._add(bucket, (*labels, ("le", le)), n * c)
            self._add(f"{name}_count", labels, n)
            self._add(f"{name}_sum", labels, n * dist.mean(), False)

    def build(self) -> list[Series]:
        f, r = self.f, self.r
        prev_state = None
        up = self._s("up", self.base, True)
        rss = Series("process_resident_memory_bytes", self.base, False)
        uptime = 0
        for t in f.steps():
            p = r.at(t)
            state = p["state"]
            gone = state in ("down", "absent")
            was_up = prev_state not in (None, "down", "absent")
            if state == "absent":  # out of service discovery: Prometheus marks even `up` stale
                up.values.append("stale" if prev_state not in (None, "absent") else None)
            else:
                up.values.append(0.0 if gone else 1.0)
            if gone:
                for s in self.series.values():
                    if s is not up:
                        s.values.append("stale" if was_up else None)
                        s.acc = s.start()  # the pod that comes back is a new process: counters restart
                rss.values.append("stale" if was_up else None)
                prev_state = state
                uptime = 0
                continue
            known = set(self.series)
            self._step(p, first=not was_up)
            every = int(p["scrape_fails_every"])
            # a scrape that times out: up 0 and a staleness marker on every series of the target;
            # the process goes on counting, so the next scrape reads the advanced counters
            failed = every > 0 and (t // STEP + r.index) % every == every - 1
            # series first seen now (a replica that was absent) have no earlier samples
            for k, s in self.series.items():
                if k not in known and len(s.values) < len(up.values):
                    s.values[:0] = [None] * (len(up.values) - len(s.values))
            rss.values.append(float(round(p["rss"] * (1 + p["rss_growth"] * uptime / 3600))))
            if failed:
                for s in (*self.series.values(), rss):
                    s.values[-1] = 0.0 if s is up else "stale"
            uptime += STEP
            prev_state = state
        out = list(self.series.values())
        if f.api_servers == 1:
            out.append(rss)
        return out

    def _step(self, p: dict, first: bool) -> None:
        f = self.f
        state = p["state"]
        flowing = state == "serving" and not first
        zero = state == "zero_metrics"
        if zero:  # broken PROMETHEUS_MULTIPROC_DIR: every engine series reads 0
            for (name, _), s in self.series.items():
                if name.startswith("vllm:"):
                    s.acc = 0.0
        dt = 0 if first else STEP
        engines = f.engines
        spec = p["spec_decode"]
        accept = list(spec["accept"]) if spec else []
        tps = 1.0 + sum(accept)  # tokens emitted per engine step
        out_d = Dist.of(p["output_tokens"])
        prompt_d = Dist.of(p["prompt_tokens"])
        itl_d = Dist.of(p["itl"])
        tpot_d = Dist.of(p["tpot"]) if p["tpot"] is not None else itl_d.scaled(1 / tps)
        auto = out_d.shifted(-1).scaled(tpot_d.mean())
        decode_d = auto if p["decode"] == "auto" else Dist.of(p["decode"])
        derived = {
            "decode": decode_d,
            "e2e": decode_d.shifted(Dist.of(p["ttft"]).mean()) if p["e2e"] == "auto" else Dist.of(p["e2e"]),
            "inference": decode_d.shifted(Dist.of(p["prefill"]).mean())
            if p["inference"] == "auto"
            else Dist.of(p["inference"]),
        }
        finish = {k: float(v) for k, v in p["finish"].items()}
        unknown = set(finish) - set(self.reasons)
        if unknown:
            raise ValueError(f"finish reasons {sorted(unknown)} do not exist in vLLM {self.version}")
        total = sum(finish.values()) or 1.0
        kv = p["kv"] if isinstance(p["kv"], list) else [p["kv"]] * engines
        for e in range(engines):
            labels = self.engine[e]
            live = flowing and e not in p["hung_engines"]  # a hung rank keeps its gauges, counts nothing
            n = p["rate"] * dt / engines if live else 0.0
            for reason in self.reasons:
                inc = n * finish.get(reason, 0.0) / total
                self._add("vllm:request_success_total", (*labels, ("finished_reason", reason)), inc)
            for key in ("ttft", "queue", "prefill"):
                self._hist(key, labels, n, Dist.of(p[key]))
            for key, d in derived.items():
                self._hist(key, labels, n, d)
            # vLLM observes a TPOT of 0 for a request that generated a single token (no decode)
            single = out_d.cdf(1.0)
            if single > 0:
                self._hist("tpot", labels, n * single, Dist.of(0.0))
            self._hist("tpot", labels, n * (1 - single), tpot_d)
            self._hist("prompt_tokens", labels, n, prompt_d)
            self._hist("output_tokens", labels, n, out_d)
            steps = n * max(out_d.mean() - 1, 0.0) / tps  # decode steps: one ITL observation each
            self._hist("itl", labels, steps, itl_d)
            prompt = n * prompt_d.mean()
            self._counter("prompt_tokens", labels, prompt)
            self._counter("generation_tokens", labels, n * out_d.mean())
            self._counter("prefix_queries", labels, prompt)
            self._counter("prefix_hits", labels, prompt * float(p["prefix_hit"]))
            self._counter("preemptions", labels, float(p["preemptions"]) * dt / engines if live else 0.0)
            if spec:
                self._counter("spec_drafts", labels, steps)
                self._counter("spec_draft_tokens", labels, steps * len(accept))
                self._counter("spec_accepted_tokens", labels, steps * sum(accept))
                for pos, a in enumerate(accept):
                    self._counter("spec_accepted_per_pos", (*labels, ("position", str(pos))), steps * a)
            if p["nixl"]:
                self._nixl(p["nixl"], labels, dt / engines if live else 0.0)
            running = 0 if zero else split(int(p["running"]), engines)[e]
            waiting = 0 if zero else split(int(p["waiting"]), engines)[e]
            deferred = 0 if zero else split(int(p["waiting_deferred"]), engines)[e]
            self._gauge("running", labels, running)
            self._gauge("waiting", labels, waiting)
            self._gauge("waiting_by_reason", (*labels, ("reason", "capacity")), max(waiting - deferred, 0))
            self._gauge("waiting_by_reason", (*labels, ("reason", "deferred")), min(deferred, waiting))
            self._gauge("kv_usage", labels, 0.0 if zero else float(kv[e]))
            for entry in DATA["cache_config_info"]:
                if in_range(entry, self.version):
                    info = (*self.base, *((("engine", str(e)),) if f.engine_label else ()))
                    self._s(entry["name"], (*info, *DATA["cache_config_labels"].items()), False).values.append(1.0)
        self._frontend(p, dt, state, first)

    def _nixl(self, nx: dict, labels: Labels, dt: float) -> None:
        transfers = float(nx.get("transfers", 0.0)) * dt
        self._hist("nixl_xfer_time", labels, transfers, Dist.of(nx.get("xfer_time", {"p50": 0.02, "p99": 0.08})))
        self._hist("nixl_post_time", labels, transfers, Dist.of(nx.get("post_time", {"p50": 0.0004, "p99": 0.002})))
        self._hist("nixl_bytes", labels, transfers, Dist.of(nx.get("bytes", {"p50": 1.6e7, "p99": 6e7})))
        self._counter("nixl_failed_transfers", labels, float(nx.get("failed", 0.0)) * dt)
        self._counter("nixl_failed_notifications", labels, float(nx.get("failed_notifications", 0.0)) * dt)
        self._counter("nixl_kv_expired", labels, float(nx.get("kv_expired", 0.0)) * dt)
        self._counter("nixl_notifications_after_expiry", labels, 0.0)

    def _frontend(self, p: dict, dt: int, state: str, first: bool) -> None:
        """API-server series: HTTP answers by status class and admission rejections (no engine label)."""
        accepting = state in ("serving", "zero_metrics") and not first
        rate = p["rate"] if accepting else 0.0
        for entry in DATA["admission_rejections"]:
            if in_range(entry, self.version):
                for i, reason in enumerate(entry["reasons"]):
                    inc = float(p["admission_rejections"]) * dt if (i == 0 and state == "serving") else 0.0
                    self._add(entry["name"], (*self.model, ("reason", reason)), inc)
        if not any(in_range(e, self.version) for e in DATA["http_requests"]):
            return
        if isinstance(self.f.gateway, DynamoModel):
            return  # a Dynamo worker runs vLLM's engine without its OpenAI server: no http_requests_total
        name = "http_requests_total"
        h = (("handler", p["handler"]), ("method", "POST"))
        # Streamed answers start with 200 before the engine finishes, so every finished
        # request (stop/length/abort/error) is a 2xx; 4xx/5xx never reached the engine. A request
        # its client gave up on is counted 2xx when it ends (vLLM 0.32, seen on a real server).
        abandoned = p["abandoned"]
        if abandoned is None:
            abandoned = p["rate"] if state == "hung" else 0.0
        abandoned = 0.0 if first or state in ("down", "absent") else float(abandoned)
        self._add(name, (*self.base, *h, ("status", "2xx")), (rate + abandoned) * dt)
        self._add(name, (*self.base, *h, ("status", "4xx")), rate * float(p["http_4xx"]) * dt)
        front = float(p["http_5xx_per_s"]) if accepting else 0.0
        self._add(name, (*self.base, *h, ("status", "5xx")), (rate * float(p["http_5xx"]) + front) * dt)
        # /v1/models never reaches the engine: it keeps answering while the engine hangs
        polls = float(p["model_list_polls"]) * dt if not first else 0.0
        models = (("handler", "/v1/models"), ("method", "GET"), ("status", "2xx"))
        self._add(name, (*self.base, *models), polls)


def split(total: int, parts: int) -> list[int]:
    """Spread an integer gauge over engines: 5 over 2 engines is 3 + 2."""
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


# Share of requests that stream (is_streaming="true"), as in the real SGLang body (84 %).
SGLANG_STREAMING = 0.84


class SglangReplicaSeries(ReplicaSeries):
    """Every series one SGLang replica exports (one server, `engines` data-parallel schedulers):
    names, labels and buckets from DATA["sglang"], a hand copy of the real 0.5.23 bodies. The
    tokenizer process counts finished requests without a finish reason and aborted ones apart;
    each scheduler (dp_rank) writes its own gauges, queue time, retractions and prefill tokens."""

    def __init__(self, fleet: Fleet, r: Replica) -> None:
        self.f, self.r = fleet, r
        self.series = {}
        self.version = r.version
        self.reasons = ["stop", "length", "abort"]  # the traffic model's finishes; SGLang labels none
        d = DATA["sglang"]
        base = {"job": fleet.job, "namespace": fleet.namespace, "instance": r.instance, "pod": r.pod}
        base.update(fleet.target_labels)
        base.update(r.labels)
        # a prefill/decode pair's servers say their role in engine_type (a pool's labels), else unified
        role = self.role = base.pop("engine_type", "unified")
        self.base = tuple(base.items())
        self.model = (*self.base, ("engine_type", role), ("model_name", fleet.model))  # tokenizer labels
        sched = {**d["scheduler_labels"], "engine_type": role}
        rank = (*self.base, ("model_name", fleet.model), *sched.items())
        # without data parallelism (engines: 1) the schedulers write no dp_rank, as in the P/D bodies
        self.engine = [(*rank, ("dp_rank", str(e))) if fleet.engines > 1 else rank for e in range(fleet.engines)]
        self.hists = {}
        for key, h in (*d["histograms"].items(), ("kv_transfer", d["kv_transfer"]), ("kv_transfer_size", d["kv_transfer_size"])):
            bounds = (*(float(b) for b in h["buckets"]), math.inf)
            self.hists[key] = [(h["name"], bounds, [le_text(b) for b in bounds])]

    def _streams(self, labels: Labels, streaming: bool) -> list[tuple[Labels, float]]:
        if not streaming:
            return [(labels, 1.0)]
        return [
            ((*labels, ("is_streaming", "true")), SGLANG_STREAMING),
            ((*labels, ("is_streaming", "false")), 1 - SGLANG_STREAMING),
        ]

    def _tok_counter(self, key: str, inc: float) -> None:
        c = DATA["sglang"]["tokenizer_counters"][key]
        for labels, share in self._streams(self.model, c["streaming"]):
            self._add(c["name"], labels, inc * share)

    def _tok_hist(self, key: str, n: float, dist: Dist) -> None:
        h = DATA["sglang"]["histograms"][key]
        for labels, share in self._streams(self.model, h["streaming"]):
            self._hist(key, labels, n * share, dist)

    def _step(self, p: dict, first: bool) -> None:
        f, d = self.f, DATA["sglang"]
        state = p["state"]
        flowing = state == "serving" and not first
        zero = state == "zero_metrics"
        if zero:  # an unwritable PROMETHEUS_MULTIPROC_DIR: every sglang series reads 0
            for (name, _), s in self.series.items():
                if name.startswith("sglang:"):
                    s.acc = 0.0
        dt = 0 if first else STEP
        engines = f.engines
        spec = p["spec_decode"]
        accept = list(spec["accept"]) if spec else []
        tps = 1.0 + sum(accept)  # tokens per verify step
        out_d = Dist.of(p["output_tokens"])
        prompt_d = Dist.of(p["prompt_tokens"])
        itl_d = Dist.of(p["itl"])
        tpot_d = Dist.of(p["tpot"]) if p["tpot"] is not None else itl_d.scaled(1 / tps)
        ttft_d = Dist.of(p["ttft"])
        e2e_d = out_d.shifted(-1).scaled(tpot_d.mean()).shifted(ttft_d.mean()) if p["e2e"] == "auto" else Dist.of(p["e2e"])
        finish = {k: float(v) for k, v in p["finish"].items()}
        unknown = set(finish) - set(self.reasons)
        if unknown:
            raise ValueError(f"finish {sorted(unknown)}: an SGLang fleet models stop, length and abort")
        total = sum(finish.values()) or 1.0
        live = [flowing and e not in p["hung_engines"] for e in range(engines)]
        # the tokenizer sees the requests of every scheduler that still makes progress
        n = p["rate"] * dt * sum(live) / engines
        done = n * (finish.get("stop", 0.0) + finish.get("length", 0.0)) / total
        # a P/D prefill server (the real prefill body) records no TTFT, ITL, TPOT, aborts or
        # retraction counts: its legs end after the first token, handed to the decode server
        decodes = self.role != "prefill"
        self._tok_counter("finished", done)
        if decodes:
            self._tok_counter("aborted", n * finish.get("abort", 0.0) / total)
        self._tok_counter("prompt_tokens", n * prompt_d.mean())
        self._tok_counter("generation_tokens", n * out_d.mean())
        self._tok_hist("e2e", done, e2e_d)
        if decodes:
            self._tok_hist("ttft", n, ttft_d)
            self._tok_hist("tpot", done, tpot_d)
            # SGLang spreads each streamed chunk's interval over its tokens: one observation per token
            self._tok_hist("itl", n * max(out_d.mean() - 1, 0.0), tpot_d)
        self._tok_hist("prompt_tokens", done, prompt_d)
        self._tok_hist("output_tokens", done, out_d)
        kv = p["kv"] if isinstance(p["kv"], list) else [p["kv"]] * engines
        hit = float(p["prefix_hit"])
        for e in range(engines):
            labels = self.engine[e]
            share = p["rate"] * dt / engines if live[e] else 0.0
            self._hist("queue", labels, share, Dist.of(p["queue"]))
            prompt = share * prompt_d.mean()
            effective = d["scheduler_counters"]["prefill_effective"]
            for mode, inc in (("input", prompt * (1 - hit)), ("device_hit", prompt * hit), ("host_hit", 0.0), ("storage_hit", 0.0)):
                self._add(effective, (*labels, ("mode", mode)), inc)
            # the tokens this scheduler processed, at every prefill batch and decode step
            modes = {} if self.role == "decode" else {"prefill_compute": prompt * (1 - hit), "prefill_cache": prompt * hit}
            if decodes:
                modes["decode"] = share * out_d.mean()
            for mode, inc in modes.items():
                self._add(d["scheduler_counters"]["realtime_tokens"], (*labels, ("mode", mode)), inc)
            if decodes:
                retracted = float(p["preemptions"]) * dt / engines if live[e] else 0.0
                self._add(d["scheduler_counters"]["retractions"], labels, retracted)
            if p["nixl"] and self.role != "unified":
                self._kv_transfer(p["nixl"], labels, dt / engines if live[e] else 0.0)
            g = d["gauges"]
            self._s(g["running"], labels, False).values.append(0.0 if zero else float(split(int(p["running"]), engines)[e]))
            self._s(g["waiting"], labels, False).values.append(0.0 if zero else float(split(int(p["waiting"]), engines)[e]))
            self._s(g["kv_usage"], labels, False).values.append(0.0 if zero else float(kv[e]))
            if spec:  # window means of the last decode log interval
                rate = sum(accept) / len(accept)
                self._s(g["spec_accept_rate"], labels, False).values.append(0.0 if zero else rate)
                self._s(g["spec_accept_length"], labels, False).values.append(0.0 if zero else tps)
        accepting = state in ("serving", "zero_metrics") and not first
        rate = p["rate"] if accepting else 0.0
        http = (("endpoint", p["handler"]), ("method", "POST"))
        self._add(d["http_responses"], (*self.base, *http, ("status_code", "200")), rate * dt)
        front = float(p["http_5xx_per_s"]) if accepting else 0.0
        self._add(d["http_responses"], (*self.base, *http, ("status_code", "503")), (rate * float(p["http_5xx"]) + front) * dt)


    def _kv_transfer(self, nx: dict, labels: Labels, dt: float) -> None:
        """A P/D pair's KV transfers: {transfers: /s, failed: /s, latency_ms: {p50, p99}, size_mb:
        {p50, p99}} per server. The prefill server observes each completed transfer in milliseconds
        and its size in MiB (the decode server only bootstrap and allocation times); both servers
        count each failed transfer. Sizes default to the real prefill body's (mean 180 MiB)."""
        if self.role == "prefill":
            n = float(nx.get("transfers", 0.0)) * dt
            self._hist("kv_transfer", labels, n, Dist.of(nx["latency_ms"]))
            self._hist("kv_transfer_size", labels, n, Dist.of(nx.get("size_mb", {"p50": 180, "p99": 800})))
        self._add(DATA["sglang"]["transfer_failed"], labels, float(nx.get("failed", 0.0)) * dt)


class TrtllmReplicaSeries(ReplicaSeries):
    """Every series one trtllm-serve replica exports: names, labels and buckets from DATA["trtllm"],
    a hand copy of the real body. Finish reasons stop, length and cancelled; HTTP errors by
    http_code per model; gauges with the process's pid label; no rank label."""

    def __init__(self, fleet: Fleet, r: Replica) -> None:
        self.f, self.r = fleet, r
        self.series = {}
        self.version = r.version
        d = DATA["trtllm"]
        self.reasons = list(d["finished_reasons"])
        base = {"job": fleet.job, "namespace": fleet.namespace, "instance": r.instance, "pod": r.pod}
        base.update(fleet.target_labels)
        base.update(r.labels)
        self.base = tuple(base.items())
        self.model = (*self.base, *d["labels"].items(), ("model_name", fleet.model))
        self.engine = [self.model]
        self.gauge_labels = (*self.model, ("pid", d["pid"]))
        self.hists = {}
        for key, h in d["histograms"].items():
            bounds = (*(float(b) for b in h["buckets"]), math.inf)
            self.hists[key] = [(h["name"], bounds, [le_text(b) for b in bounds])]

    def _step(self, p: dict, first: bool) -> None:
        d = DATA["trtllm"]
        c, g = d["counters"], d["gauges"]
        state = p["state"]
        flowing = state == "serving" and not first
        zero = state == "zero_metrics"
        if zero:
            for (name, _), s in self.series.items():
                if name.startswith("trtllm_"):
                    s.acc = 0.0
        dt = 0 if first else STEP
        spec = p["spec_decode"]
        accept = list(spec["accept"]) if spec else []
        tps = 1.0 + sum(accept)
        out_d = Dist.of(p["output_tokens"])
        prompt_d = Dist.of(p["prompt_tokens"])
        itl_d = Dist.of(p["itl"])
        tpot_d = Dist.of(p["tpot"]) if p["tpot"] is not None else itl_d.scaled(1 / tps)
        ttft_d = Dist.of(p["ttft"])
        decode_d = out_d.shifted(-1).scaled(tpot_d.mean()) if p["decode"] == "auto" else Dist.of(p["decode"])
        e2e_d = decode_d.shifted(ttft_d.mean()) if p["e2e"] == "auto" else Dist.of(p["e2e"])
        inference_d = decode_d.shifted(Dist.of(p["prefill"]).mean()) if p["inference"] == "auto" else Dist.of(p["inference"])
        finish = {k: float(v) for k, v in p["finish"].items()}
        unknown = set(finish) - set(self.reasons)
        if unknown:
            raise ValueError(f"finish reasons {sorted(unknown)} do not exist in trtllm-serve ({self.reasons})")
        total = sum(finish.values()) or 1.0
        labels = self.model
        n = p["rate"] * dt if flowing else 0.0
        for reason in self.reasons:
            self._add(c["success"], (*labels, ("finished_reason", reason)), n * finish.get(reason, 0.0) / total)
        self._add(c["completed"], labels, n)
        accepting = state in ("serving", "zero_metrics") and not first
        rate = p["rate"] if accepting else 0.0
        front = float(p["http_5xx_per_s"]) if accepting else 0.0
        self._add(c["errors"], (*labels, ("http_code", "400")), rate * float(p["http_4xx"]) * dt)
        self._add(c["errors"], (*labels, ("http_code", "500")), (rate * float(p["http_5xx"]) + front) * dt)
        for key, dist in (("ttft", ttft_d), ("queue", Dist.of(p["queue"])), ("prefill", Dist.of(p["prefill"])),
                          ("decode", decode_d), ("e2e", e2e_d), ("inference", inference_d), ("tpot", tpot_d)):
            self._hist(key, labels, n, dist)
        prompt = n * prompt_d.mean()
        self._add(c["prompt_tokens"], labels, prompt)
        self._add(c["generation_tokens"], labels, n * out_d.mean())
        self._add(c["cached_tokens"], labels, prompt * float(p["prefix_hit"]))
        if spec:
            steps = n * max(out_d.mean() - 1, 0.0) / tps
            self._add(c["draft_tokens"], labels, steps * len(accept))
            self._add(c["accepted_tokens"], labels, steps * sum(accept))
            for pos, a in enumerate(accept):
                self._add(c["drafted_per_pos"], (*labels, ("token_position", str(pos))), steps)
                self._add(c["accepted_per_pos"], (*labels, ("token_position", str(pos))), steps * a)
        kv = p["kv"][0] if isinstance(p["kv"], list) else p["kv"]
        for key, value in (("running", p["running"]), ("waiting", p["waiting"]), ("kv_usage", kv)):
            self._s(g[key], self.gauge_labels, False).values.append(0.0 if zero else float(value))


# --- a gateway in front of the replicas: the llm-d endpoint picker (EPP) -----------------------

GATEWAY_DEFAULTS: dict[str, Any] = {
    "state": "serving",  # serving | down (the EPP's target fails its scrape)
    "overhead": 0.01,  # seconds the gateway adds to every request's TTFT and duration (routing, hop)
    "errors": 0.0,  # share of requests the gateway answers with an error (error_code ModelServerError)
    # per second: rejected before the body is parsed, no endpoint can take it (error counter only,
    # error_code ServiceUnavailable)
    "rejected": 0.0,
    # share of requests answered with a client error (4xx: half error_code BadRequest, half NotFound,
    # an unknown model); the EPP counts them in its request and error counters
    "client_errors": 0.0,
    "streaming": 0.8,  # share of streaming requests (TTFT of the others is their whole duration)
}


def go_le(b: float) -> str:
    """The `le` value as client_golang writes it (shortest 'g'): 2, 0.005, 1.25, 3600, +Inf."""
    if b == math.inf:
        return "+Inf"
    text = repr(float(b))
    return text[:-2] if text.endswith(".0") else text


class GatewayModel:
    """The fleet's `gateway:` mapping: release, names it emits, target labels, traffic and events."""

    def __init__(self, data: dict, spec: dict, namespace: str, pool: str) -> None:
        data = copy.deepcopy(data)
        selector = dict(spec.get("selector") or {})
        self.version = version(data.pop("version", spec.get("engine_version", "0.10.0")))
        release = next(r for r in DATA["llm_d_epp"]["releases"] if in_range(r, self.version))
        # dual emission: a release writes its own names and the deprecated twins (emits: [..] overrides)
        self.emits = list(data.pop("emits", release["emits"]))
        self.pool = data.pop("pool", pool)  # the InferencePool's name (label `name` of the pool gauges)
        self._read(data, selector, namespace, "llm-d-epp", GATEWAY_DEFAULTS, "gateway")

    def _read(self, data: dict, selector: dict, namespace: str, job: str, defaults: dict, what: str) -> None:
        """What every gateway of the fleet has: its target labels (the spec's selector, else `job` and
        the fleet's namespace), traffic over `defaults`, `split_by` and events; any field left in
        `data` is unknown."""
        self.job = data.pop("job", selector.get("job", job))
        self.namespace = data.pop("namespace", selector.get("namespace", namespace))
        self.traffic = {**defaults, **(data.pop("traffic", {}) or {})}
        self.split_by, self.events = _gateway_events(data, defaults, what)
        if data:
            raise ValueError(f"unknown {what} fields: {', '.join(sorted(data))}")

    def at(self, t: int, value: str | None = None) -> dict[str, Any]:
        """The traffic of the gateway (of the one in front of the replicas labelled `value`)."""
        p = dict(self.traffic)
        for start, end, only, patch in self.events:
            if start <= t < end and only in (None, value):
                p.update(patch)
        return p


def _gateway_events(data: dict, defaults: dict, what: str) -> tuple[str | None, list]:
    """`split_by` (one gateway in front of each value of a replica label, e.g. each cluster's own)
    and the events, each for every gateway or `only` the one of a value."""
    split_by = data.pop("split_by", None)
    events = []
    for e in data.pop("events", []) or []:
        unknown = set(e.get("set", {})) - set(defaults)
        if unknown:
            raise ValueError(f"unknown {what} traffic fields {sorted(unknown)}")
        if "only" in e and split_by is None:
            raise ValueError(f"{what} event with `only` needs `split_by`")
        end = seconds(e["to"]) if "to" in e else 10**9
        events.append((seconds(e.get("from", 0)), end, e.get("only"), e.get("set", {})))
    return split_by, events


def gateway_targets(fleet: Fleet, gw: GatewayModel) -> list[tuple[str | None, list[Replica], Labels]]:
    """(value, the replicas behind it, its extra labels) of each gateway target: one in front of
    every replica, or one per value of `split_by` (each cluster's gateway, labelled like its pods)."""
    if gw.split_by is None:
        return [(None, fleet.replicas, ())]
    values = sorted({r.labels[gw.split_by] for r in fleet.replicas if gw.split_by in r.labels})
    if not values:
        raise ValueError(f"gateway split_by {gw.split_by!r}: no replica carries that label")
    return [(v, [r for r in fleet.replicas if r.labels.get(gw.split_by) == v], ((gw.split_by, v),)) for v in values]


class GatewaySeries:
    """The EPP's series, step by step, from what the replicas behind it serve: every request a
    serving replica finishes passed the gateway, with the gateway's overhead added to its TTFT and
    duration. One EPP target (`index`: which, with `split_by`); each generation of names it emits
    gets the same values."""

    def __init__(self, fleet: Fleet, gw: GatewayModel, target: tuple = (None, None, ()), index: int = 0) -> None:
        self.f, self.gw = fleet, gw
        self.value, replicas, extra = target
        self.replicas = fleet.replicas if replicas is None else replicas
        self.series: dict[tuple[str, Labels], Series] = {}
        instance = ("instance", f"10.0.7.{11 + index}:9090")
        self.base: Labels = (("job", gw.job), ("namespace", gw.namespace), instance, *extra)
        d = DATA["llm_d_epp"]
        self.duration = tuple((*(float(b) for b in d["duration_buckets"]), math.inf))
        self.ttft = tuple((*(float(b) for b in d["ttft_buckets"]), math.inf))
        self.gens = [d["generations"][g] for g in gw.emits]

    def _s(self, name: str, labels: Labels, integer: bool) -> Series:
        s = self.series.get((name, labels))
        if s is None:
            s = self.series[(name, labels)] = Series(name, labels, integer)
        return s

    def _add(self, name: str, labels: Labels, inc: float, integer: bool = True) -> None:
        s = self._s(name, labels, integer)
        s.acc += inc
        s.values.append(float(math.floor(s.acc + 1e-9)) if integer else round(s.acc, 6))

    def _labels(self, gen: dict, extra: tuple[str, ...] = ()) -> Labels:
        values = {"model_name": self.f.model, "target_model_name": self.f.model, "fairness_id": "", "priority": "0"}
        names = [*gen["request_labels"], *extra]
        return (*self.base, *((k, values[k]) for k in names))

    def _hist(self, name: str, labels: Labels, bounds: tuple[float, ...], parts: list[tuple[float, Dist]]) -> None:
        """One histogram observed from several replicas (n requests of distribution d each)."""
        for b in bounds:
            self._add(f"{name}_bucket", (*labels, ("le", go_le(b))), sum(n * d.cdf(b) for n, d in parts))
        self._add(f"{name}_count", labels, sum(n for n, _ in parts))
        self._add(f"{name}_sum", labels, sum(n * d.mean() for n, d in parts), False)

    def _point(self, t: int) -> dict:
        """The target's state and values at minute t."""
        return self.gw.at(t, self.value)

    def build(self) -> list[Series]:
        up = self._s("up", self.base, True)
        was_up = False
        for t in self.f.steps():
            p = self._point(t)
            if p["state"] == "down":
                up.values.append(0.0)
                for s in self.series.values():
                    if s is not up:
                        s.values.append("stale" if was_up else None)
                was_up = False
                continue
            up.values.append(1.0)
            known = set(self.series)
            self._step(t, p, first=not was_up)
            for k, s in self.series.items():
                if k not in known and len(s.values) < len(up.values):
                    s.values[:0] = [None] * (len(up.values) - len(s.values))
            was_up = True
        return list(self.series.values())

    def _step(self, t: int, p: dict, first: bool) -> None:
        f = self.f
        dt = 0 if first else STEP
        ttft_parts: list[tuple[float, Dist]] = []
        e2e_parts: list[tuple[float, Dist]] = []
        kv: list[float] = []
        waiting: list[float] = []
        running = 0.0
        for r in self.replicas:
            rp = r.at(t)
            if rp["state"] != "serving":
                continue
            n = rp["rate"] * dt
            ttft = Dist.of(rp["ttft"])
            out_d = Dist.of(rp["output_tokens"])
            accept = list((rp["spec_decode"] or {}).get("accept", []))
            tpot = Dist.of(rp["tpot"]) if rp["tpot"] is not None else Dist.of(rp["itl"]).scaled(1 / (1.0 + sum(accept)))
            e2e = out_d.shifted(-1).scaled(tpot.mean()).shifted(ttft.mean()) if rp["e2e"] == "auto" else Dist.of(rp["e2e"])
            ttft_parts.append((n, ttft.shifted(p["overhead"])))
            e2e_parts.append((n, e2e.shifted(p["overhead"])))
            kvs = rp["kv"] if isinstance(rp["kv"], list) else [rp["kv"]]
            kv.append(sum(kvs) / len(kvs))
            waiting.append(float(rp["waiting"]))
            running += float(rp["running"])
        total = sum(n for n, _ in ttft_parts)
        share = float(p["streaming"])
        for gen in self.gens:
            req = self._labels(gen, tuple(gen.get("requests_extra_labels", ())))
            self._add(gen["requests"], req, total)
            err = self._labels(gen)
            self._add(gen["errors"], (*err, ("error_code", "ModelServerError")), total * float(p["errors"]))
            client = total * float(p["client_errors"]) / 2
            self._add(gen["errors"], (*err, ("error_code", "ServiceUnavailable")), float(p["rejected"]) * dt)
            self._add(gen["errors"], (*err, ("error_code", "BadRequest")), client)
            self._add(gen["errors"], (*err, ("error_code", "NotFound")), client)
            self._hist(gen["duration"], self._labels(gen), self.duration, e2e_parts)
            if "ttft" in gen:
                lab = self._labels(gen)
                self._hist(gen["ttft"], (*lab, ("streaming", "true")), self.ttft, [(n * share, d) for n, d in ttft_parts])
                self._hist(gen["ttft"], (*lab, ("streaming", "false")), self.ttft, [(n * (1 - share), d) for n, d in e2e_parts])
            run_labels = self._labels(gen) if gen is DATA["llm_d_epp"]["generations"]["llm_d_epp"] else (*self.base, ("model_name", f.model))
            self._s(gen["running"], run_labels, False).values.append(running)
            pool = (*self.base, ("name", self.gw.pool))
            self._s(gen["pool_kv"], pool, False).values.append(round(sum(kv) / len(kv), 6) if kv else 0.0)
            self._s(gen["pool_queue"], pool, False).values.append(round(sum(waiting) / len(waiting), 6) if waiting else 0.0)
            self._s(gen["pool_ready"], pool, False).values.append(float(len(kv)))


# --- NVIDIA Dynamo's frontend in front of the workers --------------------------------------------

DYNAMO_DEFAULTS: dict[str, Any] = {
    "state": "serving",  # serving | down (the frontend's target fails its scrape)
    "overhead": 0.005,  # seconds the frontend adds to TTFT and duration (tokenizing, routing, hop)
    "errors": 0.0,  # share of requests failed with error_type="overload" (also model_rejection_total)
    "internal": 0.0,  # share of requests failed with error_type="internal"
    "cancelled": 0.0,  # share of requests the client cancels (error_type="cancelled", model_cancellation_total)
    "invalid": 0.0,  # share of requests rejected as invalid (error_type="validation")
    "streaming": 0.8,  # share of request_type="stream"
}


class DynamoModel(GatewayModel):
    """The fleet's `gateway:` mapping for a Dynamo frontend: release, target labels, traffic, events."""

    def __init__(self, data: dict, spec: dict, namespace: str, pool: str) -> None:
        data = copy.deepcopy(data)
        selector = dict(spec.get("selector") or {})
        self.version = version(data.pop("version", spec.get("engine_version", "1.6.1")))
        self.emits = []
        self.pool = pool
        self._read(data, selector, namespace, "dynamo-frontend", DYNAMO_DEFAULTS, "dynamo frontend")


class DynamoSeries(GatewaySeries):
    """The Dynamo frontend's series (one target, label `model`) from what the workers behind it
    serve: every request a serving worker finishes passed the frontend, with its overhead added."""

    def __init__(self, fleet: Fleet, gw: DynamoModel, target: tuple = (None, None, ()), index: int = 0) -> None:
        self.f, self.gw = fleet, gw
        self.value, replicas, extra = target
        self.replicas = fleet.replicas if replicas is None else replicas
        self.series = {}
        self.base = (("job", gw.job), ("namespace", gw.namespace), ("instance", f"10.0.8.{11 + index}:8000"), *extra)
        d = DATA["dynamo"]
        self.names = d["frontend"]
        self.model_labels: Labels = (*self.base, ("model", fleet.model))
        self.bounds = {k: tuple((*(float(b) for b in d[f"{k}_buckets"]), math.inf)) for k in ("ttft", "itl", "duration")}

    def _step(self, t: int, p: dict, first: bool) -> None:
        n = self.names
        dt = 0 if first else STEP
        ttft_parts: list[tuple[float, Dist]] = []
        itl_parts: list[tuple[float, Dist]] = []
        e2e_parts: list[tuple[float, Dist]] = []
        tokens = running = waiting = 0.0
        for r in self.replicas:
            rp = r.at(t)
            if rp["state"] != "serving":
                continue
            k = rp["rate"] * dt
            ttft = Dist.of(rp["ttft"])
            out_d = Dist.of(rp["output_tokens"])
            accept = list((rp["spec_decode"] or {}).get("accept", []))
            tpot = Dist.of(rp["tpot"]) if rp["tpot"] is not None else Dist.of(rp["itl"]).scaled(1 / (1.0 + sum(accept)))
            e2e = out_d.shifted(-1).scaled(tpot.mean()).shifted(ttft.mean()) if rp["e2e"] == "auto" else Dist.of(rp["e2e"])
            ttft_parts.append((k, ttft.shifted(p["overhead"])))
            e2e_parts.append((k, e2e.shifted(p["overhead"])))
            itl_parts.append((k * max(out_d.mean() - 1, 0), Dist.of(rp["itl"])))
            tokens += k * out_d.mean()
            running += float(rp["running"])
            waiting += float(rp["waiting"])
        total = sum(k for k, _ in ttft_parts)
        m = self.model_labels
        shares = {"overload": p["errors"], "internal": p["internal"], "cancelled": p["cancelled"], "validation": p["invalid"]}
        ok = max(1.0 - sum(float(v) for v in shares.values()), 0.0)
        stream = float(p["streaming"])
        ep = ("endpoint", n["endpoint"])
        for rtype, share in (("stream", stream), ("unary", 1 - stream)):
            base = (*m, ep, ("request_type", rtype))
            self._add(n["requests"], (*base, ("status", "success"), ("error_type", "")), total * share * ok)
            for kind, part in shares.items():
                self._add(n["requests"], (*base, ("status", "error"), ("error_type", kind)), total * share * float(part))
            self._add(n["cancellations"], base, total * share * float(p["cancelled"]))
        self._add(n["rejections"], (*m, ep), total * float(p["errors"]))
        self._add(n["output_tokens"], m, tokens)
        self._hist(n["ttft"], m, self.bounds["ttft"], ttft_parts)
        self._hist(n["itl"], m, self.bounds["itl"], itl_parts)
        self._hist(n["duration"], m, self.bounds["duration"], e2e_parts)
        self._s(n["active"], m, False).values.append(running + waiting)
        self._s(n["queued"], m, False).values.append(waiting)


# --- a gateway recording the OpenTelemetry GenAI server metrics (Envoy AI Gateway) ------------------

OTEL_SERVER_DEFAULTS: dict[str, Any] = {
    "state": "serving",  # serving | down (the gateway's target fails its scrape)
    "overhead": 0.005,  # seconds the gateway adds to TTFT and duration (routing, the hop to the pod)
    "errors": 0.0,  # share of requests answered with an error (error.type="500")
}


class OtelServerModel(GatewayModel):
    """The fleet's `gateway:` mapping for a gateway recording gen_ai.server.*: conventions release,
    target labels, traffic, events."""

    def __init__(self, data: dict, spec: dict, namespace: str, pool: str) -> None:
        data = copy.deepcopy(data)
        selector = dict(spec.get("selector") or {})
        self.version = version(data.pop("conventions", spec.get("conventions", "1.44.0")))
        self.emits = []
        self.pool = pool
        self._read(data, selector, namespace, "envoy-ai-gateway", OTEL_SERVER_DEFAULTS, "otel-genai-server gateway")


class OtelServerSeries(GatewaySeries):
    """The gateway's gen_ai.server.* series as the OpenTelemetry Python SDK's Prometheus exporter
    writes them (the labels and `le` spelling of tests/fixtures/otel_genai/<release>/server.txt),
    from what the replicas behind it serve, with its overhead added. Failed requests are observed
    by the request duration only, labelled error_type="500" and without a response model; time to
    first token and per output token count successful responses only."""

    def __init__(self, fleet: Fleet, gw: OtelServerModel, target: tuple = (None, None, ()), index: int = 0) -> None:
        self.f, self.gw = fleet, gw
        self.value, replicas, extra = target
        self.replicas = fleet.replicas if replicas is None else replicas
        self.series = {}
        self.base = (("job", gw.job), ("namespace", gw.namespace), ("instance", f"10.0.8.{11 + index}:1064"), *extra)
        release = gw.version
        provider = "gen_ai_provider_name" if release >= (1, 37, 0) else "gen_ai_system"
        scope: Labels = ()
        if release >= (1, 43, 0):
            schema = f"https://opentelemetry.io/schemas/{'.'.join(map(str, release))}"
            scope = (("otel_scope_name", "envoy-ai-gateway"), ("otel_scope_schema_url", schema))
        self.common: Labels = (
            ("gen_ai_operation_name", "chat"),
            (provider, "openai"),
            ("gen_ai_request_model", fleet.model),
            ("server_address", "llm-gateway.inference.svc"),
            ("server_port", "80"),
            *scope,
        )
        self.duration = (*OTEL_DURATION_BUCKETS, math.inf)
        self.ttft = (*OTEL_SERVER_TTFT_BUCKETS, math.inf)
        self.tpot = (*OTEL_SERVER_TPOT_BUCKETS, math.inf)

    def _hist(self, name: str, labels: Labels, bounds: tuple[float, ...], parts: list[tuple[float, Dist]]) -> None:
        """As GatewaySeries._hist, with `le` as the Python exporter writes it (1.0, 0.005, +Inf)."""
        for b in bounds:
            le = "+Inf" if b == math.inf else repr(float(b))
            self._add(f"{name}_bucket", (*labels, ("le", le)), sum(n * d.cdf(b) for n, d in parts))
        self._add(f"{name}_count", labels, sum(n for n, _ in parts))
        self._add(f"{name}_sum", labels, sum(n * d.mean() for n, d in parts), False)

    def _step(self, t: int, p: dict, first: bool) -> None:
        dt = 0 if first else STEP
        ttft_parts: list[tuple[float, Dist]] = []
        e2e_parts: list[tuple[float, Dist]] = []
        tpot_parts: list[tuple[float, Dist]] = []
        failed = 0.0
        kept = 1.0 - float(p["errors"])
        for r in self.replicas:
            rp = r.at(t)
            if rp["state"] != "serving":
                continue
            k = rp["rate"] * dt
            ttft = Dist.of(rp["ttft"])
            out_d = Dist.of(rp["output_tokens"])
            tpot = Dist.of(rp["tpot"]) if rp["tpot"] is not None else Dist.of(rp["itl"])
            e2e = out_d.shifted(-1).scaled(tpot.mean()).shifted(ttft.mean()) if rp["e2e"] == "auto" else Dist.of(rp["e2e"])
            ttft_parts.append((k * kept, ttft.shifted(p["overhead"])))
            e2e_parts.append((k * kept, e2e.shifted(p["overhead"])))
            tpot_parts.append((k * kept, tpot))
            failed += k * float(p["errors"])
        ok = (*self.base, *self.common, ("gen_ai_response_model", self.f.model))
        err = (*self.base, *self.common, ("error_type", "500"))
        self._hist("gen_ai_server_request_duration_seconds", ok, self.duration, e2e_parts)
        self._hist("gen_ai_server_request_duration_seconds", err, self.duration, [(failed, Dist.of(float(p["overhead"])))])
        self._hist("gen_ai_server_time_to_first_token_seconds", ok, self.ttft, ttft_parts)
        self._hist("gen_ai_server_time_per_output_token_seconds", ok, self.tpot, tpot_parts)


# --- an application in front of the gateway or the replicas: OpenTelemetry GenAI client metrics ----

# the conventions' recommended boundaries (docs/gen-ai/gen-ai-metrics.md), as the Python SDK's
# Prometheus exporter writes them when the application sets them through a View
OTEL_DURATION_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)
OTEL_SERVER_TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
OTEL_SERVER_TPOT_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)
OTEL_TOKEN_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864)

CLIENT_DEFAULTS: dict[str, Any] = {
    "state": "serving",  # serving | down (the application's target fails its scrape)
    # seconds the path in front of the servers adds to every call's first chunk and duration (the
    # network, the gateway's hop, the application's own queueing); retries add their waits here
    "overhead": 0.03,
    # operations per second per served request that fail before any server answers (connection
    # errors, timeouts the application gives up on): counted by the application only
    "errors": 0.0,
    "error_type": "APITimeoutError",  # error.type of those failures (the OpenAI client's class name)
    "timeout": 10.0,  # seconds a failed operation took (its duration observation)
    "streaming": 1.0,  # share of streaming calls (only they observe time to first chunk)
    # tokens per operation: the replicas' prompt and output lengths, or "real": the operations of
    # the real bodies (real_token_mix), each hour of the day another 16 of them in recorded order
    "token_mix": None,
    "input_scale": 1.0,  # multiplies the input tokens per operation (a prompt or retrieval change)
    "output_scale": 1.0,  # multiplies the output tokens per operation (answers cut short)
}


def real_operations() -> list[tuple[int, int]]:
    """(input, output tokens) of each successful operation tests/fixtures/otel_genai/*/client.txt
    recorded, as make_bodies.py draws them (random.Random(33), the same draws in the same order,
    without the OpenTelemetry SDK; tests/test_client.py holds their totals to the bodies')."""
    import random

    rng = random.Random(33)
    ok: list[tuple[int, int]] = []
    for _ in range(400):  # make_bodies.OPERATIONS
        draw, failed = rng.random(), False
        for share in (0.02, 0.01):  # make_bodies.FAILURES: timeouts, server errors
            if draw < share:
                failed = True
                break
            draw -= share
        rng.uniform(0.005, 0.03), rng.uniform(0.08, 0.6), rng.uniform(0.012, 0.03)  # network, TTFT, TPOT
        chunks = rng.randint(40, 400)
        tokens = rng.randint(200, 3000)
        for _ in range(chunks - 1):
            rng.uniform(0.7, 1.3)  # chunk times
        if not failed:
            ok.append((tokens, chunks))
    return ok


def real_token_mix(hours: int = 24) -> list[tuple[Dist, Dist]]:
    """The real operations (real_operations) in `hours` consecutive slices: one distribution of
    input and one of output tokens per slice, through the slice's own values."""
    ok = real_operations()
    size = len(ok) // hours
    out = []
    for h in range(hours):
        part = ok[h * size : (h + 1) * size]
        out.append(tuple(_empirical([op[k] for op in part]) for k in (0, 1)))
    return out  # type: ignore[return-value]


def _empirical(values: list[int]) -> Dist:
    ordered = sorted(values)
    return Dist(tuple((float(v), i / (len(ordered) - 1)) for i, v in enumerate(ordered)))


class ClientModel:
    """The fleet's `client:` mapping (and the spec's client block): the application's job,
    instances, model name, conventions release, traffic and events."""

    def __init__(self, data: dict, spec: dict, model: str) -> None:
        data = copy.deepcopy(data)
        selector = dict(spec.get("selector") or {})
        self.job = data.pop("job", selector.get("job", "chat-frontend"))
        self.namespace = data.pop("namespace", selector.get("namespace", "chat-app"))
        self.instances = int(data.pop("instances", 2))
        # gen_ai.request.model as the application writes it: its name of the pods' model
        mine = {v: k for k, v in (spec.get("model_names") or {}).items()}
        self.model = data.pop("request_model", mine.get(model, model))
        self.response_model = model
        # the conventions release of each instance's instrumentation (a list: one per instance, cycled,
        # two releases side by side during the application's rollout)
        releases = data.pop("conventions", spec.get("conventions", "1.44.0"))
        self.versions = [version(v) for v in (releases if isinstance(releases, list) else [releases])]
        self.traffic = {**CLIENT_DEFAULTS, **(data.pop("traffic", {}) or {})}
        _, self.events = _gateway_events(data, CLIENT_DEFAULTS, "client")
        if data:
            raise ValueError(f"unknown client fields: {', '.join(sorted(data))}")

    def at(self, t: int) -> dict[str, Any]:
        p = dict(self.traffic)
        for start, end, _, patch in self.events:
            if start <= t < end:
                p.update(patch)
        return p


class ClientSeries(GatewaySeries):
    """One application instance's OpenTelemetry GenAI client series (the SDK's Prometheus exporter,
    underscores with suffixes, the labels of tests/fixtures/otel_genai/1.41.1/client.txt), from
    what the replicas serve: each instance issues an equal share of every served request, with the
    gateway's and the client's overhead added; failures before any server answered come on top."""

    def __init__(self, fleet: Fleet, cl: ClientModel, index: int) -> None:
        self.f, self.cl, self.index = fleet, cl, index
        release = cl.versions[index % len(cl.versions)]
        self.series = {}
        instance = ("instance", f"10.0.9.{11 + index}:9464")
        self.base: Labels = (("job", cl.job), ("namespace", cl.namespace), instance)
        self.duration = (*OTEL_DURATION_BUCKETS, math.inf)
        self.tokens = (*(float(b) for b in OTEL_TOKEN_BUCKETS), math.inf)
        # gen_ai.system renamed gen_ai.provider.name at 1.37.0; the SDK's exporter adds the scope labels
        # from 0.64b0, whose conventions package is 1.41.1 and later (tests/fixtures/otel_genai/1.44.0)
        provider = "gen_ai_provider_name" if release >= (1, 37, 0) else "gen_ai_system"
        scope: Labels = ()
        if release >= (1, 43, 0):
            schema = f"https://opentelemetry.io/schemas/{'.'.join(map(str, release))}"
            scope = (("otel_scope_name", "chat-frontend"), ("otel_scope_schema_url", schema))
        self.common: Labels = (
            ("gen_ai_operation_name", "chat"),
            (provider, "openai"),
            ("gen_ai_request_model", cl.model),
            ("server_address", "llm-gateway.inference.svc"),
            ("server_port", "80"),
            *scope,
        )
        self.chunks = release >= (1, 41, 0)
        self.mix = real_token_mix() if any(p.get("token_mix") for p in (cl.traffic, *(e[3] for e in cl.events))) else []

    def _point(self, t: int) -> dict:
        return self.cl.at(t)

    def _step(self, t: int, p: dict, first: bool) -> None:
        f = self.f
        dt = 0 if first else STEP
        share = 1 / self.cl.instances
        gw = f.gateway.at(t) if f.gateway is not None else {"overhead": 0.0, "errors": 0.0}
        in_front = float(p["overhead"]) + float(gw.get("overhead", 0.0))
        ttft_parts: list[tuple[float, Dist]] = []
        e2e_parts: list[tuple[float, Dist]] = []
        chunk_parts: list[tuple[float, Dist]] = []
        prompt_parts: list[tuple[float, Dist]] = []
        output_parts: list[tuple[float, Dist]] = []
        served = 0.0
        for r in f.replicas:
            rp = r.at(t)
            if rp["state"] != "serving":
                continue
            n = rp["rate"] * dt * share
            served += n
            ttft = Dist.of(rp["ttft"])
            out_d = Dist.of(rp["output_tokens"])
            tpot = Dist.of(rp["tpot"]) if rp["tpot"] is not None else Dist.of(rp["itl"])
            e2e = out_d.shifted(-1).scaled(tpot.mean()).shifted(ttft.mean()) if rp["e2e"] == "auto" else Dist.of(rp["e2e"])
            ttft_parts.append((n * float(p["streaming"]), ttft.shifted(in_front)))
            e2e_parts.append((n, e2e.shifted(in_front)))
            chunk_parts.append((n * float(p["streaming"]) * max(out_d.mean() - 1, 0.0), tpot))
            if p["token_mix"] == "real":
                prompt, output = self.mix[(t // 3600) % len(self.mix)]
            else:
                prompt, output = Dist.of(rp["prompt_tokens"]), out_d
            prompt_parts.append((n, prompt.scaled(float(p["input_scale"]))))
            output_parts.append((n, output.scaled(float(p["output_scale"]))))
        ok = (*self.base, *self.common, ("gen_ai_response_model", self.cl.response_model))
        # the servers' error answers reach the application as errors too (InternalServerError)
        server_errors = served * float(gw.get("errors", 0.0))
        failed = served * float(p["errors"])
        done = served - server_errors
        kept = done / served if served else 0.0
        self._hist("gen_ai_client_operation_duration_seconds", ok, self.duration, [(n * kept, d) for n, d in e2e_parts])
        timeout = Dist.of(float(p["timeout"]))
        err = (*self.base, *self.common, ("error_type", str(p["error_type"])))
        self._hist("gen_ai_client_operation_duration_seconds", err, self.duration, [(failed, timeout)])
        served_err = (*self.base, *self.common, ("error_type", "InternalServerError"))
        self._hist("gen_ai_client_operation_duration_seconds", served_err, self.duration, [(server_errors, Dist.of(in_front))])
        if self.chunks:
            self._hist("gen_ai_client_operation_time_to_first_chunk_seconds", ok, self.duration, ttft_parts)
            self._hist("gen_ai_client_operation_time_per_output_chunk_seconds", ok, self.duration, chunk_parts)
        for kind, parts in (("input", prompt_parts), ("output", output_parts)):
            self._hist("gen_ai_client_token_usage", (*ok, ("gen_ai_token_type", kind)), self.tokens, parts)
