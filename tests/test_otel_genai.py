"""The OpenTelemetry GenAI profiles (genobs/data/otel-genai.yaml, otel-genai-server.yaml) against
the real bodies of tests/fixtures/otel_genai/: every series name, label and bucket bound the
profiles give, per conventions release and name translation, is in the body of that release and
translation; every GenAI family of a body is one the profile reads; the names are those the real
translator (otlptranslator) gives."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from genobs import data as data_files
from genobs import translations
from genobs.catalog import OTEL_GENAI, format_version, load_catalog, parse_version

FIXTURES = Path(__file__).parent / "fixtures" / "otel_genai"
RELEASES = ("1.36.0", "1.37.0", "1.41.1", "1.44.0")
TRANSLATIONS = ("underscores_with_suffixes", "utf8", "utf8_without_suffixes")
SIDE = {"otel-genai": "client", "otel-genai-server": "server"}
OTLP = json.loads((FIXTURES / "otlptranslator_v1.0.0_names.json").read_text())
# the labels an exporter adds to every series: instrumentation scope (Python exporter from 0.64b0,
# the Collector), target (the Collector)
EXPORTER_LABELS = {"otel_scope_name", "otel_scope_version", "otel_scope_schema_url", "job", "instance"}


def body_path(release: str, side: str, translation: str) -> Path:
    suffix = "" if translation == "underscores_with_suffixes" else f".{translation}"
    return FIXTURES / release / f"{side}{suffix}.txt"


@functools.cache
def body(release: str, side: str, translation: str) -> dict[str, dict]:
    """GenAI family -> its type, sample names, label names (all series) and `le` bounds."""
    out: dict[str, dict] = {}
    for fam in text_string_to_metric_families(body_path(release, side, translation).read_text()):
        if not fam.name.startswith("gen_ai"):
            continue
        f = out.setdefault(fam.name, {"type": fam.type, "samples": set(), "labels": set(), "series": [], "le": set()})
        for s in fam.samples:
            f["samples"].add(s.name)
            f["labels"] |= set(s.labels) - {"le"}
            f["series"].append({k: v for k, v in s.labels.items() if v != ""})  # "" is an absent label
            if "le" in s.labels and s.labels["le"] != "+Inf":
                f["le"].add(float(s.labels["le"]))
    return out


CASES = [(e, r, t) for e in OTEL_GENAI for r in RELEASES for t in TRANSLATIONS]


@pytest.mark.parametrize(("engine", "release", "translation"), CASES)
def test_every_profile_name_is_in_the_real_body(engine: str, release: str, translation: str) -> None:
    catalog = load_catalog(engine, translation)
    v = parse_version(release)
    fams = body(release, SIDE[engine], translation)
    samples = set().union(*(f["samples"] for f in fams.values()))
    assert catalog.names_for(v) <= samples, sorted(catalog.names_for(v) - samples)
    read = {catalog.name(k, v) for k in catalog.metrics} - {None}
    family_of = {n: n.rsplit("_", 1)[0] for n in read if n.endswith(("_count", "_sum"))}
    assert {family_of.get(n, n) for n in read} == set(fams), "a GenAI family of the body genobs does not read"


@pytest.mark.parametrize(("engine", "release", "translation"), CASES)
def test_every_profile_label_and_bound_is_in_the_real_body(engine: str, release: str, translation: str) -> None:
    catalog = load_catalog(engine, translation)
    v = parse_version(release)
    fams = body(release, SIDE[engine], translation)
    for key, m in catalog.metrics.items():
        name = m.name_for(v)
        if name is None:
            continue
        fam = fams[name if name in fams else name.rsplit("_", 1)[0]]
        assert fam["type"] == "histogram"
        assert catalog.model_label in fam["labels"], key
        assert all(catalog.model_label in s for s in fam["series"]), f"{key}: a series without the model label"
        assert set(m.labels) <= fam["labels"], (key, m.labels)
        for label, op, value in m.matchers:
            assert label in fam["labels"], (key, label)
            if op == "=":
                assert any(s.get(label) == value for s in fam["series"]), (key, label, value)
        if m.type == "histogram":
            assert fam["le"] == set(m.buckets_for(v)), key
        # every other label is summed away or added by the exporter
        assert fam["labels"] <= {catalog.model_label, *m.labels, *catalog.rank_labels_summed, *EXPORTER_LABELS}, key


@pytest.mark.parametrize("engine", OTEL_GENAI)
def test_the_names_are_the_real_translators(engine: str) -> None:
    """Each wire name is otlptranslator's name of the instrument (plus the series suffix a
    stand-in reads), each label map its label names: what the Python exporter and the Collector wrote."""
    raw = data_files.load(f"{engine}.yaml")
    table = translations.table(raw)
    for translation, entry in table["translations"].items():
        otlp = OTLP[entry["otlp_strategy"]]
        assert entry["labels"] == otlp["labels"], translation
        for key, m in raw["metrics"].items():
            for n in m["names"]:
                wire = n["wire"][translation]
                assert wire in otlp["metrics"].values() or wire.rsplit("_", 1)[0] in otlp["metrics"].values(), (key, wire)
    assert translations.names(raw) == TRANSLATIONS
    assert table["translations"]["underscores_with_suffixes"]["otlp_strategy"] == "UnderscoreEscapingWithSuffixes"


def test_the_releases_differ_where_the_conventions_changed() -> None:
    """gen_ai.system became gen_ai.provider.name in 1.37.0; the chunk metrics arrived in 1.41.0."""
    client = load_catalog("otel-genai")
    assert client.name("ttft", (1, 40, 0)) is None
    assert client.name("ttft", (1, 41, 0)) == "gen_ai_client_operation_time_to_first_chunk_seconds"
    assert client.at((1, 36, 0)).missing_reason("ttft") and client.at((1, 41, 1)).missing_reason("ttft") is None
    for release, provider in (("1.36.0", "gen_ai_system"), ("1.37.0", "gen_ai_provider_name")):
        labels = body(release, "client", "underscores_with_suffixes")["gen_ai_client_operation_duration_seconds"]["labels"]
        assert provider in labels and {"gen_ai_system", "gen_ai_provider_name"} - {provider} - labels
    utf8 = load_catalog("otel-genai", "utf8")
    assert utf8.model_label == "gen_ai.request.model" and utf8.translation == "utf8"
    assert utf8.metric("errors").matchers == (("error.type", "!=", ""),)


def test_a_translation_the_profile_lacks_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown name translation 'dots'"):
        load_catalog("otel-genai", "dots")
    with pytest.raises(ValueError, match="vllm has no name translations"):
        load_catalog("vllm", "utf8")


@pytest.mark.parametrize("engine", OTEL_GENAI)
def test_capability_entries_name_real_signals(engine: str) -> None:
    from genobs.plan.alerts import signal_data

    signals = set(signal_data()["signals"])
    catalog = load_catalog(engine)
    for signal, why, _, _ in (*catalog._notes[0], *catalog._notes[1]):
        assert signal in signals and len(why) > 20, (engine, signal)
    assert format_version(catalog.min_version) == "1.27.0" and format_version(catalog.max_version) == "1.44.0"
