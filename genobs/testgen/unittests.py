"""Part of the `plan` stage: promtool unit tests (`promtool test rules`) for every
alert of a spec. A simulated fleet (unittests_fleet) is healthy, then broken one
signal at a time (unittests_probes); each case asserts the exact labels and
annotations promtool must see, computed from the input series, not from promtool.
Cases whose faults do not disturb each other share a test group, so promtool
evaluates the rules once for all of them."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from genobs import naming
from genobs import promql as q
from genobs.plan import gateway
from genobs.plan.context import Context
from genobs.plan.groups import by_record, follow
from genobs.plan.liveness import capacity_labels, pool_label, replica_labels
from genobs.plan.model import AlertRule, RuleGroup
from genobs.plan.recorder import Recorder
from genobs.testgen.humanize import expected_alert
from genobs.testgen.unittests_baseline import BASELINE_ALERTS, baseline_tests
from genobs.testgen.unittests_fleet import (
    EVALUATION_STEP,
    INPUT_INTERVAL,
    MARGIN_MINUTES,
    Fleet,
    identity,
    input_series,
    on_step,
    quantile_of,
)
from genobs.testgen.unittests_probes import (
    _COMPARE,
    PROBES,
    Env,
    Probe,
    healthy_fleet,
    success_value,
    threshold,
)
from genobs.testgen.unittests_slo import burn_rate, discover_slos, slo_fires, slo_probe, unavailable_probe
from genobs.testgen.unittests_token_shift import SHIFT_ALERT, token_shift_tests
from genobs.units import prom_duration_seconds

# alerts whose tests need hours of history: files of their own (unittests_baseline, unittests_token_shift)
LONG_HISTORY = frozenset({*BASELINE_ALERTS, SHIFT_ALERT})
SLO_MINUTES = 30  # SLO cases: the long windows' traffic gates need some history
PACK_CASES = 32  # cases per test group at most: the example specs pack at most 18


def _minutes(duration: str) -> int:
    return math.ceil(prom_duration_seconds(duration) / 60) if duration else 0


def _sample_text(name: str, labels: dict[str, str]) -> str:
    inner = ",".join(f"{k}={q.quote(v)}" for k, v in sorted(labels.items()))
    return f"{name}{{{inner}}}"


@dataclass
class Case:
    """One alert made to fire at some severities by one fault."""

    name: str
    probe: Probe
    rules: list[AlertRule]
    param: object
    severities: tuple[str, ...]
    minutes: int  # earliest evaluation time at which it must fire
    needs: set[str]
    checks_exprs: bool  # also asserts key recorded series (on the case that fires every severity)

    @property
    def title(self) -> str:
        return f"{self.name} ({', '.join(self.severities)})"


@dataclass
class Pack:
    """Cases sharing one test group: their faults combined into one fleet."""

    fleet: Fleet
    minutes: int
    cases: list[Case] = field(default_factory=list)
    results: list[tuple[list[dict], list[dict]]] = field(default_factory=list)


class _Planner:
    def __init__(
        self,
        ctx: Context,
        rec: Recorder,
        groups: tuple[RuleGroup, ...],
        spec_name: str,
        overall: frozenset[str] = frozenset(),
        keys: dict[str, str] | None = None,
    ):
        keys = keys or {}
        self.ctx, self.rec, self.groups, self.spec_name = ctx, rec, groups, spec_name
        self.overall = overall  # SLOs of `scope: global`: their series and alerts carry no cluster
        # a layer's alert is probed as the engine alert whose fault makes it fire (the gateway's
        # GatewayTtftP99High as TtftP99High, on the gateway's own series)
        self.alerts = [replace(r, key=keys.get(r.name, r.key)) for g in groups for r in g.rules if isinstance(r, AlertRule)]
        self.by_name: dict[str, list[AlertRule]] = {}
        for a in self.alerts:
            self.by_name.setdefault(a.name, []).append(a)
        # recorded name -> its rules: deps() looks one up per selector (a scan grew with rules x SLOs)
        self.recorded_by_name = by_record(r for g in groups for r in g.rules)
        ident = identity(ctx)
        assert ident is not None
        self.env = Env(ctx, ident, _minutes(ctx.window), discover_slos(ctx, groups), alerts=tuple(self.alerts))
        self.env.healthy = healthy_fleet(self.env, self.alerts)
        self.notes: list[str] = []

    # --- what an alert reads ------------------------------------------------------------------
    def deps(self, exprs: list[str]) -> set[str]:
        """Exported series the expressions read, through the recording rules whose labels match."""
        return follow(exprs, self.recorded_by_name)[1]

    def probe(self, name: str) -> Probe | None:
        key = self.by_name[name][0].key  # the probes know alerts by their engine-neutral key
        if key in PROBES:
            return PROBES[key]
        slo = dict(self.by_name[name][0].labels).get("slo")
        if slo not in self.env.slos:
            return None
        if name == naming.slo_unavailable(slo):
            return unavailable_probe(self.env.slos[slo])
        return slo_probe(self.env.slos[slo])

    def fires(self, probe: Probe, rule: AlertRule, fleet: Fleet, at: int, value: float) -> bool | None:
        """Whether the rule fires on the fleet; None when the value is within rounding of a threshold."""
        if not fleet.engine_up and probe.engine:
            return False
        stalled = not (fleet.progressing and fleet.counting)
        answers = self.ctx.has("http_requests")  # the API server counts requests the engine never finished
        if stalled and probe.engine and not probe.liveness and not (probe.on_stall and answers):
            return False  # no engine counter moves: rates, ratios and quantiles have no value
        if probe.liveness == "hung" and not stalled:
            return False
        if probe.liveness == "hung" and not fleet.counting and not answers:
            return False  # held requests read 0 and nothing else shows the stall
        if probe.slo is not None:
            return slo_fires(self.env, self.env.slos[probe.slo], rule, fleet, at)
        if not probe.thresholded:
            return True
        found = threshold(rule)
        if found is None:
            raise ValueError(f"cannot read the threshold of {rule.name}: {rule.expr}")
        op, t = found
        if probe.compared is not None:
            value = probe.compared(self.env, fleet, at)
        if math.isnan(value) or (value != t and math.isclose(value, t, rel_tol=1e-9, abs_tol=1e-12)):
            return None
        return _COMPARE[op](value, t)

    def own_minutes(self, name: str, probe: Probe) -> int:
        minutes = self.env.window + max(_minutes(r.for_) for r in self.by_name[name]) + MARGIN_MINUTES
        return on_step(max(minutes, SLO_MINUTES) if probe.slo else minutes)

    # --- expectations ---------------------------------------------------------------------------
    def series_labels(self, probe: Probe) -> dict[str, str]:
        ctx, ident = self.ctx, self.env.ident
        if probe.labels == "process":
            return {k: ident.process[k] for k in ctx.process_group}
        if probe.labels == "up":
            return dict(ident.process)
        if probe.labels == "targets":
            return {k: ident.process[k] for k in capacity_labels(ctx)}
        if probe.labels == "replica":
            return {k: ident.engine[k] for k in replica_labels(ctx)}
        if probe.labels == "pool_replica":  # a replica and its pool (the role label of P/D fleets)
            return {k: ident.engine[k] for k in (*replica_labels(ctx), *pool_label(ctx))}
        slo = probe.slo or probe.tag
        labels = {k: ident.engine[k] for k in self.slo_group(slo)}
        if probe.labels == "quantile":
            labels["quantile"] = "0.99"
        if probe.labels == "slo":
            labels.update({k: v for k, _, v in ctx.slo_labels(slo or "")})
        return labels

    def slo_group(self, slo: str | None) -> tuple[str, ...]:
        """The grouping of an SLO's series (over every cluster for `scope: global`), else the model's."""
        return self.ctx.where.overall().group if slo in self.overall else self.ctx.group

    def expected(self, probe: Probe, rule: AlertRule, value: float, exact: bool) -> dict | None:
        """promtool's exp_alerts entry; None if the value is not exact and rounding noise could change the text."""
        series = self.series_labels(probe)
        found = [expected_alert(rule, series, v) for v in ((value,) if exact else (value, value * (1 + 1e-9), value * (1 - 1e-9)))]
        return None if any(f != found[0] for f in found) else found[0]

    def expr_tests(self, probe: Probe | None, fleet: Fleet, at: int) -> list[dict] | None:
        """promql_expr_tests of key recorded series (all of them on the healthy fleet, probe None);
        None if a value cannot be predicted to the last digit."""
        env, rec, healthy = self.env, self.rec, probe is None
        group = {k: env.ident.engine[k] for k in self.ctx.group}
        checks: list[tuple[str, str, dict[str, str], object]] = []
        if (healthy or probe is PROBES["TtftP99High"]) and "ttft_quantile" in rec.names:
            p99 = (("quantile", "=", "0.99"),)
            labels = {**group, "quantile": "0.99"}
            value = lambda: quantile_of(self.ctx, fleet, "ttft", 0.99, env.window, at, env.ranks)  # noqa: E731
            checks.append((rec.ref("ttft_quantile", p99), rec.names["ttft_quantile"], labels, value))
        if (healthy or probe is PROBES["SuccessRatioLow"]) and "success_ratio" in rec.names:
            value = lambda: success_value(env, fleet, at)  # noqa: E731
            checks.append((rec.ref("success_ratio"), rec.names["success_ratio"], group, value))
        for slo in env.slos.values():
            if probe is None or probe.slo == slo.name:
                name = naming.record("slo_burn_rate", f"rate{slo.shortest}")
                value = lambda slo=slo: burn_rate(env, slo, fleet, at)  # noqa: E731
                expr = self.ctx.recorded(name, self.ctx.slo_labels(slo.name))
                own = {k: env.ident.engine[k] for k in self.slo_group(slo.name)}
                checks.append((expr, name, {**own, **{k: v for k, _, v in self.ctx.slo_labels(slo.name)}}, value))
        out = []
        for expr, name, labels, compute in checks:
            env.inexact = False
            value = compute()  # type: ignore[operator]
            if env.inexact or math.isnan(value):
                if not healthy:
                    return None
                continue
            sample = {"labels": _sample_text(name, labels), "value": value}
            out.append({"expr": expr, "eval_time": f"{at}m", "exp_samples": [sample]})
        return out

    def realize(self, case: Case, fleet: Fleet, at: int) -> tuple[list[dict], list[dict]] | None:
        """The case's alert_rule_tests and promql_expr_tests on a fleet evaluated at `at`,
        or None if there it would not fire exactly its severities with a predictable text."""
        env = self.env
        env.inexact = False
        value = case.probe.value(env, fleet, at)
        exact = not (env.inexact or case.probe.approximate)
        states = [self.fires(case.probe, r, fleet, at, value) for r in case.rules]
        if None in states or tuple(r.severity for r, s in zip(case.rules, states) if s) != case.severities:
            return None
        expected = [self.expected(case.probe, r, value, exact) for r, s in zip(case.rules, states) if s]
        if None in expected:
            return None
        exprs: list[dict] | None = []
        if case.checks_exprs:
            exprs = self.expr_tests(case.probe, fleet, at)
            if exprs is None:
                return None
        alert_tests = []
        for_ = max(_minutes(r.for_) for r in case.rules)
        if for_ >= 2:  # still pending one minute before `for` has passed
            alert_tests.append({"eval_time": f"{for_ - 1}m", "alertname": case.name, "exp_alerts": []})
        alert_tests.append({"eval_time": f"{at}m", "alertname": case.name, "exp_alerts": expected})
        return alert_tests, exprs

    # --- cases -------------------------------------------------------------------------------------
    def cases(self, name: str) -> list[Case]:
        """Firing cases of one alert: the mildest fault for each set of severities it can fire,
        ending with the one that fires every severity."""
        rules = self.by_name[name]
        if rules[0].key in LONG_HISTORY:
            return []  # unittests_baseline, unittests_token_shift: files of their own, hours of history
        probe = self.probe(name)
        if probe is None:
            self.notes.append(f"{name}: no scenario known for this alert")
            return []
        every = tuple(r.severity for r in rules)
        out: list[Case] = []
        # SLO alerts' long-window traffic gates may need more history than the first guess
        for at in (self.own_minutes(name, probe), *((60, 120, 240) if probe.slo else ())):
            try:
                out = self.cases_at(name, probe, at)
            except ValueError as exc:  # an alert whose shape the probes do not know
                self.notes.append(f"{name}: {exc}")
                return []
            if any(c.severities == every for c in out):
                return sorted(out, key=lambda c: c.severities != every)
        self.notes.append(f"{name}: no input the fleet can produce makes every severity fire")
        return out

    def cases_at(self, name: str, probe: Probe, at: int) -> list[Case]:
        rules = self.by_name[name]
        env, healthy = self.env, self.env.healthy
        assert healthy is not None
        limits = tuple(t[1] for r in rules if (t := threshold(r)))
        needs = self.deps([r.expr for r in rules]) | set(probe.needs)
        every = tuple(r.severity for r in rules)
        out: list[Case] = []
        fallback: Case | None = None
        for param in probe.params(env, limits):
            try:
                fleet = probe.fault(env, healthy, param)
            except ValueError:
                continue
            env.inexact = False
            value = probe.value(env, fleet, at)
            states = [self.fires(probe, r, fleet, at, value) for r in rules]
            if None in states or not any(states):
                continue
            severities = tuple(r.severity for r, s in zip(rules, states) if s)
            if any(c.severities == severities for c in out):
                continue
            case = Case(name, probe, rules, param, severities, at, set(needs), severities == every)
            if self.realize(case, fleet, at) is None:
                if case.checks_exprs:  # keep looking for one whose recorded values are predictable
                    plain = replace(case, checks_exprs=False)
                    if fallback is None and self.realize(plain, fleet, at) is not None:
                        fallback = plain
                continue
            out.append(case)
            if case.checks_exprs:
                break
        if not any(c.severities == every for c in out) and fallback is not None:
            out.append(fallback)
        return out

    def realize_all(self, cases: tuple[Case, ...], fleet: Fleet, at: int) -> list | None:
        """realize() of every case, or None as soon as one does not fire exactly its severities."""
        out = []
        for case in cases:
            found = self.realize(case, fleet, at)
            if found is None:
                return None
            out.append(found)
        return out

    def pack(self, cases: list[Case]) -> list[Pack]:
        """First fit, longest first: a case joins a pack if, with all faults combined, every case
        in it still fires exactly its severities with the same texts. A pack is closed at
        PACK_CASES cases: joining realizes every case of the pack, so unbounded packs made test
        generation grow with the square of the SLOs."""
        assert self.env.healthy is not None
        packs: list[Pack] = []
        for case in sorted(cases, key=lambda c: -c.minutes):
            # a fault that adds replicas changes every other alert's value: it gets a group of its own
            open_packs = (
                [] if case.probe.alone else [p for p in packs if not p.cases[0].probe.alone and len(p.cases) < PACK_CASES]
            )
            for pack in open_packs:
                try:
                    fleet = case.probe.fault(self.env, pack.fleet, case.param)
                except ValueError:
                    continue
                at = max(pack.minutes, case.minutes)
                # the newcomer first, stopping at the first case that no longer fires as it must:
                # most tries fail, and realizing every case of every pack tried grew with SLOs squared
                results = self.realize_all((case, *pack.cases), fleet, at)
                if results is not None:
                    pack.fleet, pack.minutes = fleet, at
                    pack.cases.append(case)
                    pack.results = [*results[1:], results[0]]
                    break
            else:
                fleet = case.probe.fault(self.env, self.env.healthy, case.param)
                result = self.realize(case, fleet, case.minutes)
                assert result is not None
                packs.append(Pack(fleet, case.minutes, [case], [result]))
        return packs

    def healthy_group(self, cases: list[Case]) -> dict:
        env, healthy = self.env, self.env.healthy
        assert healthy is not None
        at = max([self.own_minutes(n, p) for n in self.by_name if (p := self.probe(n))] or [on_step(MARGIN_MINUTES)])
        names = []
        for name, rules in self.by_name.items():
            probe = self.probe(name)
            if probe is not None and probe.thresholded:
                value = probe.value(env, healthy, at)
                try:
                    quiet = all(self.fires(probe, r, healthy, at, value) is False for r in rules)
                except ValueError:
                    quiet = False
                if not quiet:
                    self.notes.append(f"{name}: the healthy fleet cannot stay below every threshold")
                    continue
            names.append(name)
        # the token-usage shift (tested on a day of history) reads series no fleet of minutes needs
        needs = self.deps([a.expr for a in self.alerts if a.key != SHIFT_ALERT]) | {"up"}
        exprs = self.expr_tests(None, healthy, at) or []
        needs |= self.deps([t["expr"] for t in exprs])
        series = input_series(self.ctx, healthy, env.ident, needs, at)
        other = identity(self.ctx, foreign=True)
        if other is not None:  # every fault at once on a fleet outside the selector: must change nothing
            worst = healthy
            for case in cases:
                if case.probe is not PROBES["MetricsAbsent"]:
                    try:
                        worst = case.probe.fault(env, worst, case.param)
                    except ValueError:
                        pass
            series += input_series(self.ctx, worst, other, needs, at)
        group: dict = {"name": "healthy fleet: no alert fires", "interval": INPUT_INTERVAL, "input_series": series}
        group["alert_rule_test"] = [{"eval_time": f"{at}m", "alertname": n, "exp_alerts": []} for n in names]
        if exprs:
            group["promql_expr_test"] = exprs
        return group

    def pack_group(self, pack: Pack) -> dict:
        exprs = [t for _, e in pack.results for t in e]
        needs = set().union(*(c.needs for c in pack.cases)) | self.deps([t["expr"] for t in exprs])
        group: dict = {
            "name": "faults: " + "; ".join(c.title for c in pack.cases),
            "interval": INPUT_INTERVAL,
            "input_series": input_series(self.ctx, pack.fleet, self.env.ident, needs, pack.minutes),
            "alert_rule_test": [t for alerts, _ in pack.results for t in alerts],
        }
        if exprs:
            group["promql_expr_test"] = exprs
        return group

    def document(self, tests: list[dict]) -> dict:
        files = list(dict.fromkeys(f"../{naming.rule_file(self.spec_name, g.name)}" for g in self.groups))
        return {
            "rule_files": files,
            "evaluation_interval": EVALUATION_STEP,
            "group_eval_order": [g.name for g in self.groups],
            "tests": tests,
        }


def build_unit_tests(
    ctx: Context,
    rec: Recorder,
    groups: tuple[RuleGroup, ...],
    spec_name: str,
    overall: frozenset[str] = frozenset(),
    layer: str = "",
) -> tuple[tuple[tuple[str, dict], ...], list[str]]:
    """(file name, promtool test document) pairs, written to prometheus/tests/<file name> and
    run by `promtool test rules` from prometheus/ (rule_files are relative to the test file),
    plus notes on the alerts they cannot make fire. `overall`: the SLOs of `scope: global`.
    `layer` ("gateway"): the groups of a layer in front of the pods, on that layer's own series
    (`ctx` is its context), in files of their own."""
    if layer == "client":
        from genobs.plan import client  # a spec with a client block only

        keys = client.probe_keys()
    else:
        keys = gateway.probe_keys() if layer else {}
    p = _Planner(ctx, rec, groups, spec_name, overall, keys)
    if not p.alerts:
        return (), []
    cases = [c for name in p.by_name for c in p.cases(name)]
    prefix = f"{layer}-" if layer else ""
    files = [(f"{prefix}healthy.test.yaml", p.document([p.healthy_group(cases)]))]
    if cases:
        files.insert(0, (f"{prefix}alerts.test.yaml", p.document([p.pack_group(pack) for pack in p.pack(cases)])))
    if layer == "client":
        files += token_shift_tests(ctx, groups, spec_name)
    if layer:
        return tuple(files), p.notes
    alert_group = next(g for g in groups if g.name == naming.group(spec_name, "alerts"))
    labels = {k: p.env.ident.engine[k] for k in ctx.group}
    files += baseline_tests(ctx, rec.names, alert_group, labels, spec_name)
    return tuple(files), p.notes
