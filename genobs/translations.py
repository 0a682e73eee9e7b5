"""Name translations of OpenTelemetry metrics into Prometheus, for the OpenTelemetry GenAI
profiles (genobs/data/otel-genai.yaml): a profile names each series once per translation and its
labels by their OpenTelemetry attribute names; this module resolves both for the translation a
fleet uses, so genobs.catalog reads the result like any engine's profile (first stage of `plan`)."""

from __future__ import annotations

from typing import Any

from genobs import data as data_files


def table(raw: dict) -> dict[str, Any]:
    """The translations file a profile names (genobs/data/otel-translations.yaml)."""
    return data_files.load(raw["translations"])


def names(raw: dict) -> tuple[str, ...]:
    """The translations a profile has wire names for, the default first."""
    t = table(raw)
    return (t["default"], *(k for k in t["translations"] if k != t["default"]))


def translate(raw: dict, translation: str | None) -> dict:
    """The profile as the catalog reads it under `translation` (None: the default): each name
    entry's wire name for it as `name`, each attribute renamed to its label. ValueError when the
    profile has no names for `translation`."""
    t = table(raw)
    chosen = t["default"] if translation is None else translation
    if chosen not in t["translations"]:
        raise ValueError(f"{raw['engine']}: unknown name translation {chosen!r}; known: {', '.join(names(raw))}")
    labels: dict[str, str] = t["translations"][chosen]["labels"]

    def label(name: str) -> str:
        return labels.get(name, name)  # labels the exporter adds (otel_scope_*, job) keep theirs

    def matchers(raw_matchers: list) -> list:
        return [[label(a), op, value] for a, op, value in raw_matchers]

    metrics = {}
    for key, m in raw["metrics"].items():
        entries = []
        for n in m["names"]:
            entry = {k: v for k, v in n.items() if k != "wire"}
            entry["name"] = n["wire"][chosen]
            if "matchers" in n:
                entry["matchers"] = matchers(n["matchers"])
            entries.append(entry)
        metrics[key] = {
            **m,
            "names": entries,
            "labels": [label(x) for x in m.get("labels", [])],
            "matchers": matchers(m.get("matchers", [])),
            "label_values": {label(k): v for k, v in m.get("label_values", {}).items()},
        }
    return {
        **raw,
        "metrics": metrics,
        "translation": chosen,
        "model_label": label(raw["model_label"]),
        "rank_labels_summed": [label(x) for x in raw.get("rank_labels_summed", [])],
    }


def attribute_label(raw: dict, attribute: str, translation: str | None) -> str:
    """The label an OpenTelemetry attribute becomes under `translation` (None: the default)."""
    t = table(raw)
    return t["translations"][translation or t["default"]]["labels"].get(attribute, attribute)


# the translations genobs writes PromQL for: UTF-8 names need the quoted selector form
WRITTEN = ("underscores_with_suffixes",)


def refusal(translation: str) -> str | None:
    """Why genobs cannot read metrics under `translation` (a spec problem's text), or None."""
    if translation in WRITTEN:
        return None
    return (
        f"{translation}: genobs does not write PromQL for UTF-8 metric and label names yet; "
        f"use {', '.join(WRITTEN)} (the OpenTelemetry SDK's Prometheus exporter, and the default of "
        "the Collector and of Prometheus' OTLP receiver)"
    )
