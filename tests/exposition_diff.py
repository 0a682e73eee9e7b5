"""The shape of a /metrics body, and the differences between two: what a real engine writes
against what `genobs simulate` writes for the same configuration. Values are not compared, only
what a query or a dashboard depends on: family names and types, label names, histogram bounds
and the values of labels the engine enumerates itself."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

#: labels whose values the engine defines, or the configuration both bodies share (engine ranks,
#: the served model name): a value the simulator lacks or invents is a difference. The HTTP
#: middleware's handler, method and status follow what the clients asked, so they are not compared.
ENUMERATED = ("finished_reason", "engine", "model_name", "sleep_state", "source", "reason", "stage", "position",
              "generation")
#: sample labels that are part of the type, not of the family's label set
STRUCTURAL = frozenset({"le", "quantile"})


@dataclass(frozen=True)
class Shape:
    """Everything the comparison reads of one body."""

    types: dict[str, str] = field(default_factory=dict)  # family -> type (`x_created` families too)
    label_sets: dict[str, frozenset[frozenset[str]]] = field(default_factory=dict)  # family -> label-name sets
    bounds: dict[str, frozenset[tuple[float, ...]]] = field(default_factory=dict)  # histogram -> its series' `le`
    values: dict[str, dict[str, frozenset[str]]] = field(default_factory=dict)  # family -> enumerated label -> values


def shape(text: str) -> Shape:
    types: dict[str, str] = {}
    label_sets: dict[str, set[frozenset[str]]] = {}
    les: dict[tuple[str, tuple], list[float]] = {}
    values: dict[str, dict[str, set[str]]] = {}
    for fam in text_string_to_metric_families(text):
        types[fam.name] = fam.type
        sets = label_sets.setdefault(fam.name, set())
        for s in fam.samples:
            sets.add(frozenset(s.labels) - STRUCTURAL)
            for label in ENUMERATED:
                if label in s.labels:
                    values.setdefault(fam.name, {}).setdefault(label, set()).add(s.labels[label])
            if fam.type == "histogram" and s.name.endswith("_bucket"):
                series = tuple(sorted((k, v) for k, v in s.labels.items() if k != "le"))
                les.setdefault((fam.name, series), []).append(float(s.labels["le"]))
    bounds: dict[str, set[tuple[float, ...]]] = {}
    for (name, _), le in les.items():
        bounds.setdefault(name, set()).add(tuple(b for b in le if b != float("inf")))
    return Shape(
        types,
        {k: frozenset(v) for k, v in label_sets.items()},
        {k: frozenset(v) for k, v in bounds.items()},
        {k: {label: frozenset(v) for label, v in per.items()} for k, per in values.items()},
    )


def _sets(sets: Iterable[frozenset[str]]) -> str:
    return " | ".join("{" + ", ".join(sorted(s)) + "}" for s in sorted(sets, key=sorted))


def _values(body: Shape, families: Iterable[str], label: str) -> frozenset[str]:
    return frozenset().union(*(body.values.get(f, {}).get(label, frozenset()) for f in families))


def differences(real: Shape, simulated: Shape, keep: Callable[[str], bool] = lambda family: True) -> list[str]:
    """One readable line per difference, for the families `keep` selects (both bodies)."""
    out: list[str] = []
    real_names = {n for n in real.types if keep(n)}
    sim_names = {n for n in simulated.types if keep(n)}
    out += [f"missing family {n} ({real.types[n]})" for n in sorted(real_names - sim_names)]
    out += [f"extra family {n} ({simulated.types[n]})" for n in sorted(sim_names - real_names)]
    for name in sorted(real_names & sim_names):
        if real.types[name] != simulated.types[name]:
            out.append(f"{name}: type {simulated.types[name]}, real {real.types[name]}")
            continue
        want, have = real.label_sets.get(name, frozenset()), simulated.label_sets.get(name, frozenset())
        if want != have and want and have:  # a family without samples says nothing of its labels
            out.append(f"{name}: labels {_sets(have)}, real {_sets(want)}")
        if real.bounds.get(name) != simulated.bounds.get(name) and name in real.bounds:
            have_b = sorted(simulated.bounds.get(name, ()))
            out.append(f"{name}: buckets {have_b}, real {sorted(real.bounds[name])}")
    for label in ENUMERATED:
        want_v, have_v = _values(real, real_names, label), _values(simulated, sim_names, label)
        if want_v != have_v:
            out.append(f"label {label}: values {sorted(have_v)}, real {sorted(want_v)}")
    return out
