"""A Prometheus HTTP API on loopback that makes up its history, for `genobs backtest` tests of
what a real one cannot easily hold: long labels, hostile answers, an echo of the credentials.
It answers status/flags, status/runtimeinfo, series and range-selector queries (the raw
pull) from a list of label sets, one sample every `scrape` seconds at any time; query_range
(rules evaluated on the source) answers from the same series, keeping the labels of the
expression's first `by (...)` as an aggregation would. `answers` replaces the answer
of an endpoint: a function of the request that returns (status, body)."""

from __future__ import annotations

import contextlib
import json
import re
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Request:
    path: str  # after /api/v1/
    params: dict[str, str]
    authorization: str


Answer = Callable[[Request], tuple[int, bytes]]


def ok(data: object) -> bytes:
    return json.dumps({"status": "success", "data": data}).encode()


@dataclass
class FakeSource:
    series: list[dict[str, str]]
    scrape: int = 15
    flags: dict[str, str] = field(default_factory=lambda: {"query.lookback-delta": "5m"})
    answers: dict[str, Answer] = field(default_factory=dict)
    seen: list[Request] = field(default_factory=list)

    def answer(self, req: Request) -> tuple[int, bytes]:
        self.seen.append(req)
        if req.path in self.answers:
            return self.answers[req.path](req)
        if req.path == "status/flags":
            return 200, ok(self.flags)
        if req.path == "status/runtimeinfo":
            return 200, ok({"storageRetention": "90d"})
        if req.path == "series":
            return 200, ok(self.matching(req.params.get("match[]", "")))
        if req.path == "query":
            found = re.fullmatch(r"(.*)\[(\d+)s\]", req.params.get("query", ""))
            if found is None:
                return 200, ok({"resultType": "vector", "result": []})
            end, span = float(req.params["time"]), int(found.group(2))
            times = range(int((end - span) // self.scrape + 1) * self.scrape, int(end) + 1, self.scrape)
            result = [{"metric": s, "values": [[t, str(t % 600)] for t in times]} for s in self.matching(found.group(1))]
            return 200, ok({"resultType": "matrix", "result": result})
        if req.path == "query_range":  # a rule evaluated on the source: its raw series, unaggregated
            first, last, step = (float(req.params[k]) for k in ("start", "end", "step"))
            times = [first + i * step for i in range(int((last - first) / step) + 1)]
            expr = req.params.get("query", "")
            # the labels an aggregation keeps (its first `by (...)`), as a real server would give them
            by = re.search(r"\bby \(([^)]*)\)", expr)
            keep = {k.strip() for k in by.group(1).split(",")} if by else None
            metrics: dict[tuple, dict[str, str]] = {}
            for s in self.series:
                if s.get("__name__", "") + "{" in expr:
                    labels = {k: v for k, v in s.items() if k != "__name__" and (keep is None or k in keep)}
                    metrics.setdefault(tuple(sorted(labels.items())), labels)
            result = [{"metric": m, "values": [[t, "1"] for t in times]} for m in metrics.values()]
            return 200, ok({"resultType": "matrix", "result": result})
        return 404, b'{"status":"error","error":"not found"}'

    def matching(self, selector: str) -> list[dict[str, str]]:
        name = selector.split("{")[0]
        return [s for s in self.series if not name or s.get("__name__") == name]


@contextlib.contextmanager
def serving(fake: FakeSource) -> Iterator[str]:
    """`fake` on a free loopback port; yields its base URL."""

    class Handler(BaseHTTPRequestHandler):
        def _reply(self, body: bytes) -> None:
            path, _, query = self.path.partition("?")
            params = dict(urllib.parse.parse_qsl(query + "&" + body.decode("utf-8", "replace")))
            req = Request(path.removeprefix("/api/v1/"), params, self.headers.get("Authorization", ""))
            status, data = fake.answer(req)
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            try:
                self.wfile.write(data)
            except OSError:
                pass

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            self._reply(b"")

        def do_POST(self) -> None:  # noqa: N802
            self._reply(self.rfile.read(int(self.headers.get("Content-Length") or 0)))

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def fleet(names: list[str], pods: int, **extra: str) -> list[dict[str, str]]:
    """One series per name and pod, with the labels the chat fixtures' selectors match."""
    out = []
    for name in names:
        for pod in range(pods):
            labels = {"__name__": name, "namespace": "llm-prod", "job": "vllm-chat", "model_name": "gpt-oss-120b"}
            labels |= {"instance": f"10.0.0.{pod}:8000", "engine": "0", **extra}
            out.append(labels)
    return out
