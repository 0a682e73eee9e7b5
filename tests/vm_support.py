"""Real VictoriaMetrics servers on loopback for the tests: Debian's `victoria-metrics`
(single-node storage, scraping with its own -promscrape.config or receiving remote write),
`vmalert` evaluating genobs' rule files against it and writing recorded series back, and an
Alertmanager as vmalert's notifier. Each server gets a free port and a storage directory
under the test's tmp dir, logs into a file there, and is stopped by `running(...)`.

    with running(VictoriaMetrics(tmp / "vm", scrape=cfg)) as vm, \\
         running(Alertmanager(tmp / "am")) as am, \\
         running(VmAlert(tmp / "vmalert", vm.url, rule_files, notifier=am.url)) as vmalert:
        vm.query("up")
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.e2e_support import free_port, poll, stop_process, tail_log

PACKAGES = {
    "victoria-metrics": "victoria-metrics",
    "vmalert": "victoria-metrics",
    "vmagent": "victoria-metrics",
    "prometheus-alertmanager": "prometheus-alertmanager",
    "alertmanager": "prometheus-alertmanager",
}


def binary(*names: str) -> str:
    """The first of `names` on PATH; a clear test failure naming the Debian package otherwise."""
    for name in names:
        found = shutil.which(name)
        if found:
            return found
    package = PACKAGES.get(names[0], names[0])
    pytest.fail(f"{names[0]} is required: install Debian's {package!r} package (.ci/run does)")


def _get(url: str, timeout: float = 10) -> object:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            text = r.read()
    except urllib.error.HTTPError as exc:
        raise AssertionError(f"GET {url}: HTTP {exc.code}: {exc.read()[:500]!r}") from None
    return json.loads(text) if text else None


class Server:
    """One child process on a free loopback port; `ready_path` answers 200 once it serves."""

    name = "server"
    ready_path = "/health"

    def __init__(self, workdir: Path):
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = workdir / f"{self.name}.log"
        self.proc: subprocess.Popen | None = None

    def command(self) -> list[str]:
        raise NotImplementedError

    def start(self, timeout: float = 30.0) -> None:
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                self.command(), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=self.workdir
            )

        def ready() -> bool:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}:\n{self.log()}")
            try:
                with urllib.request.urlopen(self.url + self.ready_path, timeout=2) as r:
                    return r.status == 200
            except (urllib.error.URLError, OSError):
                return False

        try:
            poll(ready, time.monotonic() + timeout, 0.2, f"{self.name} {self.ready_path}")
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        stop_process(self.proc)

    def log(self, tail: int = 100) -> str:
        return tail_log(self.log_path, self.name, tail)


class VictoriaMetrics(Server):
    """Single-node VictoriaMetrics. `scrape`: a Prometheus-style config (`scrape_configs`) it
    scrapes itself (-promscrape.config); without it, it only stores what is written to
    `remote_write_url` (Prometheus remote write) or `import_url`. `latency_offset` is
    -search.latencyOffset: queries whose time is within it of now are answered at now minus
    it (30s by default in VictoriaMetrics; the tests shorten it, never to zero; None: the default)."""

    name = "victoria-metrics"

    def __init__(
        self, workdir: Path, scrape: dict | None = None, latency_offset: str | None = "5s", flags: tuple[str, ...] = ()
    ):
        super().__init__(workdir)
        self.scrape = scrape
        self.latency_offset = latency_offset
        self.flags = flags

    @property
    def remote_write_url(self) -> str:
        return f"{self.url}/api/v1/write"

    @property
    def import_url(self) -> str:
        return f"{self.url}/api/v1/import/prometheus"

    def command(self) -> list[str]:
        cmd = [
            binary("victoria-metrics"),
            f"-storageDataPath={self.workdir / 'data'}",
            f"-httpListenAddr=127.0.0.1:{self.port}",
            "-retentionPeriod=1d",
            *((f"-search.latencyOffset={self.latency_offset}",) if self.latency_offset is not None else ()),
            # vLLM's cache_config_info carries ~40 labels; the default 30 would drop some
            "-maxLabelsPerTimeseries=64",
            "-loggerLevel=WARN",
        ]
        if self.scrape is not None:
            path = self.workdir / "scrape.yml"
            path.write_text(yaml.safe_dump(self.scrape, sort_keys=False))
            cmd.append(f"-promscrape.config={path}")
        return [*cmd, *self.flags]

    def api(self, path: str, params: dict | None = None) -> object:
        query = urllib.parse.urlencode(params or {}, doseq=True)
        body = _get(f"{self.url}/api/v1/{path}" + (f"?{query}" if query else ""))
        if body.get("status") != "success":
            raise AssertionError(f"{path} {params}: {body}")
        return body["data"]

    def query(self, expr: str, at: float | None = None) -> list[dict]:
        """Instant query; `nocache=1` so a query near now is answered at now, not latency_offset earlier."""
        params = {"query": expr, "nocache": "1"}
        if at is not None:
            params["time"] = f"{at:.3f}"
        data = self.api("query", params)
        assert data["resultType"] == "vector", data
        return data["result"]

    def query_range(self, expr: str, start: float, end: float, step: str = "1s") -> list[dict]:
        data = self.api(
            "query_range", {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": step, "nocache": "1"}
        )
        assert data["resultType"] == "matrix", data
        return data["result"]

    def targets_up(self) -> list[dict]:
        return self.query("up")


class VmAlert(Server):
    """vmalert evaluating `rule_files` (name -> bytes) against `datasource` (a VictoriaMetrics
    URL), writing recorded series and alert state back there, notifying `notifier` URLs.
    A group's own `interval:` wins over `evaluation_interval`. `defaults`: no flag but the
    addresses and the rules (the recorded series' remote write flushes every 5s, not 1s)."""

    name = "vmalert"

    def __init__(
        self,
        workdir: Path,
        datasource: str,
        rule_files: dict[str, bytes],
        notifier: list[str] | str | None = None,
        evaluation_interval: str = "1s",
        flags: tuple[str, ...] = (),
        defaults: bool = False,
    ):
        super().__init__(workdir)
        self.defaults = defaults
        self.datasource = datasource
        self.notifier = [notifier] if isinstance(notifier, str) else list(notifier or [])
        self.evaluation_interval = evaluation_interval
        self.flags = flags
        self.rules_dir = workdir / "rules"
        self.rules_dir.mkdir(parents=True, exist_ok=True)
        self.rule_paths = []
        for name, data in sorted(rule_files.items()):
            path = self.rules_dir / name.replace("/", "_")
            path.write_bytes(data)
            self.rule_paths.append(path)

    def command(self) -> list[str]:
        cmd = [
            binary("vmalert"),
            f"-httpListenAddr=127.0.0.1:{self.port}",
            f"-datasource.url={self.datasource}",
            f"-remoteWrite.url={self.datasource}",
            f"-remoteRead.url={self.datasource}",
            *(() if self.defaults else ("-remoteWrite.flushInterval=1s", f"-evaluationInterval={self.evaluation_interval}")),
            "-loggerLevel=WARN",
            *(f"-rule={p}" for p in self.rule_paths),
        ]
        # vmalert 1.79 refuses alerting rules without a notifier: give it an Alertmanager
        cmd += [f"-notifier.url={u}" for u in self.notifier]
        return [*cmd, *self.flags]

    def groups(self) -> list[dict]:
        """The rule groups in Prometheus' /api/v1/rules shape (each rule with `lastError`)."""
        return _get(f"{self.url}/api/v1/rules")["data"]["groups"]

    def alerts(self) -> list[dict]:
        """Alerts vmalert holds (pending and firing), each with `name`, `labels`, `state`, `value`."""
        return _get(f"{self.url}/api/v1/alerts")["data"]["alerts"] or []

    def rule_errors(self) -> dict[str, str]:
        """rule name -> last evaluation error, for every rule whose last evaluation failed."""
        found = {}
        for g in self.groups():
            for r in g.get("rules") or []:
                if r.get("lastError"):
                    found[f"{g['name']}/{r['name']}"] = r["lastError"]
        return found


class Alertmanager(Server):
    """A real Alertmanager with one null receiver (and `inhibit_rules`, if given); the tests read
    what reached it from its v2 API."""

    name = "alertmanager"
    ready_path = "/-/ready"

    def __init__(self, workdir: Path, inhibit_rules: list[dict] | None = None):
        super().__init__(workdir)
        self.config = {
            "route": {"receiver": "null", "group_wait": "1s", "group_interval": "1s"},
            "receivers": [{"name": "null"}],
            "inhibit_rules": inhibit_rules or [],
        }

    def command(self) -> list[str]:
        path = self.workdir / "alertmanager.yml"
        path.write_text(yaml.safe_dump(self.config, sort_keys=False))
        return [
            binary("prometheus-alertmanager", "alertmanager"),
            f"--config.file={path}",
            f"--storage.path={self.workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--cluster.listen-address=",
        ]

    def alerts(self) -> list[dict]:
        """Every alert Alertmanager holds, with `labels` and `status`."""
        return _get(f"{self.url}/api/v2/alerts") or []


@contextlib.contextmanager
def running(*servers: Server) -> Iterator[Server | tuple[Server, ...]]:
    """Start `servers` in order and stop them in reverse, whatever happens; yields the one
    server or the tuple. A failure to stop is printed, the original error kept."""
    started: list[Server] = []
    try:
        for s in servers:
            s.start()
            started.append(s)
        yield servers[0] if len(servers) == 1 else servers
    finally:
        for s in reversed(started):
            try:
                s.stop()
            except Exception as exc:  # keep stopping the others
                print(f"stopping {s.name}: {exc!r}")


def scrape_config(job: str, targets: list[tuple[str, dict[str, str]]], interval: str = "1s") -> dict:
    """One job scraping `targets` ((host:port, target labels) pairs) every `interval`."""
    return {
        "global": {"scrape_interval": interval},
        "scrape_configs": [
            {
                "job_name": job,
                "scrape_interval": interval,
                "scrape_timeout": interval,
                "static_configs": [{"targets": [t], "labels": labels} for t, labels in targets],
            }
        ],
    }
