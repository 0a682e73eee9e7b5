"""`load` stage: pydantic errors and threshold units as messages saying what is wrong and what to write."""

from __future__ import annotations

import functools
import typing

from pydantic import BaseModel

from genobs import data as data_files
from genobs.spec import Spec
from genobs.units import parse_number, parse_ratio, parse_seconds

Path_ = tuple[str | int, ...]


def _close_match(word: str, candidates: typing.Iterable[str]) -> list[str]:
    import difflib  # only a spec with a problem needs it

    return difflib.get_close_matches(word, candidates, n=1)


def _model_at(loc: Path_) -> type[BaseModel] | None:
    """The pydantic model class that validates the mapping at `loc`."""
    model: type[BaseModel] | None = Spec
    for part in loc:
        if model is None:
            return None
        if isinstance(part, int):
            continue
        info = model.model_fields.get(part)
        if info is None:
            info = next((f for f in model.model_fields.values() if f.alias == part), None)
        if info is None:
            return None
        model = _find_model(info.annotation)
    return model


def _find_model(annotation: object) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _find_model(arg)
        if found:
            return found
    return None


def _field_names(model: type[BaseModel]) -> list[str]:
    return [f.alias or name for name, f in model.model_fields.items()]


def _home_of(key: str, model: type[BaseModel]) -> str | None:
    """The section of `model` whose fields include `key` (a key written one level too high)."""
    for name, info in model.model_fields.items():
        sub = _find_model(info.annotation)
        if sub is not None and key in _field_names(sub):
            return info.alias or name
    return None


_EXAMPLES = {
    ("version",): "version: genobs/v1",
    ("name",): "name: chat-prod",
    ("use_case",): "use_case: chat",
    ("slos", "name"): "name: first-token",
    ("slos", "sli"): "sli: ttft",
    ("slos", "objective"): "objective: 99.5%",
}


def _yaml_kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "text"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _clean_loc(loc: tuple) -> Path_:
    return tuple(
        p
        for p in loc
        if not (
            isinstance(p, str) and (p.startswith(("function-", "literal[")) or p in {"str", "float", "int", "bool"})
        )
    )


def message(err: dict) -> tuple[Path_, str]:
    loc = _clean_loc(err["loc"])
    kind = err["type"]
    value = err.get("input")
    if loc and loc[-1] == "[key]":
        loc = loc[:-1]
    if kind == "extra_forbidden":
        model = _model_at(loc[:-1])
        names = _field_names(model) if model else []
        hint = _close_match(str(loc[-1]), names)
        msg = f"unknown key {loc[-1]!r}"
        home = _home_of(str(loc[-1]), model) if model else None
        if home:
            msg += f"; it belongs under {home}:"
        elif hint:
            msg += f"; did you mean {hint[0]!r}?"
        elif names:
            msg += f"; expected one of: {', '.join(names)}"
        return loc, msg
    if kind == "literal_error":
        expected = err.get("ctx", {}).get("expected", "")
        allowed = [s.strip().strip("'") for s in expected.replace(" or ", ", ").split(",")]
        hint = _close_match(str(value), allowed)
        msg = f"{_shown(value)} is not allowed; expected one of: {', '.join(allowed)}"
        if hint:
            msg += f" (did you mean {hint[0]!r}?)"
        return loc, msg
    if kind == "missing":
        key = str(loc[-1]) if loc else "?"
        example = _EXAMPLES.get((*[p for p in loc[:-1] if isinstance(p, str)], key))
        return loc, f"required key {key!r} is missing" + (f"; add e.g. `{example}`" if example else "")
    if err["loc"][-1:] in (("str",), ("float",), ("int",)):  # a value that may be text or a number
        return loc, f"expected a value such as 2s, 5% or 10, got {_yaml_kind(value)} ({_shown(value)})"
    if kind == "string_type":
        msg = f"expected text, got {_yaml_kind(value)} ({_shown(value)})"
        if isinstance(value, (bool, int, float)):
            msg += "; put it in quotes, e.g. " + ('"0.33"' if loc[-1:] == ("engine_version",) else '"yes"')
        return loc, msg
    if kind in ("bool_type", "bool_parsing"):
        return loc, f"expected true or false, got {_shown(value)}"
    if kind in ("float_type", "float_parsing", "int_type", "int_parsing", "int_from_float"):
        return loc, f"expected a number, got {_yaml_kind(value)} ({_shown(value)})"
    if kind in ("list_type", "tuple_type"):
        example = f"[{value}]" if isinstance(value, (str, int, float)) and not isinstance(value, bool) else "[a, b]"
        return loc, f"expected a list, got {_yaml_kind(value)}; write e.g. {example}"
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return loc, f"expected a mapping of keys (key: value), got {_yaml_kind(value)} ({_shown(value)})"
    if kind in ("greater_than_equal", "greater_than", "less_than", "less_than_equal"):
        bound = next(iter(err.get("ctx", {}).values()), "")
        words = {
            "greater_than_equal": "at least",
            "greater_than": "above",
            "less_than": "below",
            "less_than_equal": "at most",
        }[kind]
        return loc, f"must be {words} {bound}, got {_shown(value)}"
    msg = err["msg"]
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    return loc, msg


@functools.cache
def _alert_kinds() -> dict[str, str]:
    """signal -> unit of its thresholds (seconds, ratio, number, none), from signals.yaml."""
    data = data_files.load("signals.yaml")
    return {a["signal"]: a["kind"] for a in data["alerts"].values() if a.get("primary")}


_UNIT_PARSERS = {"seconds": parse_seconds, "ratio": parse_ratio, "number": parse_number}


def threshold_problems(data: dict, report) -> None:
    """Threshold values checked against their signal's unit now, so they are
    reported together with every other problem of the file."""
    alerts = data.get("alerts") if isinstance(data, dict) else None
    if not isinstance(alerts, dict):
        return
    kinds = _alert_kinds()
    for signal, override in alerts.items():
        if signal not in kinds or not isinstance(override, dict):
            continue
        for sev in ("critical", "warning", "info"):
            value = override.get(sev)
            if value is None or isinstance(value, (list, dict)):
                continue
            if kinds[signal] == "none":
                report(("alerts", signal, sev), f"{signal} alerts have no threshold; only enabled and for apply")
                continue
            try:
                _UNIT_PARSERS[kinds[signal]](value)
            except ValueError as exc:
                report(("alerts", signal, sev), str(exc))
