"""Latency quantiles that fall in a histogram's first bucket are shown as "<= bound", not as the
number histogram_quantile interpolates from 0 (an idle real vLLM 0.32 read a queue-time p99 of
0.297 s under its 0.3 s first bound). The bounds are vLLM's own, from the real 0.32 body."""

from __future__ import annotations

import json
import re

from genobs.build import render_spec
from tests.conftest import REPO

# first bucket bounds in the real vLLM 0.32 /metrics body (tests/fixtures/real_vllm_0.32/)
FIRST = {"Time to first token": 0.001, "Inter-token latency": 0.01, "Queue time": 0.3, "End-to-end latency": 0.3}


def _panels(board: dict):
    for p in board.get("panels", []):
        yield p
        yield from _panels(p)


def test_latency_quantiles_below_the_first_bucket_read_as_such():
    out = render_spec(REPO / "specs" / "chat.yaml")
    name = next(n for n in out.files if n.startswith("grafana/"))
    board = json.loads(out.files[name])
    seen = {}
    for panel in _panels(board):
        if panel.get("title") not in FIRST:
            continue
        [override] = [o for o in panel["fieldConfig"]["overrides"] if o["matcher"]["id"] == "byRegexp"]
        [mapping] = override["properties"][0]["value"]
        bound = mapping["options"]["to"]
        seen[panel["title"]] = bound
        assert mapping["options"]["from"] == 0 and "first bucket" in mapping["options"]["result"]["text"]
        legends = [t["legendFormat"] for t in panel["targets"]]
        matched = [leg for leg in legends if re.fullmatch(override["matcher"]["options"], leg)]
        assert len(matched) == 4 and all("mean" not in leg for leg in matched), legends
        assert "first bucket" in panel["description"]
    assert seen == FIRST


def test_the_bounds_are_the_real_bodys():
    body = (REPO / "tests" / "fixtures" / "real_vllm_0.32" / "metrics_loaded.txt").read_text()
    for family, bound in (
        ("vllm:time_to_first_token_seconds", 0.001),
        ("vllm:inter_token_latency_seconds", 0.01),
        ("vllm:request_queue_time_seconds", 0.3),
        ("vllm:e2e_request_latency_seconds", 0.3),
    ):
        les = [float(m) for m in re.findall(rf'^{re.escape(family)}_bucket{{[^}}]*le="([^"+]+)"', body, re.M)]
        assert min(les) == bound, family
