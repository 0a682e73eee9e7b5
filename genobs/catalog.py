"""Engine metric catalogs: the data that turns a logical signal plus an engine
version into the wire name, type and default buckets (first stage of `plan`)."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field, replace

from genobs import data as data_files
from genobs import naming, translations

Version = tuple[int, int, int]

# units a histogram or counter of durations may be exported in -> how many make one second;
# genobs records every such series in seconds
TIME_UNITS = {"seconds": 1, "milliseconds": 1000, "microseconds": 1_000_000}
# sizes: bytes in one unit (SGLang's "MB" is total_bytes / (1024 * 1024))
SIZE_UNITS = {"bytes": 1, "mebibytes": 1 << 20}

_VERSION_RE = re.compile(r"v?(\d+)\.(\d+)(?:\.(\d+))?(?:[.\-+]?(?:post|rc|dev)\d*)?")


def parse_version(text: str) -> Version:
    """'0.33' -> (0, 33, 0); '0.8.5.post1' -> (0, 8, 5). ValueError when malformed."""
    m = _VERSION_RE.fullmatch(str(text).strip(" "))
    if not m:
        raise ValueError(f"not a version: {text!r} (expected e.g. 0.33 or 0.11.1)")
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


def format_version(v: Version) -> str:
    return ".".join(str(p) for p in v)


@dataclass(frozen=True)
class NameRange:
    """A family's wire name over a range of engine releases [since, until)."""

    name: str
    since: Version
    until: Version | None
    stand_in: bool = False  # another family's series read in its place (not a rename of this one)
    # this family's own fixed matchers where they differ from the signal's (None: the signal's)
    matchers: tuple[tuple[str, str, str], ...] | None = None

    def contains(self, v: Version) -> bool:
        return self.since <= v and (self.until is None or v < self.until)


@dataclass(frozen=True)
class MetricDef:
    """One metric family of an engine profile: its names across releases, type, unit, labels and buckets."""

    key: str
    type: str
    unit: str
    help: str
    names: tuple[NameRange, ...]
    buckets: tuple[tuple[Version, Version | None, tuple[float, ...]], ...]
    labels: tuple[str, ...]
    process: bool
    label_values: tuple[tuple[str, tuple[str, ...]], ...] = ()  # values the engine exports for extra labels
    engine_label: bool = True  # carries the rank label (vLLM engine="<rank>") on versions that have it
    matchers: tuple[tuple[str, str, str], ...] = ()  # fixed matchers: one counter read as two signals
    capability: str = "exact"  # exact | approx: a related series with other semantics
    # genobs' label name -> the engine's (TensorRT-LLM: position -> token_position)
    label_aliases: tuple[tuple[str, str], ...] = ()
    # the one role (prefill | decode) whose servers write it (SGLang's KV-transfer series)
    observed_on: str | None = None
    # the servers that write it: "unified" and the P/D roles (None: every server; the simulator)
    written_by: tuple[str, ...] | None = None
    # labels the engine writes on it with one value on a one-GPU server (SGLang's tp_rank, is_streaming):
    # every query sums them away; the simulator writes them
    wire_labels: tuple[tuple[str, str], ...] = ()
    # a token-count histogram whose bounds are the engine's 1-2-5 series up to its max model length
    # (vLLM's build_1_2_5_buckets(max_model_len)); `buckets` hold them for a 128K-context model
    buckets_to_max_model_len: bool = False
    # an info gauge's labels per release: (label, the value the simulator writes, since, until)
    info_labels: tuple[tuple[str, str, Version, Version | None], ...] = ()
    # version -> wire name: a build asks tens of thousands of times for a few dozen names
    _names: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def suffixes(self) -> tuple[str, ...]:
        """The endings of its sample names: a histogram's and a summary's series, a counter's or
        gauge's own name."""
        return {"histogram": ("_bucket", "_sum", "_count"), "summary": ("_sum", "_count")}.get(self.type, ("",))

    def info_labels_for(self, v: Version) -> dict[str, str]:
        """The labels (and simulated values) of an info gauge in release `v`."""
        return {name: value for name, value, since, until in self.info_labels if _within(v, since, until)}

    def wire_label(self, label: str) -> str:
        return dict(self.label_aliases).get(label, label)

    def fixed_labels(self) -> dict[str, str]:
        """The equality matchers of the profile, as labels every series of this signal carries."""
        return {name: value for name, op, value in self.matchers if op == "="}

    def values_of(self, label: str) -> tuple[str, ...]:
        return dict(self.label_values).get(label, ())

    def renamed_in(self, v: Version) -> str | None:
        """The family's own name in release `v`, where it is not a stand-in for another family."""
        found = [r for r in self.names if r.contains(v)]
        return found[-1].name if found and not found[-1].stand_in else None

    def name_for(self, v: Version) -> str | None:
        try:
            return self._names[v]
        except KeyError:
            found = [r.name for r in self.names if r.contains(v)]
            self._names[v] = found[-1] if found else None
            return self._names[v]

    def matchers_for(self, v: Version) -> tuple[tuple[str, str, str], ...]:
        """The fixed matchers of the family read in release `v` (a renamed family may have none)."""
        found = [r for r in self.names if r.contains(v)]
        if found and found[-1].matchers is not None:
            return found[-1].matchers
        return self.matchers

    @property
    def per_second(self) -> int:
        """Units of the wire value in one second: 1000 for a millisecond histogram, 1 for
        seconds and for every unit that is not a duration (tokens, bytes)."""
        return TIME_UNITS.get(self.unit, 1)

    @property
    def bytes_per_unit(self) -> int:
        """Bytes in one wire unit: 1048576 for a mebibyte histogram, 1 for bytes and for every
        unit that is not a size."""
        return SIZE_UNITS.get(self.unit, 1)

    def wire_value(self, value: float) -> float:
        """A value in seconds or bytes, in the histogram's own unit (0.5 s -> 500 on a millisecond
        histogram, 64 MiB -> 64 on a mebibyte one): what its `le` labels and `_sum` hold."""
        if self.per_second == 1 and self.bytes_per_unit == 1:
            return value
        return float(f"{value * self.per_second / self.bytes_per_unit:.12g}")  # 0.005 * 1000 is 5.000000000000001

    def wire_buckets_for(self, v: Version) -> tuple[float, ...]:
        """The bucket bounds as the engine writes them in `le`, in the histogram's own unit."""
        for since, until, le in self.buckets:
            if since <= v and (until is None or v < until):
                return le
        return ()

    def buckets_for(self, v: Version) -> tuple[float, ...]:
        """The bucket bounds in seconds for a duration histogram (what thresholds compare with), in
        bytes for a size histogram; other histograms' bounds as they are."""
        le = self.wire_buckets_for(v)
        if self.bytes_per_unit != 1:
            return tuple(b * self.bytes_per_unit for b in le)
        return le if self.per_second == 1 else tuple(b / self.per_second for b in le)

    def available_from(self) -> Version:
        return min(r.since for r in self.names)

    def versions_text(self) -> str:
        parts = []
        for r in self.names:
            end = f" before {format_version(r.until)}" if r.until else " on"
            parts.append(f"{r.name} from {format_version(r.since)}{end}")
        return "; ".join(parts)


@dataclass(frozen=True)
class Catalog:
    """An engine's profile: its metric families, releases, finish reasons and labels."""

    engine: str
    min_version: Version
    max_version: Version
    engine_label_since: Version
    custom_buckets_since: Version
    per_request_tpot_since: Version
    created_series_since: Version
    finished_reasons: tuple[tuple[str, Version], ...]
    metrics: dict[str, MetricDef]
    completion_handlers: tuple[str, ...] = ()  # HTTP handlers of the generation endpoints
    # from this release the failed-transfer counter also counts failed notifications
    nixl_failures_include_notifications_since: Version = (0, 33, 0)
    # from this release a client's disconnect is no finished request (no finished_reason="abort")
    client_disconnects_not_aborts_since: Version = (10**6, 0, 0)
    display_name: str = "vLLM"
    alert_prefix: str = ""  # engine profiles: the prefix of pod-level alert names (Vllm, Sglang)
    # a key's first word -> the engine's (Nixl -> Kv where the transfer is not NIXL's; naming.alert)
    alert_renames: tuple[tuple[str, str], ...] = ()
    rank_label: str | None = "engine"  # the label of one engine (data-parallel rank) of a replica
    rank_labels_summed: tuple[str, ...] = ("engine",)  # labels every query aggregates away
    # signal (signals.yaml vocabulary) -> why this engine cannot back its alerts
    not_observable: tuple[tuple[str, str], ...] = ()
    # signal -> how the series genobs reads differs from the signal's meaning
    approximate: tuple[tuple[str, str], ...] = ()
    bucket_flags: tuple[tuple[str, str], ...] = ()  # histogram key -> the engine flag that sets its buckets
    # labels a plain deployment writes on every engine series with one value (the simulator's exporter)
    static_labels: tuple[tuple[str, str], ...] = ()
    # (label, prefill value, decode value) where the engine itself writes the role of a P/D server
    # (SGLang: engine_type), the shape of a spec's service.roles; None: the role is a target label
    roles: tuple[str, str, str] | None = None
    abort_reason: str = "abort"  # the finish reason of a request the client gave up on
    metrics_path: str = "/metrics"  # where the engine serves Prometheus text
    metrics_port: int | None = None  # its default metrics port, where the profile knows it (llm-d EPP: 9090)
    metrics_auth: str = ""  # "bearer": /metrics answers only an authorized bearer token by default
    # labels that tell one replica's schedulers apart on the series that carry them, where no rank
    # label is shared by every series (SGLang: dp_rank on scheduler gauges, none on tokenizer counters)
    scheduler_labels: tuple[str, ...] = ()
    # the one-value rank labels every family a scheduler writes carries (SGLang: tp_rank, pp_rank,
    # moe_ep_rank): a family whose wire_labels hold them is written once per scheduler
    scheduler_ranks: tuple[tuple[str, str], ...] = ()
    # the label that names the model on the wire; read as model_name everywhere else (Dynamo: model)
    model_label: str = "model_name"
    # a gateway's words in its alert and runbook texts (genobs/data/gateway.yaml placeholders)
    words: tuple[tuple[str, str], ...] = ()
    # an engine's facts in handbook and alert texts ({hint:key}): its metrics switch, version notes
    hints: tuple[tuple[str, str], ...] = ()
    # the name translation its wire names are in (OpenTelemetry profiles; genobs.translations)
    translation: str | None = None
    # every release's capability notes: (signal, text, since, until) for not_observable, approximate
    _notes: tuple[tuple, tuple] = field(default=((), ()), compare=False, repr=False)

    def release(self, v: Version) -> str:
        """'SGLang 0.5.23': the engine and release in messages."""
        return f"{self.display_name} {format_version(v)}"

    def hint(self, key: str, default: str = "") -> str:
        return dict(self.hints).get(key, default)

    def texts(self, text: str) -> str:
        """A handbook or alert text in this engine's words: {engine}, {metrics_path}, {hint:key}
        and the {alert:Key} names (genobs.naming)."""
        filled = naming.engine_refs(text, self.display_name, self.metrics_path, dict(self.hints))
        return naming.alert_refs(filled, self.alert_prefix, self.alert_renames)

    def alert_name(self, key: str) -> str:
        """The emitted name of a pod-level alert on this engine (naming.alert)."""
        return naming.alert(self.alert_prefix, key, self.alert_renames)

    def missing_reason(self, signal: str) -> str | None:
        return dict(self.not_observable).get(signal)

    def caveat(self, signal: str) -> str | None:
        return dict(self.approximate).get(signal)

    def at(self, v: Version) -> Catalog:
        """The profile as release `v` sees it: capability notes scoped to a range of releases
        (`since` inclusive, `until` exclusive) kept only where `v` is in their range."""
        keep = lambda notes: tuple((k, why) for k, why, since, until in notes if _within(v, since, until))  # noqa: E731
        return replace(self, not_observable=keep(self._notes[0]), approximate=keep(self._notes[1]))

    def has_rank_label(self, v: Version) -> bool:
        return self.rank_label is not None and v >= self.engine_label_since

    def per_scheduler(self, m: MetricDef) -> bool:
        """Whether each scheduler of a replica writes `m` (carrying `scheduler_labels` beside its
        ranks when there are several), not the one tokenizer or API server in front of them."""
        return bool(self.scheduler_ranks) and set(self.scheduler_ranks) <= set(m.wire_labels)

    def metric(self, key: str) -> MetricDef:
        return self.metrics[key]

    def name(self, key: str, v: Version) -> str | None:
        """The wire name of `key` in release `v`; None where the release or the engine has none."""
        metric = self.metrics.get(key)
        return metric.name_for(v) if metric is not None else None

    def reasons_for(self, v: Version) -> tuple[str, ...]:
        return tuple(r for r, since in self.finished_reasons if since <= v)

    def names_for(self, v: Version) -> set[str]:
        """Every wire series name (with histogram suffixes) the version exposes."""
        out: set[str] = set()
        for m in self.metrics.values():
            n = m.name_for(v)
            if n is None:
                continue
            out.update(n + suffix for suffix in m.suffixes)
        return out


def _opt_version(text: object) -> Version | None:
    return None if text is None else parse_version(str(text))


def _within(v: Version, since: Version | None, until: Version | None) -> bool:
    return (since is None or since <= v) and (until is None or v < until)


def _note_list(raw: dict) -> tuple[tuple[str, str, Version | None, Version | None], ...]:
    """`signal: text` for every release, or `signal: [{text, since, until}, ...]` per range of releases."""
    out = []
    for key, value in raw.items():
        for entry in value if isinstance(value, list) else [{"text": value}]:
            text = " ".join(str(entry["text"]).split())
            out.append((key, text, _opt_version(entry.get("since")), _opt_version(entry.get("until"))))
    return tuple(out)


def _matchers(raw: list | None) -> tuple[tuple[str, str, str], ...] | None:
    return None if raw is None else tuple((str(a), str(b), str(c)) for a, b, c in raw)


def _build(raw: dict) -> Catalog:
    metrics = {}
    for key, m in raw["metrics"].items():
        names = tuple(
            NameRange(
                n["name"],
                parse_version(n["since"]),
                _opt_version(n.get("until")),
                bool(n.get("stand_in", False)),
                _matchers(n.get("matchers")),
            )
            for n in m["names"]
        )
        buckets = tuple(
            (parse_version(b["since"]), _opt_version(b.get("until")), tuple(float(x) for x in b["le"]))
            for b in m.get("buckets", [])
        )
        metrics[key] = MetricDef(
            key=key,
            type=m["type"],
            unit=m["unit"],
            help=m["help"],
            names=names,
            buckets=buckets,
            labels=tuple(m.get("labels", [])),
            process=bool(m.get("process", False)),
            engine_label=bool(m.get("engine_label", True)),
            label_values=tuple((k, tuple(str(x) for x in v)) for k, v in m.get("label_values", {}).items()),
            matchers=tuple((str(a), str(b), str(c)) for a, b, c in m.get("matchers", [])),
            capability=str(m.get("capability", "exact")),
            label_aliases=tuple((str(k), str(v)) for k, v in m.get("label_aliases", {}).items()),
            observed_on=m.get("observed_on"),
            written_by=tuple(str(r) for r in m["written_by"]) if "written_by" in m else None,
            wire_labels=tuple((str(k), str(v)) for k, v in (m.get("wire_labels") or {}).items()),
            buckets_to_max_model_len=bool(m.get("buckets_to_max_model_len", False)),
            info_labels=tuple(
                (str(i["name"]), str(i["value"]), parse_version(i["since"]), _opt_version(i.get("until")))
                for i in m.get("info_labels", [])
            ),
        )
        scaled = {**TIME_UNITS, **SIZE_UNITS}.keys() - {"seconds", "bytes"}
        if m["unit"] in scaled and m["type"] not in ("histogram", "counter"):
            raise ValueError(f"{raw['engine']}.yaml metrics.{key}: unit {m['unit']} is for histograms and counters")
    sv = raw["supported_versions"]
    never = (10**6, 0, 0)  # an engine without the rank label, or without the feature
    rank_label = raw.get("rank_label", "engine")
    notes = (_note_list(raw.get("not_observable", {})), _note_list(raw.get("approximate", {})))
    return Catalog(
        engine=raw["engine"],
        min_version=parse_version(sv["min"]),
        max_version=parse_version(sv["max"]),
        engine_label_since=_opt_version(raw.get("engine_label_since")) or never,
        custom_buckets_since=_opt_version(raw.get("custom_buckets_since")) or never,
        per_request_tpot_since=parse_version(raw["per_request_tpot_since"]),
        created_series_since=_opt_version(raw.get("created_series_since")) or never,
        finished_reasons=tuple((r["value"], parse_version(r["since"])) for r in raw["finished_reasons"]),
        metrics=metrics,
        completion_handlers=tuple(raw.get("completion_handlers", ())),
        nixl_failures_include_notifications_since=(
            _opt_version(raw.get("nixl_failures_include_notifications_since")) or (0, 0, 0)
        ),
        client_disconnects_not_aborts_since=_opt_version(raw.get("client_disconnects_not_aborts_since")) or never,
        display_name=raw.get("display_name", raw["engine"]),
        alert_prefix=str(raw.get("alert_prefix", "")),
        alert_renames=tuple((str(k), str(v)) for k, v in (raw.get("alert_renames") or {}).items()),
        rank_label=rank_label,
        rank_labels_summed=tuple(raw.get("rank_labels_summed", [rank_label] if rank_label else [])),
        # the newest release's notes unless a caller asks for another (Catalog.at)
        not_observable=tuple((k, t) for k, t, since, until in notes[0] if _within(parse_version(sv["max"]), since, until)),
        approximate=tuple((k, t) for k, t, since, until in notes[1] if _within(parse_version(sv["max"]), since, until)),
        _notes=notes,
        bucket_flags=tuple(raw.get("bucket_flags", {}).items()),
        static_labels=tuple((k, str(v)) for k, v in raw.get("static_labels", {}).items()),
        roles=(
            (str(raw["roles"]["label"]), str(raw["roles"]["prefill"]), str(raw["roles"]["decode"]))
            if raw.get("roles")
            else None
        ),
        abort_reason=raw.get("abort_reason", "abort"),
        metrics_path=raw.get("metrics_path", "/metrics"),
        metrics_port=raw.get("metrics_port"),
        metrics_auth=str(raw.get("metrics_auth", "")),
        scheduler_labels=tuple(raw.get("scheduler_labels", ())),
        scheduler_ranks=tuple((str(k), str(v)) for k, v in (raw.get("scheduler_ranks") or {}).items()),
        model_label=raw.get("model_label", "model_name"),
        words=tuple((str(k), " ".join(str(v).split()) if k != "ttft_scope" else str(v)) for k, v in raw.get("words", {}).items()),
        hints=tuple((str(k), " ".join(str(v).split())) for k, v in raw.get("hints", {}).items()),
        translation=raw.get("translation"),
    )


# profiles of a layer in front of the engines (spec `gateway:`); otel-genai-server: a gateway that
# records the OpenTelemetry GenAI server metrics (Envoy AI Gateway)
GATEWAYS = ("llm-d-epp", "dynamo", "otel-genai-server")
ENGINES = ("vllm", "sglang", "trtllm")  # one profile file per engine: genobs/data/<engine>.yaml
# OpenTelemetry GenAI instruments: what an application measures (client), what a server records
OTEL_GENAI = ("otel-genai", "otel-genai-server")


@functools.cache
def load_catalog(engine: str = "vllm", translation: str | None = None) -> Catalog:
    """The profile of `engine`; for an OpenTelemetry profile, its names under the name
    `translation` (None: the profile's default; genobs.translations)."""
    raw = data_files.load(f"{engine}.yaml")
    if "translations" in raw:
        raw = translations.translate(raw, translation)
    elif translation is not None:
        raise ValueError(f"{engine} has no name translations")
    return _build(raw)
