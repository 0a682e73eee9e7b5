"""`check` stage: the real promtool on every rule file and generated unit test of an output,
before `write` swaps anything in (genobs.build). A build of several specs shares promtool runs
between them and keeps one run going per core while later specs still render."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from genobs import promtool
from genobs.writer import dump_yaml

if TYPE_CHECKING:
    from concurrent.futures import Future

    from genobs.build import Output
    from genobs.testsplit import Part

# test groups (units of testsplit.Part.cost, about 0.3 ms of promtool each) a shared run takes
# at least while specs still render: a start-up costs about 370 (promtool parses its flags,
# builds its engine, reads each file) whatever the run holds, so small runs are mostly start-up
RUN_COST = 4000.0
# once every spec is rendered, the rest is shared out in smaller runs (each worker takes its
# share of what is left), so the cores finish together instead of one long run last
LAST_RUN_COST = 800.0


@dataclass(frozen=True)
class Job:
    """One promtool run of the check stage. `cost`: a relative estimate of its CPU time; the
    longest runs start first, so the cores finish together instead of one long run last."""

    run: Callable[[], promtool.Result]
    cost: float = 1.0

    def __call__(self) -> promtool.Result:
        return self.run()


def _rule_sources(target: Path, name: str) -> list[tuple[Path, str | None]]:
    """The files `promtool check rules` reads for one output folder: (path, None) for a
    Prometheus rule file, (path, kind) for a file promtool reads only once converted
    (kind: "backend" for a Thanos, Mimir or vmalert rule file, "operator" for the
    PrometheusRule manifest)."""
    from genobs.render.backends import FOLDERS

    out: list[tuple[Path, str | None]] = [(p, None) for p in sorted((target / "prometheus").glob("*.yaml"))]
    for folder in sorted(set(FOLDERS.values())):
        out += [(p, "backend") for p in sorted((target / folder).glob("*.yaml"))]
    operator_rule = target / "kubernetes" / "prometheusrule.yaml"
    if operator_rule.is_file():
        out.append((operator_rule, "operator"))
    return out


def _as_prometheus_rules(path: Path, kind: str | None, name: str, folder: Path) -> Path:
    """A file promtool reads as it is, or its groups as a Prometheus rule file in `folder`
    (without the keys promtool does not know: partial_response_strategy, source_tenants,
    type, namespace; a PrometheusRule's groups without the manifest around them)."""
    if kind is None:
        return path
    import yaml

    from genobs.render.backends import prometheus_groups

    document = yaml.safe_load(path.read_bytes())
    if kind == "operator":
        rules = folder / f"{name}.prometheusrule.rules.yaml"
        document = document["spec"]
    else:
        rules = folder / f"{name}.{path.parent.name}.{path.name}"
    rules.parent.mkdir(parents=True, exist_ok=True)
    rules.write_bytes(dump_yaml(prometheus_groups(document), name))
    return rules


def _check_rule_sources(sources: list[tuple[Path, str | None, str]], folder: Path) -> promtool.Result:
    """One promtool check rules over the files of one or more outputs ((path, kind, spec name))."""
    return promtool.check_rules([_as_prometheus_rules(p, kind, name, folder) for p, kind, name in sources])


def _check_apart(sources: list[tuple[Path, str | None, str]]) -> promtool.Result:
    """_check_rule_sources with the converted files in a temporary folder of their own."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="genobs-") as tmp:
        return _check_rule_sources(sources, Path(tmp))


def check_backend_rules(path: Path, name: str) -> promtool.Result:
    """promtool check rules on a Thanos, Mimir or vmalert rule file: its groups without the
    keys promtool does not know (partial_response_strategy, source_tenants, type, namespace)."""
    return _check_apart([(path, "backend", name)])


def _test_parts(
    target: Path, name: str, split: bool, documents: dict[str, object] | None
) -> tuple[list[Part], list[Job]]:
    """The generated tests of one output: its test groups each over only the rules it reads
    (`split`, a private copy only: testsplit writes beside the files), and a promtool run per
    test file that is not split."""
    from genobs import testsplit

    prometheus = target / "prometheus"
    cache: dict[Path, object] = {(target / rel).resolve(): data for rel, data in (documents or {}).items()}
    parts: list[testsplit.Part] = []
    whole: list[Job] = []
    for test in sorted((prometheus / "tests").glob("*.yaml")):
        rel = test.relative_to(prometheus)
        split_parts = testsplit.split_parts(prometheus, rel, name, cache) if split else None
        if split_parts:
            parts += split_parts
        else:
            cost = test.stat().st_size / 16  # a whole test file runs about 0.3 ms per 16 bytes
            whole.append(Job(lambda rel=rel: promtool.test_rules([rel], cwd=prometheus), cost=cost))
    return parts, whole


def _test_run(parts: list[Part]) -> Job:
    paths = [p.path for p in parts]
    return Job(lambda: promtool.test_rules(paths), cost=sum(p.cost for p in parts) + 70)


def check_jobs(
    target: Path, name: str | None = None, split: bool = False, documents: dict[str, object] | None = None
) -> list[Job]:
    """The checks of one output folder, each runnable on its own (`name`: the spec's name,
    when the folder is a copy under another name): one promtool check rules over every rule
    file (a backend's and the PrometheusRule manifest's groups included), promtool test rules
    per test file (runs that can go in parallel). `split` (a private copy only: it writes beside
    the files): each test group over only the rules it reads (testsplit), the groups of all test
    files in a few promtool runs of about equal cost (testsplit.chunks)."""
    from genobs import testsplit

    name = name or target.name
    sources = [(p, kind, name) for p, kind in _rule_sources(target, name)]
    # converted files beside the copy's own (split), else in a temporary folder: never into an output
    rules = Job(lambda: _check_rule_sources(sources, target / ".promtool") if split else _check_apart(sources), 170.0)
    parts, whole = _test_parts(target, name, split, documents)
    return [rules, *whole, *(_test_run(run) for run in testsplit.chunks(parts))]


def check(target: Path, name: str | None = None) -> list[promtool.Result]:
    """promtool check rules (and test rules, where tests exist) on one output folder."""
    return [job() for job in check_jobs(target, name)]


class Checks:
    """promtool on every output as soon as it is rendered, in parallel (one process per core),
    on a private copy of its files in a temporary folder: the bytes that will be swapped in,
    checked while later specs still render.

    The outputs share promtool runs: their test groups (each over the rules it reads) go into
    one pool, which a free worker draws runs of about RUN_COST from (longest groups first), and
    once results() is asked for, shares of what is left (LAST_RUN_COST at least); their rule
    files go into one check rules run. Queued runs (`enqueue`, a test file that is not split,
    that rules run) start before the pool's, longest first (`Job.cost`). Results come back in
    the order their runs were queued or drawn."""

    def __init__(self, workers: int | None = None):
        import os
        import threading

        from genobs import scratch

        self._tmp = scratch.make()
        self._queue: list[tuple[float, int, Job, Future]] = []  # a heap: most expensive first
        self._pool: list[Part] = []  # split test groups not in a run yet
        self._sources: list[tuple[Path, str | None, str]] = []  # rule files for the shared check rules run
        self._ready = threading.Condition()
        self._closed = False
        self._sealed = False  # results() asked: no more outputs, the pool is shared out
        self._futures: list[Future] = []
        self._workers = workers or os.cpu_count() or 2
        self._threads = [threading.Thread(target=self._work, daemon=True) for _ in range(self._workers)]
        for t in self._threads:
            t.start()

    def _next(self) -> tuple[Job, Future] | None:
        """The run a free worker starts (with the lock held): a queued one, else one drawn from the pool."""
        import heapq
        from concurrent.futures import Future

        if self._queue:
            _, _, job, future = heapq.heappop(self._queue)
            return job, future
        pooled = sum(p.cost for p in self._pool)
        if not self._pool or (not self._sealed and pooled < RUN_COST):
            return None
        share = max(pooled / self._workers, LAST_RUN_COST if self._sealed else RUN_COST)
        self._pool.sort(key=lambda p: -p.cost)
        taken = 0
        cost = 0.0
        while taken < len(self._pool) and cost < share:
            cost += self._pool[taken].cost
            taken += 1
        run, self._pool = self._pool[:taken], self._pool[taken:]
        future: Future = Future()
        self._futures.append(future)
        if not self._pool:
            self._ready.notify_all()  # results() waits for the pool to be shared out
        return _test_run(run), future

    def _work(self) -> None:
        while True:
            with self._ready:
                found = self._next()
                while found is None and not self._closed:
                    self._ready.wait()
                    found = self._next()
                if found is None:
                    return
            job, future = found
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(job())
            except BaseException as exc:  # re-raised by results(), in the caller's thread
                future.set_exception(exc)

    def submit(self, out: Output) -> None:
        target = Path(self._tmp.name) / out.name
        for rel, data in out.files.items():
            path = target / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        parts, whole = _test_parts(target, out.name, True, out.documents)
        with self._ready:
            self._sources += [(p, kind, out.name) for p, kind in _rule_sources(target, out.name)]
            self._pool += parts
        self.enqueue(whole)

    def enqueue(self, jobs: list[Job]) -> None:
        """Queue runs; a free worker takes the most expensive queued run first."""
        import heapq
        from concurrent.futures import Future

        with self._ready:
            for job in jobs:
                future: Future = Future()
                heapq.heappush(self._queue, (-job.cost, len(self._futures), job, future))
                self._futures.append(future)
            self._ready.notify_all()

    def results(self) -> list[promtool.Result]:
        """Every run's result, once the last is done: the shared check rules run is queued and the
        pool shared out now (no output is submitted after this)."""
        if not self._sealed:
            with self._ready:
                sources, self._sources = self._sources, []
            folder = Path(self._tmp.name) / ".promtool"
            if sources:
                self.enqueue([Job(lambda: _check_rule_sources(sources, folder), cost=170.0 * len(sources))])
            with self._ready:
                self._sealed = True
                self._ready.notify_all()
                while self._pool and not self._closed:
                    self._ready.wait()
        return [f.result() for f in list(self._futures)]

    def close(self) -> None:
        with self._ready:
            for _, _, _, future in self._queue:
                future.cancel()
            self._queue.clear()
            self._pool.clear()
            self._closed = True
            self._ready.notify_all()
        for t in self._threads:
            t.join()
        self._tmp.cleanup()

    def __enter__(self) -> Checks:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
