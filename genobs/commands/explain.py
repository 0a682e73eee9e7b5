"""After `plan`: `genobs explain` prints an alert's or signal's PromQL, thresholds, `for` and first action."""

from __future__ import annotations

import difflib
import functools
import textwrap
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import click
import yaml

from genobs import naming

DEFAULT_SPEC_FILE = "<built-in chat spec>"


@functools.cache
def signal_data() -> dict:
    """The built-in signals and alerts, with the capacity ones (genobs/data/capacity.yaml)."""
    data = resources.files("genobs.data")
    base = yaml.safe_load(data.joinpath("signals.yaml").read_text(encoding="utf-8"))
    extra = yaml.safe_load(data.joinpath("capacity.yaml").read_text(encoding="utf-8"))
    return {key: {**base[key], **extra[key]} for key in ("signals", "alerts")}


def known_names(alert_prefix: str = "Vllm", renames: tuple[tuple[str, str], ...] = ()) -> list[str]:
    """Every alert and signal name genobs knows without a spec (for completion and hints), the
    alerts named as the engine of `alert_prefix` and `renames` names them (vLLM's by default)."""
    data = signal_data()
    return [*(naming.alert(alert_prefix, key, renames) for key in data["alerts"]), *data["signals"]]


@dataclass(frozen=True)
class Match:
    kind: str  # "alert" | "signal"
    name: str
    signal: str
    key: str = ""  # an alert's engine-neutral key (signals.yaml, capacity.yaml)


def _alert_keys(plan) -> dict[str, tuple[str, str]]:
    """Alert name -> (key, signal): the plan's alerts, then every built-in one under the plan's prefix."""
    out = {a.name: (a.key, a.signal) for a in plan.alerts}
    for key, a in signal_data()["alerts"].items():
        out.setdefault(naming.alert(plan.alert_prefix, key, plan.alert_renames), (key, a["signal"]))
    return out


def resolve(name: str, plan) -> Match | None:
    data = signal_data()
    lower = name.strip().lower()
    for n, (key, signal) in _alert_keys(plan).items():
        if n.lower() == lower:
            return Match("alert", n, signal, key)
    for s in data["signals"]:
        if s.lower() == lower.replace("-", "_"):
            return Match("signal", s, s)
    return None


def suggestions(name: str, plan) -> list[str]:
    names = sorted({*known_names(plan.alert_prefix, plan.alert_renames), *(a.name for a in plan.alerts)})
    by_lower = {n.lower(): n for n in names}
    return [by_lower[m] for m in difflib.get_close_matches(name.lower(), list(by_lower), n=2, cutoff=0.6)]


def _wrap(text: str, indent: str = "  ") -> str:
    return textwrap.fill(" ".join(str(text).split()), width=100, initial_indent=indent, subsequent_indent=indent)


def _handbook(plan) -> dict[str, dict]:
    """alert name -> title, meaning, first_action, next_checks (regular alerts and SLO alerts)."""
    out: dict[str, dict] = {}
    for e in plan.runbook:
        out[e.alert] = {
            "title": e.title,
            "meaning": e.meaning,
            "first_action": e.first_action,
            "next_checks": list(e.next_checks),
        }
    for e in plan.slo_runbook:
        out[e["alert"]] = {k: e.get(k) for k in ("title", "meaning", "first_action", "next_checks")}
    return out


def _selectors(expr: str) -> list[tuple[str, dict[str, str]]]:
    """(series name, equality matchers) of every named selector in the expression."""
    from genobs.promql import equal_selectors

    return [(name, dict(eq)) for name, eq in equal_selectors(expr) if name]


def _recorded_inputs(plan, exprs: list[str]) -> list:
    """Recording rules whose series the expressions read, in rule order."""
    selectors = [sel for e in exprs for sel in _selectors(e)]
    return [
        r
        for r in plan.recording_rules
        if any(name == r.record and all(eq.get(k, v) == v for k, v in r.labels) for name, eq in selectors)
    ]


def explain_alert(name: str, plan, spec_label: str) -> str:
    data = signal_data()
    rules = [a for a in plan.alerts if a.name == name]
    key, signal = _alert_keys(plan)[name]
    from genobs.plan.alerts import handbook

    info = _handbook(plan).get(name) or _named(handbook(data, key, signal), plan)
    out = [f"{name} - {info.get('title') or signal} (signal {signal})", f"spec: {spec_label}", ""]
    out += ["What it watches", _wrap(info.get("meaning") or rules[0].summary if rules else info.get("meaning")), ""]
    if not rules:
        defaults = data["alerts"].get(key, {})
        out.append("Not generated for this spec" + _absent_reason(signal, plan) + ".")
        if defaults.get("thresholds"):
            levels = ", ".join(f"{sev} {value}" for sev, value in defaults.get("thresholds", {}).items())
            out.append(f"  Defaults: {levels} (for {defaults.get('for')}).")
        out.append("")
    else:
        out.append("Severities")
        width = max(len(r.severity) for r in rules)
        for r in rules:
            pending = f"for {r.for_}" if r.for_ else "fires at once (no for)"
            out.append(f"  {r.severity:<{width}}  {r.summary}  [{pending}]")
        out += [f"  pages for: {r.protects}" for r in rules if r.protects]
        out.append("")
        for r in rules:
            out += [f"PromQL ({r.severity})", f"  {r.expr}", ""]
        inputs = _recorded_inputs(plan, [r.expr for r in rules])
        if inputs:
            out.append("Recorded series it reads")
            for rec in inputs:
                labels = "{" + ", ".join(f'{k}="{v}"' for k, v in rec.labels) + "}" if rec.labels else ""
                out.append(f"  {rec.record}{labels} = {rec.expr}")
            out.append("")
        first = rules[0]
        if first.panel:
            out += [f"Dashboard panel: {first.panel}", ""]
        out += [f"Runbook: {first.runbook_url}", ""]
        how = dict(plan.approximations).get(signal)
        if how is not None:
            out += [f"Approximation on {plan.engine_release}", _wrap(how), ""]
    out += ["First action", _wrap(info.get("first_action") or "-")]
    checks = info.get("next_checks") or []
    if checks:
        out += ["", "Check next"] + [f"  - {c}" for c in checks]
    return "\n".join(out) + "\n"


def _named(info: dict, plan) -> dict:
    """A built-in handbook entry in the words of the plan's engine: the alerts it names ({alert:Key}),
    {engine} and the profile's {hint:key} facts (Catalog.texts)."""
    from genobs.catalog import load_catalog

    catalog = load_catalog(plan.engine)
    fill = lambda text: " ".join(catalog.texts(str(text)).split()) if text else text  # noqa: E731
    return {k: [fill(c) for c in v] if isinstance(v, list) else fill(v) for k, v in info.items()}


def _absent_reason(signal: str, plan) -> str:
    why = dict(plan.unobservable).get(signal)
    if why is not None:
        return f" (not observable on {plan.engine_release}: {why})"
    needs = {
        "nixl_transfer": "disaggregated_prefill",
        "nixl_failures": "disaggregated_prefill",
        "nixl_kv_expiry": "disaggregated_prefill",
        "spec_decode_acceptance": "speculative_decoding",
    }
    if signal == "nixl_kv_expiry" and any(a.signal == "nixl_failures" for a in plan.alerts):
        return f" (vLLM {plan.engine_version} exports no vllm:nixl_num_kv_expired_reqs; it exists from 0.15.0)"
    if signal in needs:
        return f" (needs features.{needs[signal]}: true)"
    capacity = {
        "goodput": "capacity.goodput with a ttft or tpot bound and an objective",
        "system_efficiency": "a capacity block or use_case capacity",
        "capacity_degradation": "use_case capacity or capacity.degradation",
        "gpu_saturation": "features.gpu_metrics: dcgm and the capacity signals",
        "gpu_memory": "features.gpu_metrics: dcgm and the capacity signals",
        "gpu_memory_full": "features.gpu_metrics: dcgm and the capacity signals",
        "autoscaling": "kubernetes.autoscaling with kube_state_metrics: true",
    }
    if signal in capacity:
        return f" (needs {capacity[signal]})"
    return f" (disabled by the spec or the {plan.use_case} preset)"


def explain_signal(signal: str, plan, spec_label: str) -> str:
    data = signal_data()
    info = _named(data["signals"][signal], plan)
    names = list(dict.fromkeys(a.name for a in plan.alerts if a.signal == signal))
    if not names:
        out = [f"Signal {signal} - {info['title']}", f"spec: {spec_label}", ""]
        out += ["What it watches", _wrap(info["meaning"]), ""]
        out += ["No alert of this signal is generated for this spec" + _absent_reason(signal, plan) + ".", ""]
        out += ["First action", _wrap(info["first_action"])]
        return "\n".join(out) + "\n"
    parts = [f"Signal {signal} - {info['title']}: {len(names)} alert(s): {', '.join(names)}\n"]
    # a layer of the spec (its gateway) that cannot observe the signal, said out loud
    parts += [f"{_wrap(line)}\n" for line in plan.capabilities if f"({signal}) is not observable" in line]
    parts += [explain_alert(n, plan, spec_label) for n in names]
    return "\n".join(parts)


def default_plan():
    from genobs.commands.scaffold import spec_text
    from genobs.compiler import build_plan
    from genobs.loader import load_spec_text

    return build_plan(load_spec_text(spec_text("chat", None, namespace=None), DEFAULT_SPEC_FILE))


def _complete(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[str]:
    """Alert names of every engine (VllmTtftP99High, SglangTtftP99High, ...) and the signals."""
    from genobs.catalog import ENGINES, load_catalog

    catalogs = [load_catalog(e) for e in ENGINES]
    names = dict.fromkeys(n for c in catalogs for n in known_names(c.alert_prefix, c.alert_renames))
    return [n for n in names if n.lower().startswith(incomplete.lower())]


@click.command()
@click.argument("name", required=False, shell_complete=_complete)
@click.option(
    "--spec",
    "spec",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="Spec whose plan supplies PromQL and thresholds. Default: a built-in chat spec.",
)
def explain(name: str | None, spec: Path | None) -> None:
    """Explain NAME (an alert such as VllmTtftP99High, SglangTtftP99High on SGLang, or a signal such as ttft):
    what it watches, its PromQL, thresholds per severity, `for` and the first
    action. Without NAME, list every alert and signal."""
    from genobs.compiler import load_plan

    if spec is not None:
        if not spec.exists():
            click.echo(f"{spec}: error: no such file", err=True)
            raise SystemExit(2)
        from genobs.cli import fail_spec
        from genobs.errors import SpecError

        try:
            plan, label = load_plan(spec)[1], f"{spec} ({{}})"
        except SpecError as exc:
            fail_spec(exc, "nothing to explain until the spec is fixed")
    else:
        plan, label = default_plan(), f"{DEFAULT_SPEC_FILE} ({{}}; pass --spec FILE for yours)"
    label = label.format(f"use case {plan.use_case}, {plan.engine_release or 'vLLM ' + plan.engine_version}")
    if name is None:
        alerts = list(dict.fromkeys(a.name for a in plan.alerts))
        click.echo("Alerts in this plan:\n" + "\n".join(f"  {a}" for a in alerts))
        click.echo("Signals:\n" + "\n".join(f"  {s}" for s in signal_data()["signals"]))
        return
    match = resolve(name, plan)
    if match is None:
        hint = suggestions(name, plan)
        msg = f"error: no alert or signal named {name!r}"
        msg += f"; did you mean {' or '.join(repr(h) for h in hint)}?" if hint else "; `genobs explain` lists them"
        click.echo(msg, err=True)
        raise SystemExit(2)
    if match.kind == "alert":
        click.echo(explain_alert(match.name, plan, label), nl=False)
    else:
        click.echo(explain_signal(match.name, plan, label), nl=False)
