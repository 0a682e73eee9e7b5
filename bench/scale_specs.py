"""Large specs for the build benchmark: `specs/chat.yaml` with many SLOs and many models.

SLOs cycle through the latency SLIs and the success SLI, with thresholds taken from vLLM
0.33's default buckets (a threshold must be a bucket boundary) and objectives from 90 % to
99.9 %, so no two SLOs are alike. Model names look like served model names."""

from __future__ import annotations

import itertools
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
THRESHOLDS = {
    "ttft": ("100ms", "250ms", "500ms", "750ms", "1s", "2.5s", "5s"),
    "itl": ("25ms", "50ms", "75ms", "100ms", "150ms", "200ms"),
    "e2e": ("5s", "10s", "15s", "20s", "30s", "60s"),
    "queue_time": ("500ms", "1s", "2s", "5s"),
}
OBJECTIVES = ("90%", "95%", "99%", "99.5%", "99.9%")


def slos(n: int) -> list[dict]:
    out = []
    slis = itertools.cycle([*THRESHOLDS, "success"])
    for i in range(n):
        sli = next(slis)
        slo = {"name": f"slo-{i:04d}-{sli.replace('_', '-')}", "sli": sli, "objective": OBJECTIVES[i % len(OBJECTIVES)]}
        if sli != "success":
            options = THRESHOLDS[sli]
            slo["threshold"] = options[(i // 5) % len(options)]
        out.append(slo)
    return out


def write(folder: Path, name: str, n_slos: int, n_models: int = 1) -> Path:
    spec = yaml.safe_load((REPO / "specs" / "chat.yaml").read_text())
    spec["name"] = name
    spec["slos"] = slos(n_slos)
    if n_models > 1:
        spec["service"]["models"] = [f"org-{i % 37:02d}/model-{i:05d}-instruct" for i in range(n_models)]
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path
