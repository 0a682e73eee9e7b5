"""Helpers of the end-to-end test: a real Prometheus server on loopback scraping
simulated vLLM exporters, with the rule files genobs generated."""

from __future__ import annotations

import base64
import contextlib
import http.server
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from genobs.build import Output, render_spec
from genobs.catalog import load_catalog
from genobs.promql import metric_names
from genobs.sim import Simulator

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop_process(proc: subprocess.Popen | None) -> None:
    """Terminate a server the test started (kill it if it does not exit within 15 s)."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)


def tail_log(path: Path, name: str, tail: int) -> str:
    """The last `tail` lines of a server's log file, for a failure message."""
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return f"(no {name} log)"
    return "\n".join(lines[-tail:])


@contextlib.contextmanager
def static_exporter(bodies: dict[str, bytes]) -> Iterator[int]:
    """A loopback HTTP server answering GET <path> with bodies[path] (text exposition format),
    404 otherwise; yields its port."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            body = bodies.get(self.path)
            self.send_response(200 if body else 404)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.end_headers()
            self.wfile.write(body or b"")

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def poll(check: Callable[[], object], deadline: float, interval: float = 0.5, what: str = "condition") -> object:
    """Call `check` until it returns something truthy or the monotonic `deadline` passes."""
    last: object = None
    while True:
        last = check()
        if last:
            return last
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out waiting for {what} (last result: {last!r})")
        time.sleep(interval)


def first_firing(api: Callable[[str, dict], object], params: dict | None = None, window: str = "1h") -> dict[tuple, float]:
    """(alertname, severity, cluster) -> timestamp of the first evaluation at which the alert
    fired, from the ALERTS series a server holds (Prometheus' own, or what vmalert wrote into
    VictoriaMetrics): read through `api(path, params)`, the raw samples of the last `window`.
    The evaluation's own time, whatever delayed the test's polling."""
    data = api("query", {"query": f'ALERTS{{alertstate="firing"}}[{window}]', **(params or {})})
    assert data["resultType"] == "matrix", data
    found: dict[tuple, float] = {}
    for s in data["result"]:
        m = s["metric"]
        key = (m["alertname"], m.get("severity"), m.get("cluster"))
        found[key] = min([found.get(key, float("inf")), *(float(t) for t, _ in s["values"])])
    return found


# --- the spec ------------------------------------------------------------------------------


def render_variant(spec: Path, tmp: Path, **service: str) -> tuple[Output, dict]:
    """render_spec on a copy of `spec` with a 1m rate window, 1s evaluation and `service` fields replaced."""
    data = yaml.safe_load(spec.read_text())
    data["rate_window"] = "1m"
    data["evaluation_interval"] = "1s"
    data.setdefault("service", {}).update(service)
    path = tmp / spec.name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return render_spec(path), data


@dataclass(frozen=True)
class Rule:
    group: str
    record: str | None
    alert: str | None
    expr: str
    labels: dict[str, str]


def rules_of(out: Output) -> list[Rule]:
    rules = []
    for name, data in sorted(out.files.items()):
        if not (name.startswith("prometheus/") and name.endswith(".rules.yaml")):
            continue
        for g in yaml.safe_load(data)["groups"]:
            for r in g["rules"]:
                rules.append(Rule(g["name"], r.get("record"), r.get("alert"), r["expr"], r.get("labels", {})))
    return rules


def target_level_records(rules: list[Rule], engine: str = "vllm") -> set[str]:
    """Recorded names computed only from per-target series (`up`, the API server's process
    metrics): they carry no model_name by design."""
    catalog = load_catalog(engine)
    target_level = {r.name for m in catalog.metrics.values() if m.process for r in m.names} | {"up"}
    deps: dict[str, set[str]] = {}
    for r in rules:
        if r.record:
            deps.setdefault(r.record, set()).update(metric_names(r.expr))

    def raw(name: str, seen: frozenset = frozenset()) -> set[str]:
        if name not in deps or name in seen:
            return {name}
        return set().union(*(raw(d, seen | {name}) for d in deps[name]))

    return {rec for rec in deps if raw(rec) <= target_level}


@dataclass(frozen=True)
class PanelQuery:
    panel: str
    expr: str
    legend: str


def dashboard_queries(out: Output) -> tuple[dict, list[PanelQuery]]:
    """(dashboard JSON, every target of every panel) of the generated Grafana dashboard."""
    name = next(n for n in out.files if n.startswith("grafana/") and n.endswith(".json"))
    dash = json.loads(out.files[name])
    found: list[PanelQuery] = []

    def walk(panels: list) -> None:
        for p in panels:
            walk(p.get("panels", []))
            for t in p.get("targets", []):
                if t.get("expr"):
                    found.append(PanelQuery(p.get("title", "?"), t["expr"], t.get("legendFormat", "")))

    walk(dash.get("panels", []))
    for row in dash.get("rows", []):
        walk(row.get("panels", []))
    return dash, found


GRAFANA_BUILTINS = {
    "__rate_interval": "1m",
    "__interval": "1s",
    "__range": "1m",
    "__interval_ms": "1000",
    "__range_s": "60",
    "__range_ms": "60000",
}


def fill_variables(expr: str, values: dict[str, str]) -> str:
    """Replace $var, ${var} and [[var]] the way Grafana does for a single selected value."""
    allv = {**GRAFANA_BUILTINS, **values}

    def sub(m: re.Match) -> str:
        name = m.group(1) or m.group(2) or m.group(3)
        if name not in allv:
            raise KeyError(f"no value for dashboard variable ${name} in {expr}")
        return allv[name]

    return re.sub(r"\$\{(\w+)(?::\w+)?\}|\[\[(\w+)\]\]|\$(\w+)", sub, expr)


# --- processes -------------------------------------------------------------------------------


@dataclass
class Target:
    """One simulated exporter Prometheus scrapes, with its own target labels."""

    name: str
    sim: Simulator
    labels: dict[str, str] = field(default_factory=dict)

    @property
    def instance(self) -> str:
        return f"127.0.0.1:{self.sim.port}"


class Prometheus:
    """Debian's prometheus binary on a free loopback port, its log in a file; with
    `basic_auth` (user, password) its HTTP API requires them (--web.config.file)."""

    def __init__(
        self,
        workdir: Path,
        config: dict,
        rule_files: dict[str, bytes],
        basic_auth: tuple[str, str] | None = None,
        shared_rules: tuple[Path, ...] = (),
    ):
        """`shared_rules`: rule files another server loads too, at the same paths: Prometheus
        evaluates a group at an offset hashed from its name and file, so the two evaluate those
        groups at the same moments."""
        self.workdir = workdir
        self.basic_auth = basic_auth
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = workdir / "prometheus.log"
        rules_dir = workdir / "rules"
        rules_dir.mkdir(parents=True, exist_ok=True)
        paths = []
        for name, data in rule_files.items():
            p = rules_dir / name
            p.write_bytes(data)
            paths.append(str(p))
        self.config = {**config, "rule_files": [*map(str, shared_rules), *paths]}
        self.config_path = workdir / "prometheus.yml"
        self.config_path.write_text(yaml.safe_dump(self.config, sort_keys=False))
        self.proc: subprocess.Popen | None = None
        self.started = 0.0

    @property
    def rule_paths(self) -> tuple[Path, ...]:
        return tuple(Path(p) for p in self.config["rule_files"])

    def start(self, timeout: float = 30.0) -> None:
        cmd = [
            PROMETHEUS,
            f"--config.file={self.config_path}",
            f"--storage.tsdb.path={self.workdir / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--log.level=info",
        ]
        if self.basic_auth is not None:
            import bcrypt

            user, password = self.basic_auth
            hashed = bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4)).decode()
            web = self.workdir / "web.yml"
            web.write_text(yaml.safe_dump({"basic_auth_users": {user: hashed}}))
            cmd.append(f"--web.config.file={web}")
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=self.workdir
            )
        self.started = time.monotonic()
        deadline = self.started + timeout

        def ready() -> bool:
            if self.proc.poll() is not None:
                raise RuntimeError(f"prometheus exited with {self.proc.returncode}:\n{self.log()}")
            try:
                with urllib.request.urlopen(self._request(self.url + "/-/ready"), timeout=2) as r:
                    return r.status == 200
            except (urllib.error.URLError, OSError):
                return False

        poll(ready, deadline, 0.2, "prometheus /-/ready")

    def stop(self) -> None:
        stop_process(self.proc)

    def log(self, tail: int = 200) -> str:
        return tail_log(self.log_path, "prometheus", tail)

    # --- HTTP API ---------------------------------------------------------------------------
    def _request(self, url: str) -> urllib.request.Request:
        headers = {}
        if self.basic_auth is not None:
            headers["Authorization"] = "Basic " + base64.b64encode(":".join(self.basic_auth).encode()).decode()
        return urllib.request.Request(url, headers=headers)

    def api(self, path: str, params: dict | list | None = None) -> object:
        query = urllib.parse.urlencode(params or {}, doseq=True)
        url = f"{self.url}/api/v1/{path}" + (f"?{query}" if query else "")
        try:
            with urllib.request.urlopen(self._request(url), timeout=10) as r:
                body = json.load(r)
        except urllib.error.HTTPError as exc:
            body = json.loads(exc.read() or b"{}")
            raise AssertionError(f"{path} {params}: HTTP {exc.code}: {body.get('error')}") from None
        if body.get("status") != "success":
            raise AssertionError(f"{path} {params}: {body}")
        return body["data"]

    def query(self, expr: str) -> list[dict]:
        data = self.api("query", {"query": expr})
        assert data["resultType"] == "vector", data
        return data["result"]

    def rules(self) -> list[dict]:
        return self.api("rules")["groups"]

    def alerts(self) -> list[dict]:
        return self.api("alerts")["alerts"]

    def label_values(self, label: str, match: str | None = None) -> list[str]:
        return self.api(f"label/{label}/values", {"match[]": match} if match else None)


def rule_files_of(out: Output) -> dict[str, bytes]:
    """The Prometheus rule files of a build, by file name, as `Prometheus` loads them."""
    return {
        name.removeprefix("prometheus/"): data
        for name, data in out.files.items()
        if name.startswith("prometheus/") and name.endswith(".rules.yaml")
    }


@contextlib.contextmanager
def scraping_every_second(tmp: Path, job: dict, rule_files: dict[str, bytes]) -> Iterator[Prometheus]:
    """A Prometheus scraping `job` and evaluating `rule_files` every second, started and
    stopped here; yields it once its first scrape is in."""
    job = {**job, "scrape_interval": "1s", "scrape_timeout": "1s"}
    config = {"global": {"scrape_interval": "1s", "evaluation_interval": "1s"}, "scrape_configs": [job]}
    prom = Prometheus(tmp, config, rule_files)
    with stopping([], prom):
        prom.start()
        poll(lambda: prom.query("up == 1"), prom.started + 30, 0.5, "a first scrape")
        yield prom


def alert_raised(prom: Prometheus, model: str, label: str, value: str, deadline: float) -> list[dict] | None:
    """Poll until an alert with `label`=`value` is pending or firing for `model_name`=`model`;
    None (not an exception) when the deadline passes, so the caller can say what it saw."""

    def raised():
        active = [
            a
            for a in prom.alerts()
            if a["labels"].get("model_name") == model and a["state"] in ("pending", "firing")
        ]
        return active if any(a["labels"].get(label) == value for a in active) else None

    try:
        return poll(raised, deadline, 1.0, f"{label}={value} alert for {model}")
    except TimeoutError:
        return None


def active_alerts(prom: Prometheus) -> list[tuple[str, str | None, str]]:
    """(alertname, model_name, state) of every active alert, for a failure message."""
    return [(a["labels"]["alertname"], a["labels"].get("model_name"), a["state"]) for a in prom.alerts()]


def assert_rules_healthy(prom: Prometheus) -> None:
    """Every rule of every group has been evaluated, without an error."""

    def evaluated():
        groups = prom.rules()
        rules = [r for g in groups for r in g["rules"]]
        return groups if rules and all(r["health"] != "unknown" for r in rules) else None

    groups = poll(evaluated, prom.started + 30, 0.5, "every rule evaluated")
    bad = [
        f"{g['name']}: {r.get('name')} {r['health']} {r.get('lastError')!r}"
        for g in groups
        for r in g["rules"]
        if r["health"] != "ok" or r.get("lastError")
    ]
    assert not bad, "\n".join(bad)


def prometheus_config(job: str, targets: list[Target], relabel: list[dict] | None) -> dict:
    """Global 1s scrape/evaluation; one job named after the spec selector's job, selector labels on each target."""
    scrape: dict = {
        "job_name": job,
        "scrape_interval": "1s",
        "scrape_timeout": "1s",
        "static_configs": [{"targets": [t.instance], "labels": {**t.labels, "sim": t.name}} for t in targets],
    }
    if relabel:
        scrape["metric_relabel_configs"] = relabel
    return {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [scrape],
    }


@contextlib.contextmanager
def stopping(sims: list[Simulator], prom: Prometheus | None = None) -> Iterator[None]:
    """Stop Prometheus and every simulator on the way out, whatever happens; a failure to stop is printed."""
    try:
        yield
    finally:
        for stop in ([prom.stop] if prom is not None else []) + [s.stop for s in sims]:
            try:
                stop()
            except Exception as exc:  # keep stopping the others, keep the original error
                print(f"stopping {stop}: {exc!r}")


class Simulate:
    """`genobs simulate <args>` in its own process on a free port; `url` and `instance` from its banner."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "genobs", "simulate", "--port", "0", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=Path(__file__).parents[1],
        )
        self.banner = self.proc.stdout.readline()
        if " on http://" not in self.banner:
            if self.proc.poll() is None:
                self.proc.kill()
            error = self.proc.stderr.read()
            self.stop()
            raise RuntimeError(f"simulate did not start: {self.banner!r} {error}")
        self.url = self.banner.split(" on ", 1)[1].split(" ", 1)[0]
        self.instance = self.url.removeprefix("http://").split("/", 1)[0]

    def stop(self) -> None:
        stop_process(self.proc)
        self.proc.stdout.close()
        self.proc.stderr.close()


def env_with_repo(repo: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(repo) + os.pathsep + os.environ.get("PYTHONPATH", "")}
