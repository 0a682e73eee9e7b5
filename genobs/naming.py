"""Every name genobs generates: recorded series, rule groups, alerts' runbook
anchors and dashboard uids. Pure functions, so renderers and the runbook agree."""

from __future__ import annotations

import hashlib
import re

PREFIX = "genobs"


def record(subject: str, operation: str) -> str:
    """Recorded series name in the level:metric:operations convention."""
    return f"{PREFIX}:{subject}:{operation}"


def rate_op(operation: str, window: str) -> str:
    """'quantile', '5m' -> 'quantile_rate5m'; 'rate', '5m' -> 'rate5m'."""
    return f"rate{window}" if operation == "rate" else f"{operation}_rate{window}"


def group(spec_name: str, part: str) -> str:
    return f"{PREFIX}-{spec_name}-{part}"


COMPANIONS = ("-long", "-panels")  # suffixes of the slower companion groups (see rule_file)


def rule_file(spec_name: str, group_name: str) -> str:
    """Rule group genobs-<spec>-<part> is written to <part>.rules.yaml; a slower companion
    group shares its file: genobs-<spec>-slo-long (long SLO windows), genobs-<spec>-recording-panels
    (what only dashboard panels read)."""
    part = group_name.removeprefix(group(spec_name, ""))
    for suffix in COMPANIONS:
        part = part.removesuffix(suffix)
    return f"{part}.rules.yaml"


_ALERT_REF = re.compile(r"\{alert:([A-Za-z0-9]+)\}")


def alert(prefix: str, key: str, renames: tuple[tuple[str, str], ...] = ()) -> str:
    """'Sglang', 'TtftP99High' -> 'SglangTtftP99High': the emitted name of a pod-level alert,
    from its engine-neutral key (signals.yaml, capacity.yaml) and the engine profile's
    alert_prefix. `renames` (the profile's alert_renames) swap a key's first word for the
    engine's: ('Nixl', 'Kv') names NixlTransfersFailing SglangKvTransfersFailing on an engine
    whose transfers are not NIXL's. Every rule, test, inhibition, runbook heading and text takes
    the name from here."""
    for old, new in renames:
        if key.startswith(old) and key[len(old) : len(old) + 1].isupper():
            key = new + key[len(old) :]
            break
    return f"{prefix}{key}"


def alert_refs(text: str, prefix: str, renames: tuple[tuple[str, str], ...] = ()) -> str:
    """Fill the {alert:Key} references of a handbook text with the engine's alert names."""
    return _ALERT_REF.sub(lambda m: alert(prefix, m.group(1), renames), text)


_ENGINE_REF = re.compile(r"\{(engine|metrics_path|hint:([a-z_]+))\}")


def engine_refs(text: str, engine: str, metrics_path: str, hints: dict[str, str]) -> str:
    """Fill a handbook or alert text's engine words: {engine} (the profile's display_name),
    {metrics_path} and {hint:key} (the profile's `hints`, facts that differ per engine: the
    switch that turns its metrics off, its version notes). A hint the profile lacks is an error."""

    def word(m: re.Match) -> str:
        if m.group(1) == "engine":
            return engine
        if m.group(1) == "metrics_path":
            return metrics_path
        if m.group(2) not in hints:
            raise KeyError(f"the {engine} profile has no hints.{m.group(2)} (named in: {text[:60]}...)")
        return hints[m.group(2)]

    return _ENGINE_REF.sub(word, text)


def anchor(title: str) -> str:
    """GitHub-style heading anchor; runbook headings are alert names, so anchors match."""
    text = title.strip().lower()
    text = re.sub(r"[^a-z0-9 _-]", "", text)
    return text.replace(" ", "-")


def runbook_url(base_url: str, alert_name: str) -> str:
    return f"{base_url}#{anchor(alert_name)}"


def dashboard_uid(spec_name: str) -> str:
    """Grafana uids hold 40 characters; a longer one is cut and ends in a short hash
    of the whole name, so two names that differ only after the cut stay distinct."""
    uid = f"{PREFIX}-{spec_name}"
    if len(uid) <= 40:
        return uid
    return f"{uid[:33].rstrip('-')}-{hashlib.sha256(uid.encode()).hexdigest()[:6]}"


def _slo_prefix(slo_name: str) -> str:
    words = re.split(r"[^A-Za-z0-9]+", slo_name)
    return "Slo" + "".join(w[:1].upper() + w[1:] for w in words if w)


def slo_alert(slo_name: str, speed: str) -> str:
    """'first-token', 'fast' -> 'SloFirstTokenErrorBudgetBurnFast'."""
    return _slo_prefix(slo_name) + f"ErrorBudgetBurn{speed.capitalize()}"


def slo_unavailable(slo_name: str) -> str:
    """'first-token' -> 'SloFirstTokenSliUnavailable'."""
    return _slo_prefix(slo_name) + "SliUnavailable"
