"""The pipeline in one place: load -> plan -> render -> write -> check."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from genobs import promtool
from genobs.errors import Problem, SpecError
from genobs.loader import load_spec
from genobs.writer import MARKER, dump_json, dump_yaml, marker, replace_dirs


@dataclass(frozen=True)
class Output:
    name: str
    spec_file: str
    files: dict[str, bytes]
    warnings: tuple[str, ...] = ()


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


def render_spec(path: Path, kubernetes: bool | None = None) -> Output:
    """Everything a spec compiles to, in memory. Raises SpecError. `kubernetes`:
    True adds kubernetes/ whatever the spec says; None follows `kubernetes.enabled`."""
    from genobs.plan import load_plan
    from genobs.render.dashboard import render_dashboard
    from genobs.render.rules import render_rule_files
    from genobs.render.runbook import render_runbook

    doc, plan = load_plan(path)
    files: dict[str, bytes] = {}
    for name, data in render_rule_files(plan).items():
        files[f"prometheus/{name}"] = dump_yaml(data, plan.name)
    for name, data in plan.unit_tests:
        files[f"prometheus/tests/{name}"] = dump_yaml(data, plan.name)
    files["alertmanager/inhibit-rules.yaml"] = dump_yaml({"inhibit_rules": list(plan.inhibit_rules)}, plan.name)
    files[f"grafana/{plan.dashboard.uid}.json"] = dump_json(render_dashboard(plan.dashboard))
    files["RUNBOOK.md"] = render_runbook(plan, plan.name).encode("utf-8")
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
    return Output(plan.name, str(path), files, plan.warnings)


def render_all(
    paths: list[Path], kubernetes: bool | None = None, on_output: Callable[[Output], None] | None = None
) -> list[Output]:
    """Render every spec; collect every problem before failing. Anything but a
    SpecError is re-raised as InternalError naming the spec. `on_output` sees each
    accepted output as soon as it is rendered (checks start while the next renders)."""
    problems: list[Problem] = []
    outputs: list[Output] = []
    names: dict[str, str] = {}
    uids: dict[str, str] = {}
    for path in spec_files(paths):
        try:
            out = render_spec(path, kubernetes=kubernetes)
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
        uid = next(f[len("grafana/") : -len(".json")] for f in out.files if f.startswith("grafana/"))
        if uid in uids:
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
        uids[uid] = str(path)
        names[out.name] = str(path)
        outputs.append(out)
        if on_output is not None:
            on_output(out)
    if problems:
        raise SpecError(problems)
    return outputs


def write(
    outputs: list[Output],
    root: Path,
    force: bool = False,
    check: Callable[[list[tuple[Path, Path]]], None] | None = None,
) -> list[Path]:
    """Stage every output folder, run `check` on the staged folders, then swap all in
    (see writer.replace_dirs: all or nothing)."""
    return replace_dirs({root / out.name: out.files for out in outputs}, force=force, check=check)


def check_jobs(target: Path, name: str | None = None, split: bool = False) -> list[Callable[[], promtool.Result]]:
    """The checks of one output folder, each runnable on its own (`name`: the spec's name,
    when the folder is a copy under another name): one promtool check rules over every rule
    file, one promtool test rules per test file (so they can run in parallel), and the
    PrometheusRule manifest's groups. `split` (a private copy only: it writes beside the
    files): each test group over only the rules it reads (testsplit), all groups of a test
    file in one promtool (its start-up costs as much as a small group)."""
    prometheus = target / "prometheus"
    rules = sorted(prometheus.glob("*.yaml"))
    jobs: list[Callable[[], promtool.Result]] = [lambda: promtool.check_rules(rules)]
    for test in sorted((prometheus / "tests").glob("*.yaml")):
        jobs.append(lambda test=test: _test_rules(prometheus, test.relative_to(prometheus), name or target.name, split))
    operator_rule = target / "kubernetes" / "prometheusrule.yaml"
    if operator_rule.is_file():
        jobs.append(lambda: check_prometheusrule(operator_rule, name or target.name))
    return jobs


def _test_rules(prometheus: Path, test: Path, name: str, split: bool) -> promtool.Result:
    """promtool test rules on one test file (split: done in the job, off the rendering thread)."""
    from genobs import testsplit

    parts = testsplit.split_tests(prometheus, test, name) if split else None
    return promtool.test_rules(parts) if parts else promtool.test_rules([test], cwd=prometheus)


def check(target: Path, name: str | None = None) -> list[promtool.Result]:
    """promtool check rules (and test rules, where tests exist) on one output folder."""
    return [job() for job in check_jobs(target, name)]


class Checks:
    """promtool on every output as soon as it is rendered, in parallel (one process per core),
    on a private copy of its files in a temporary folder: the bytes that will be swapped in,
    checked while later specs still render. Results come back in submission order."""

    def __init__(self, workers: int | None = None):
        import os
        import tempfile
        from concurrent.futures import ThreadPoolExecutor

        self._tmp = tempfile.TemporaryDirectory(prefix="genobs-check-")
        self._pool = ThreadPoolExecutor(max_workers=workers or os.cpu_count() or 2)
        self._futures: list = []

    def submit(self, out: Output) -> None:
        target = Path(self._tmp.name) / out.name
        for rel, data in out.files.items():
            path = target / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        self._futures += [self._pool.submit(job) for job in check_jobs(target, out.name, split=True)]

    def results(self) -> list[promtool.Result]:
        return [f.result() for f in self._futures]

    def close(self) -> None:
        for f in self._futures:
            f.cancel()
        self._pool.shutdown(wait=True)
        self._tmp.cleanup()

    def __enter__(self) -> Checks:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def check_prometheusrule(path: Path, name: str | None = None) -> promtool.Result:
    """promtool check rules on the groups a PrometheusRule manifest embeds."""
    import tempfile

    import yaml

    groups = yaml.safe_load(path.read_bytes())["spec"]["groups"]
    name = name or path.parent.parent.name
    with tempfile.TemporaryDirectory(prefix="genobs-") as tmp:
        rules = Path(tmp) / f"{name}.prometheusrule.rules.yaml"
        rules.write_bytes(dump_yaml({"groups": groups}, name))
        return promtool.check_rules([rules])
