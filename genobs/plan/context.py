"""Resolved facts the planners share: engine version, wire names in the spec's
dialect, selectors and grouping labels."""

from __future__ import annotations

from dataclasses import dataclass, replace

from genobs import naming
from genobs import promql as q
from genobs.catalog import Catalog, Version, format_version
from genobs.plan.where import Where

# What a user sees of a request lives on the decode pool of a disaggregated fleet: prefill
# legs run with max_tokens=1 (finish `length`) and would count every request twice.
USER_FACING = frozenset(
    {"request_success", "requests_finished", "ttft", "itl", "tpot", "e2e", "generation_length", "decode_time"}
)


@dataclass(frozen=True)
class Context:
    """What planning reads of a layer: its profile, release, metric names, selector and grouping."""

    catalog: Catalog
    version: Version
    dialect: str  # colon | underscore
    selector: tuple[tuple[str, str], ...]
    models: tuple[str, ...]
    where: Where  # the labels that say where a series comes from (plan/where.py)
    window: str
    min_request_rate: float
    features: frozenset[str]
    roles: tuple[str, str, str] | None = None  # (label, prefill value, decode value)
    spec: str = ""  # the spec's name: labels the SLO series, which several specs may share
    evaluation_seconds: float = 30.0  # the rule groups' evaluation interval
    other_version: Version | None = None  # another release in the fleet (service.other_engine_version)
    # a layer whose model names differ from the pods' (client.model_names): (its name, the pods')
    model_map: tuple[tuple[str, str], ...] = ()

    def without_cluster(self) -> Context:
        """The same facts over every cluster together: an SLO of `scope: global`."""
        return replace(self, where=self.where.overall())

    @property
    def group(self) -> tuple[str, ...]:
        """Labels every recorded series keeps."""
        return self.where.group

    @property
    def variables(self) -> tuple[str, ...]:
        """The labels the spec groups by: dashboard variables."""
        return self.where.variables

    @property
    def cluster(self) -> str | None:
        """service.cluster_label (also in `group`)."""
        return self.where.cluster

    @property
    def target(self) -> tuple[str, ...]:
        """One scrape target: `instance`, within its cluster when several share a backend."""
        return self.where.target

    def alert(self, key: str) -> str:
        """The emitted name of a pod-level alert: 'TtftP99High' -> 'VllmTtftP99High' on vLLM,
        'SglangTtftP99High' on SGLang (the profile's alert_prefix)."""
        return self.catalog.alert_name(key)

    def alert_refs(self, text: str) -> str:
        """A handbook or alert text in this engine's words: its {alert:Key} references named for
        the engine, {engine}, {metrics_path} and {hint:key} from its profile (Catalog.texts)."""
        return self.catalog.texts(text)

    def words(self, text: str) -> str:
        """alert_refs with its whitespace made single: a panel text whose hint may be empty."""
        return " ".join(self.alert_refs(text).split())

    @property
    def version_text(self) -> str:
        return format_version(self.version)

    @property
    def release(self) -> str:
        """'vLLM 0.33.0', 'SGLang 0.5.23': the engine and its release, for messages."""
        return self.catalog.release(self.version)

    def has(self, key: str) -> bool:
        return self.catalog.name(key, self.version) is not None

    def metric(self, key: str, suffix: str = "") -> str:
        name = self.catalog.name(key, self.version)
        if name is None:
            raise KeyError(f"{key} does not exist in {self.catalog.engine} {self.version_text}")
        name += suffix
        return name.replace(":", "_") if self.dialect == "underscore" else name

    @property
    def speed_from_tpot(self) -> bool:
        """Per-user output speed is 1 / mean TPOT where the release has a per-request TPOT, or where
        it has no decode-time histogram to divide tokens by (SGLang before 0.5.22: the inter-token
        histogram stands in, observed once per token of each streamed chunk)."""
        return self.version >= self.catalog.per_request_tpot_since or not self.has("decode_time")

    @property
    def finished_key(self) -> str:
        """The counter of finished requests: by finish reason where the engine has one (vLLM,
        TensorRT-LLM), else its plain count (SGLang)."""
        return "request_success" if self.has("request_success") else "requests_finished"

    @property
    def rank_label(self) -> str | None:
        """The label of one engine (data-parallel rank) of a replica, where the release has one."""
        return self.where.rank

    def is_process(self, key: str) -> bool:
        return self.catalog.metric(key).process

    # --- label sets -------------------------------------------------------
    @property
    def process_group(self) -> tuple[str, ...]:
        """Process metrics carry no model_name: group them per scrape target instead."""
        return self.where.process

    def raw_matchers(self, process: bool = False, models: bool = True) -> tuple[q.Matcher, ...]:
        """`models=False`: no model list, for a side of a binary operation whose other side
        already selected the spec's models (matching on the grouping labels drops the rest)."""
        out: list[q.Matcher] = [(k, "=", v) for k, v in self.selector]
        if self.models and not process and models:
            out.append((self.catalog.model_label, "=~", q.any_of(self.wire_models)))
        return tuple(out)

    @property
    def wire_models(self) -> tuple[str, ...]:
        """The spec's models as this layer's series name them: the pods' names, and the layer's
        own names of them (model_map)."""
        own = tuple(mine for mine, pods in self.model_map if pods in self.models and mine not in self.models)
        return (*self.models, *own)

    def _as_model_name(self, vector: str) -> str:
        """`vector` with the profile's model label copied to model_name, the label every recorded
        series, alert and inhibition rule uses (Dynamo's frontend writes `model`)."""
        wire = self.catalog.model_label
        if wire == "model_name" and not self.model_map:
            return vector
        if wire != "model_name":
            vector = f'label_replace({vector}, "model_name", "$1", "{wire}", "(.*)")'
        for mine, pods in self.model_map:  # the layer's name of a model -> the pods' name of it
            vector = f"label_replace({vector}, {q.quote('model_name')}, {q.quote(pods)}, {q.quote(wire)}, {q.quote(q.any_of((mine,)))})"
        return vector

    def recorded_matchers(self, process: bool = False, models: bool = True) -> tuple[q.Matcher, ...]:
        """Matchers that pick this spec's series out of a recorded metric (`models`: as raw_matchers)."""
        kept = self.process_group if process else self.group
        out: list[q.Matcher] = [(k, "=", v) for k, v in self.selector if k in kept]
        if self.models and not process and "model_name" in kept and models:
            out.append(("model_name", "=~", q.any_of(self.models)))
        return tuple(out)

    def panel_matchers(self, process: bool = False) -> tuple[q.Matcher, ...]:
        """Dashboard matchers: grouping labels follow their variable, other selector labels are fixed."""
        fixed = dict(self.selector)
        labels = self.process_group if process else self.group
        return tuple(
            (label, "=~", f"${label}") if label in self.variables else (label, "=", fixed[label])
            for label in labels
            if label in self.variables or label in fixed
        )

    # --- building blocks --------------------------------------------------
    def role(self, which: str) -> tuple[q.Matcher, ...]:
        """Matcher for one pool ("prefill" or "decode"); none when the fleet is not disaggregated."""
        if self.roles is None or self.where.role is None:
            return ()
        label, prefill, decode = self.roles
        return ((label, "=", prefill if which == "prefill" else decode),)

    def renamed(self, key: str) -> str | None:
        """The wire name of `key` in the other release of the fleet, where a rename separates the two
        (not where either name is a stand-in: the per-token histogram served as TPOT before the
        per-request one existed)."""
        if self.other_version is None:
            return None
        metric = self.catalog.metric(key)
        own, other = metric.renamed_in(self.version), metric.renamed_in(self.other_version)
        if own is None or other is None or other == own:
            return None
        return other.replace(":", "_") if self.dialect == "underscore" else other

    def _selectors(self, key: str, suffix: str, extra: tuple[q.Matcher, ...], all_roles: bool, models: bool) -> list[str]:
        metric = self.catalog.metric(key)
        if not all_roles and not any(m[0] == (self.roles or ("",))[0] for m in extra):
            if metric.observed_on is not None:  # one role's servers write it: read it there only
                extra = self.role(metric.observed_on) + extra
            elif key in USER_FACING:
                extra = self.role("decode") + extra
        if metric.label_aliases:
            extra = tuple((metric.wire_label(label), op, value) for label, op, value in extra)
        base = self.raw_matchers(self.is_process(key), models)
        out = [q.selector(self.metric(key, suffix), base + metric.matchers_for(self.version) + extra)]
        other = self.renamed(key)
        if other is not None and self.other_version is not None:
            out.append(q.selector(other + suffix, base + metric.matchers_for(self.other_version) + extra))
        return out

    def raw(
        self,
        key: str,
        suffix: str = "",
        extra: tuple[q.Matcher, ...] = (),
        all_roles: bool = False,
        models: bool = True,
    ) -> str:
        """Raw selector; user-facing series read the decode pool unless `all_roles`. Around a rename
        (service.other_engine_version) both names, this release's first: `or` keeps one series per
        target where a release exports both."""
        sels = self._selectors(key, suffix, extra, all_roles, models)
        return self._as_model_name(sels[0] if len(sels) == 1 else f"({' or '.join(sels)})")

    def up(self) -> str:
        """The scrape-health series of the targets behind the selector."""
        return q.selector("up", self.raw_matchers(process=True))

    def rate(
        self, key: str, suffix: str = "", extra: tuple[q.Matcher, ...] = (), window: str = "", models: bool = True
    ) -> str:
        """rate() of the raw series; around a rename, of each name, one series per target (`or`)."""
        rates = [q.rate(sel, window or self.window) for sel in self._selectors(key, suffix, extra, False, models)]
        return self._as_model_name(rates[0] if len(rates) == 1 else f"({' or '.join(rates)})")

    def sum_rate(
        self, key: str, suffix: str = "", extra: tuple[q.Matcher, ...] = (), labels: tuple[str, ...] = ()
    ) -> str:
        group = self.process_group if self.is_process(key) else self.group
        return q.sum_by((*group, *labels), self.rate(key, suffix, extra))

    def in_seconds(self, key: str, expr: str) -> str:
        """`expr`, a duration read from histogram or counter `key`, in seconds: a millisecond
        histogram's quantiles and _sum rates are divided by 1000 (its buckets keep their own unit)."""
        per_second = self.catalog.metric(key).per_second
        return expr if per_second == 1 else f"{expr} / {per_second}"

    def in_bytes(self, key: str, expr: str) -> str:
        """`expr`, a size read from histogram `key`, in bytes: a mebibyte histogram's _sum rates
        are multiplied by 1048576."""
        per_unit = self.catalog.metric(key).bytes_per_unit
        return expr if per_unit == 1 else f"{expr} * {per_unit}"

    def le(self, key: str, seconds: float) -> q.Matcher:
        """The `le` matcher of the bucket bound `seconds` of histogram `key`, in the histogram's own
        unit (0.5 s is le="500" on a millisecond histogram)."""
        return q.le_matcher(self.catalog.metric(key).wire_value(seconds))

    def le_text(self, key: str, seconds: float) -> str:
        """The bucket bound as the `le` label value a reader types (`le="500"`), for messages."""
        return f"{self.catalog.metric(key).wire_value(seconds):g}"

    def recorded(
        self, name: str, extra: tuple[q.Matcher, ...] = (), process: bool = False, models: bool = True
    ) -> str:
        return q.selector(name, self.recorded_matchers(process, models) + extra)

    def slo_recorded(self, name: str, slo: str) -> str:
        """An SLO's own recorded series: its base window already selected the spec's models, so
        the selector labels and the `slo` and `spec` labels pick it out without the model list
        (two specs on one selector may both name an SLO `availability`)."""
        out: list[q.Matcher] = [(k, "=", v) for k, v in self.selector if k in self.group]
        return q.selector(name, (*out, *self.slo_labels(slo)))

    def slo_labels(self, slo: str) -> tuple[q.Matcher, ...]:
        return (("slo", "=", slo), ("spec", "=", self.spec))

    def rec(self, subject: str, operation: str) -> str:
        """Name of a windowed recorded series, e.g. genobs:ttft_seconds:quantile_rate5m."""
        return naming.record(subject, naming.rate_op(operation, self.window))
