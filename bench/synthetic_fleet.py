"""A synthetic vLLM 0.33 fleet as OpenMetrics text for `promtool tsdb create-blocks-from
openmetrics`: every pod exports the series of vLLM's real /metrics body
(bench/vllm_0.33_exposition.txt, vLLM's own output) for two data-parallel engines, plus its
API-server process metrics and `up`, sampled every 30 s.

Bucket shapes and _sum/_count ratios come from the real exposition; counters grow at
steady per-engine rates. What the benchmark measures (how many series and samples each
query touches) depends on the series' labels and count, not on the values."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

EXPOSITION = Path(__file__).with_name("vllm_0.33_exposition.txt")
MODEL = "gpt-oss-120b"
ENGINES = ("0", "1")
SCRAPE_SECONDS = 30
# families a chat fleet without disaggregated prefill or speculative decoding does not export
SKIPPED = ("vllm:nixl_", "vllm:spec_decode_", "vllm:num_requests_kv_fetch_by_stage")
# finished requests per second per engine, by reason
FINISH_RATES = {"stop": 1.9, "length": 0.05, "abort": 0.02, "error": 0.0, "repetition": 0.0}
_SAMPLE = re.compile(r"^([^{\s]+)(?:\{(.*)\})?\s+(\S+)$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


@dataclass
class Family:
    name: str  # OpenMetrics family name (counters without _total)
    type: str
    samples: list[tuple[str, dict[str, str], float]]  # (sample name, labels, value) for engine 0 / the process


def families(path: Path = EXPOSITION) -> list[Family]:
    out: dict[str, Family] = {}
    types: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            types[name] = kind
            continue
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if m is None:
            continue
        sample, labels_text, value = m.groups()
        family = _family_of(sample, types)
        if family is None or sample.endswith("_created") or family.startswith(SKIPPED):
            continue
        labels = dict(_LABEL.findall(labels_text or ""))
        if labels.get("engine", "0") != "0":
            continue
        kind = types[family]
        name = family.removesuffix("_total") if kind == "counter" else family
        out.setdefault(name, Family(name, kind, [])).samples.append((sample, labels, float(value)))
    return list(out.values())


def _family_of(sample: str, types: dict[str, str]) -> str | None:
    if sample in types:
        return sample
    for suffix in ("_bucket", "_sum", "_count", "_total"):
        base = sample.removesuffix(suffix)
        if base != sample and base in types:
            return base
    return None


def _labels(labels: dict[str, str]) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


def _series(fam: Family) -> list[tuple[str, dict[str, str], str, float]]:
    """(sample name, labels, kind, value per second or constant) for one engine / process."""
    out = []
    counts = {
        tuple(sorted((k, v) for k, v in lb.items() if k != "le")): v for s, lb, v in fam.samples if s.endswith("_count")
    }
    for sample, labels, value in fam.samples:
        if fam.type == "histogram":
            key = tuple(sorted((k, v) for k, v in labels.items() if k != "le"))
            total = counts.get(key, 0.0)
            share = value / total if total else 1.0
            if sample.endswith("_count"):
                out.append((sample, labels, "counter", 2.0))
            elif sample.endswith("_sum"):
                out.append((sample, labels, "counter", 2.0 * share))  # mean observation x 2 obs/s
            else:
                out.append((sample, labels, "counter", 2.0 * share))
        elif fam.type == "counter":
            reason = labels.get("finished_reason")
            rate = FINISH_RATES.get(reason, 0.0) if reason is not None else max(value / 60.0, 0.5)
            out.append((sample, labels, "counter", rate))
        else:
            out.append((sample, labels, "gauge", value))
    return out


def pod_labels(pod: int) -> dict[str, str]:
    return {
        "namespace": "llm-prod",
        "job": "vllm-chat",
        "instance": f"10.{pod // 250}.{pod % 250}.1:8000",
        "pod": f"vllm-chat-{pod:04d}",
    }


def series_per_pod() -> int:
    n = 1  # up
    for fam in families():
        engines = len(ENGINES) if any("engine" in lb for _, lb, _ in fam.samples) else 1
        n += len(fam.samples) * engines
    return n


def openmetrics(pods: int, start: int, steps: int, origin: int | None = None) -> Iterator[str]:
    """Chunks of OpenMetrics text: `steps` samples SCRAPE_SECONDS apart from unix time
    `start`. Counters count from `origin` (default `start`), so a long history can be
    written as consecutive pieces whose counters continue across them."""
    stamps = [start + i * SCRAPE_SECONDS for i in range(steps)]
    offsets = [t - (start if origin is None else origin) for t in stamps]

    ends = [f" {t}\n" for t in stamps]
    gauge_ends = "".join(ends)

    def block(name: str, labels: dict[str, str], kind: str, value: float) -> str:
        text = name + _labels(labels)
        if kind == "counter":
            return "".join([f"{text} {round(value * o, 3)}{e}" for o, e in zip(offsets, ends)])
        return f"{text} {value}" + f"{text} {value}".join(gauge_ends.splitlines(keepends=True))

    yield "# TYPE up gauge\n"
    for pod in range(pods):
        yield block("up", pod_labels(pod), "gauge", 1.0)
    for fam in families():
        yield f"# TYPE {fam.name} {fam.type}\n"
        rows = _series(fam)
        for pod in range(pods):
            base = pod_labels(pod)
            parts = []
            for sample, labels, kind, value in rows:
                if "engine" in labels:
                    for engine in ENGINES:
                        lb = {**labels, **base, "engine": engine, "model_name": MODEL}
                        parts.append(block(sample, lb, kind, value))
                else:
                    parts.append(block(sample, {**labels, **base}, kind, value))
            yield "".join(parts)
    yield "# EOF\n"


def write(path: Path, pods: int, start: int, steps: int, origin: int | None = None) -> int:
    """Write the fleet; returns the number of bytes written."""
    size = 0
    with path.open("w", encoding="utf-8") as f:
        for chunk in openmetrics(pods, start, steps, origin):
            f.write(chunk)
            size += len(chunk)
    return size
