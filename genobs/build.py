"""The pipeline in one place: load -> plan -> render -> write (the check stage before the swap:
genobs.checks)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from genobs.errors import Problem, SpecError
from genobs.loader import load_spec
from genobs.writer import MARKER, dump_json, dump_yaml, marker, replace_dirs


@dataclass(frozen=True)
class Output:
    """What one spec compiles to: its files by relative path, with the build's notes."""

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
    return Output(plan.name, str(path), files, plan.warnings, plan.capabilities + plan.slo_layers, documents)


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
