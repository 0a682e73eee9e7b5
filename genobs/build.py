"""The pipeline in one place: load -> plan -> render -> write -> check."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from genobs import promtool
from genobs.errors import Problem, SpecError
from genobs.loader import load_spec
from genobs.writer import MARKER, dump_json, dump_yaml, marker, replace_dirs

if TYPE_CHECKING:
    from concurrent.futures import Future


@dataclass(frozen=True)
class Output:
    name: str
    spec_file: str
    files: dict[str, bytes]
    warnings: tuple[str, ...] = ()
    capabilities: tuple[str, ...] = ()  # what the engine cannot observe (printed as notes)
    # the data behind the YAML rule and test files (same keys as `files`): the check stage
    # splits the tests from it instead of parsing the bytes back. render_all empties it once
    # `on_output` has seen it (several times the size of the bytes, for a large spec)
    documents: dict[str, object] = field(default_factory=dict, compare=False, repr=False)


def spec_files(paths: list[Path]) -> list[Path]:
    out: list[Path] = []
    for p in paths:
        if p.is_dir():
            # FIFOs, sockets and dangling links are kept: loading reports them instead of skipping silently
            out.extend(sorted(x for x in p.iterdir() if x.suffix in (".yaml", ".yml") and not x.is_dir()))
        else:
            out.append(p)
    return out


class InternalError(Exception):
    """An unexpected failure while rendering a spec: a genobs bug, not a spec problem."""


def freeze_imports() -> None:
    """Import what rendering needs, then gc.freeze(): the objects of every module imported so
    far (a few hundred thousand, mostly pydantic's and grafanalib's) leave the collector's
    generations, so the full collections that rendering's allocations set off stop rescanning
    them (7% of a one-spec build). They live as long as the process anyway. Once per process:
    a process that builds again (tests) freezes nothing more."""
    import gc

    if gc.get_freeze_count():
        return

    import grafanalib.core  # noqa: F401
    import jinja2  # noqa: F401

    import genobs.compiler  # noqa: F401
    import genobs.plan  # noqa: F401
    import genobs.render.dashboard  # noqa: F401
    import genobs.render.rules  # noqa: F401
    import genobs.render.runbook  # noqa: F401
    import genobs.testgen.unittests  # noqa: F401

    gc.freeze()


def render_spec(path: Path, kubernetes: bool | None = None, tier: str | None = None) -> Output:
    """Everything a spec compiles to, in memory. Raises SpecError. `kubernetes`:
    True adds kubernetes/ whatever the spec says; None follows `kubernetes.enabled`.
    `tier` (all, edge, global): overrides `output.tier`; edge writes the edge rules and the
    remote_write filter, global the rest with the dashboard, runbook and inhibit rules; the
    promtool unit tests need every rule and come with `all` only."""
    from genobs.compiler import load_plan

    doc, plan = load_plan(path)
    return render_plan(doc, plan, path, kubernetes, tier)


def render_plan(doc, plan, path: Path, kubernetes: bool | None = None, tier: str | None = None) -> Output:
    """render_spec's files from a spec already loaded and planned (`doc`, `plan`): several
    renderings of one plan (backends, tiers) share its planning and test generation."""
    from genobs.plan import tiers
    from genobs.render.backends import backend_files
    from genobs.render.dashboard import render_dashboard
    from genobs.render.rules import render_rule_files
    from genobs.render.runbook import render_runbook

    tier = tier or doc.spec.output.tier
    groups = tiers.groups_of(plan, tier)
    files: dict[str, bytes] = {}
    documents: dict[str, object] = {}
    tests = [(f"tests/{n}", d) for n, d in plan.unit_tests] if tier == "all" else []
    for name, data in [*render_rule_files(plan, groups).items(), *tests]:
        files[f"prometheus/{name}"] = dump_yaml(data, plan.name)
        documents[f"prometheus/{name}"] = data
    for name, data in backend_files(plan, groups, doc.spec.output).items():
        files[name] = dump_yaml(data, plan.name)
        documents[name] = data
    if tier == "edge":
        relabel = {"write_relabel_configs": tiers.write_relabel_configs(plan)}
        files["remote-write.yaml"] = dump_yaml(relabel, plan.name)
    else:
        files["alertmanager/inhibit-rules.yaml"] = dump_yaml({"inhibit_rules": list(plan.inhibit_rules)}, plan.name)
        files[f"grafana/{plan.dashboard.uid}.json"] = dump_json(render_dashboard(plan.dashboard))
        read = tiers.global_runbook(plan) if tier == "global" else plan
        files["RUNBOOK.md"] = render_runbook(read, plan.name).encode("utf-8")
    files[MARKER] = marker(plan.name)
    if kubernetes or doc.spec.kubernetes.enabled:
        from genobs.k8s import KubernetesOptions, kubernetes_files

        k8s = doc.spec.kubernetes
        options = KubernetesOptions(namespace=k8s.namespace, labels=dict(k8s.labels), folder=plan.dashboard.folder)
        for rel, data in kubernetes_files(plan.name, files, options).items():
            files[f"kubernetes/{rel}"] = data
        if k8s.autoscaling is not None:
            from genobs.render.autoscaling import autoscaling_files

            for rel, data in autoscaling_files(doc.spec, lambda d: dump_yaml(d, plan.name)).items():
                files[f"kubernetes/{rel}"] = data
    return Output(plan.name, str(path), files, plan.warnings, plan.capabilities, documents)


def render_all(
    paths: list[Path],
    kubernetes: bool | None = None,
    on_output: Callable[[Output], None] | None = None,
    tier: str | None = None,
) -> list[Output]:
    """Render every spec; collect every problem before failing. Anything but a
    SpecError is re-raised as InternalError naming the spec. `on_output` sees each
    accepted output as soon as it is rendered (checks start while the next renders), with
    its `documents`, which the outputs returned no longer hold."""
    problems: list[Problem] = []
    outputs: list[Output] = []
    names: dict[str, str] = {}
    uids: dict[str, str] = {}
    for path in spec_files(paths):
        try:
            out = render_spec(path, kubernetes=kubernetes, tier=tier)
        except SpecError as exc:
            problems.extend(exc.problems)
            continue
        except Exception as exc:
            first = (str(exc).strip().splitlines() or [""])[0][:300]
            raise InternalError(f"{path}: {type(exc).__name__}: {first}") from exc
        if out.name in names:
            line, col = load_spec(path).positions.get(("name",), (None, None))
            problems.append(
                Problem(
                    f"spec name {out.name!r} is also used by {names[out.name]}; names must be unique (they name out/<name>/)",
                    str(path),
                    line,
                    col,
                    field="name",
                )
            )
            continue
        uid = next((f[len("grafana/") : -len(".json")] for f in out.files if f.startswith("grafana/")), None)
        if uid is not None and uid in uids:
            line, col = load_spec(path).positions.get(("dashboard", "uid"), (None, None))
            problems.append(
                Problem(
                    f"Grafana uid {uid!r} is also used by {uids[uid]}; dashboards need distinct uids",
                    str(path),
                    line,
                    col,
                    field="dashboard.uid",
                )
            )
            continue
        if uid is not None:  # the edge tier has no dashboard
            uids[uid] = str(path)
        names[out.name] = str(path)
        outputs.append(out)
        if on_output is not None:
            on_output(out)
        out.documents.clear()
    if problems:
        raise SpecError(problems)
    return outputs


def write(
    outputs: list[Output],
    root: Path,
    force: bool = False,
    check: Callable[[list[tuple[Path, Path]]], None] | None = None,
    undeleted: list[Path] | None = None,
) -> list[Path]:
    """Stage every output folder, run `check` on the staged folders, then swap all in
    (see writer.replace_dirs: all or nothing)."""
    targets = {root / out.name: out.files for out in outputs}
    return replace_dirs(targets, force=force, check=check, undeleted=undeleted)


@dataclass(frozen=True)
class Job:
    """One promtool run of the check stage. `cost`: a relative estimate of its CPU time; the
    longest runs start first, so the cores finish together instead of one long run last."""

    run: Callable[[], promtool.Result]
    cost: float = 1.0

    def __call__(self) -> promtool.Result:
        return self.run()


def check_jobs(
    target: Path, name: str | None = None, split: bool = False, documents: dict[str, object] | None = None
) -> list[Job]:
    """The checks of one output folder, each runnable on its own (`name`: the spec's name,
    when the folder is a copy under another name): one promtool check rules over every rule
    file, promtool test rules per test file (runs that can go in parallel), and the
    PrometheusRule manifest's groups. `split` (a private copy only: it writes beside the
    files): each test group over only the rules it reads (testsplit, done here, so each
    run's cost is known before it is queued), the groups of all test files in a few promtool
    runs of about equal cost (testsplit.chunks: a start-up costs as much as a small group)."""
    from genobs import testsplit

    prometheus = target / "prometheus"
    rules = sorted(prometheus.glob("*.yaml"))
    # a lint pass over the rules (units of testsplit.Part.cost: about 50 ms)
    jobs = [Job(lambda: promtool.check_rules(rules), cost=170.0)]
    cache: dict[Path, object] = {(target / rel).resolve(): data for rel, data in (documents or {}).items()}
    parts: list[testsplit.Part] = []
    for test in sorted((prometheus / "tests").glob("*.yaml")):
        rel = test.relative_to(prometheus)
        split_parts = testsplit.split_parts(prometheus, rel, name or target.name, cache) if split else None
        if split_parts:
            parts += split_parts
        else:
            cost = test.stat().st_size / 16  # a whole test file runs about 0.3 ms per 16 bytes
            jobs.append(Job(lambda rel=rel: promtool.test_rules([rel], cwd=prometheus), cost=cost))
    for run in testsplit.chunks(parts):
        paths = [p.path for p in run]
        jobs.append(Job(lambda paths=paths: promtool.test_rules(paths), cost=sum(p.cost for p in run) + 70))
    from genobs.render.backends import FOLDERS

    for folder in sorted(set(FOLDERS.values())):
        for backend_rules in sorted((target / folder).glob("*.yaml")):
            jobs.append(Job(lambda p=backend_rules: check_backend_rules(p, name or target.name), cost=170.0))
    operator_rule = target / "kubernetes" / "prometheusrule.yaml"
    if operator_rule.is_file():
        jobs.append(Job(lambda: check_prometheusrule(operator_rule, name or target.name), cost=170.0))
    return jobs


def check(target: Path, name: str | None = None) -> list[promtool.Result]:
    """promtool check rules (and test rules, where tests exist) on one output folder."""
    return [job() for job in check_jobs(target, name)]


class Checks:
    """promtool on every output as soon as it is rendered, in parallel (one process per core),
    on a private copy of its files in a temporary folder: the bytes that will be swapped in,
    checked while later specs still render. Queued runs start longest first (`Job.cost`).
    Results come back in submission order."""

    def __init__(self, workers: int | None = None):
        import os
        import threading

        from genobs import scratch

        self._tmp = scratch.make()
        self._queue: list[tuple[float, int, Job, Future]] = []  # a heap: most expensive first
        self._ready = threading.Condition()
        self._closed = False
        self._futures: list[Future] = []
        self._threads = [threading.Thread(target=self._work, daemon=True) for _ in range(workers or os.cpu_count() or 2)]
        for t in self._threads:
            t.start()

    def _work(self) -> None:
        import heapq

        while True:
            with self._ready:
                while not self._queue and not self._closed:
                    self._ready.wait()
                if not self._queue:
                    return
                _, _, job, future = heapq.heappop(self._queue)
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
        self.enqueue(check_jobs(target, out.name, split=True, documents=out.documents))

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
        return [f.result() for f in self._futures]

    def close(self) -> None:
        with self._ready:
            for _, _, _, future in self._queue:
                future.cancel()
            self._queue.clear()
            self._closed = True
            self._ready.notify_all()
        for t in self._threads:
            t.join()
        self._tmp.cleanup()

    def __enter__(self) -> Checks:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def check_prometheusrule(path: Path, name: str | None = None) -> promtool.Result:
    """promtool check rules on the groups a PrometheusRule manifest embeds."""
    import tempfile

    import yaml

    from genobs.render.backends import prometheus_groups

    groups = prometheus_groups(yaml.safe_load(path.read_bytes())["spec"])  # without a ThanosRuler's keys
    name = name or path.parent.parent.name
    with tempfile.TemporaryDirectory(prefix="genobs-") as tmp:
        rules = Path(tmp) / f"{name}.prometheusrule.rules.yaml"
        rules.write_bytes(dump_yaml(groups, name))
        return promtool.check_rules([rules])


def check_backend_rules(path: Path, name: str) -> promtool.Result:
    """promtool check rules on a Thanos, Mimir or vmalert rule file: its groups without the
    keys promtool does not know (partial_response_strategy, source_tenants, type, namespace)."""
    import tempfile

    import yaml

    from genobs.render.backends import prometheus_groups

    groups = prometheus_groups(yaml.safe_load(path.read_bytes()))
    with tempfile.TemporaryDirectory(prefix="genobs-") as tmp:
        rules = Path(tmp) / f"{name}.{path.parent.name}.{path.name}"
        rules.write_bytes(dump_yaml(groups, name))
        return promtool.check_rules([rules])
