"""Messages a first-time user meets: the value is named, the reason is right (out of
range is not "not a percentage"), a near-miss unit gets a `did you mean`, and one
message never mixes units for the same quantity."""

from __future__ import annotations

import pytest

from genobs.compiler import build_plan
from genobs.errors import SpecError
from genobs.loader import load_spec_text
from genobs.units import parse_prom_duration, parse_ratio, parse_seconds

GOOD = "version: genobs/v1\nname: t\nuse_case: chat\n"


def problems(text: str) -> list[str]:
    with pytest.raises(SpecError) as err:
        build_plan(load_spec_text(text, "s.yaml"))
    return [str(p) for p in err.value.problems]


@pytest.mark.parametrize(
    ("written", "meant"),
    [("10min", "10m"), ("10 m", "10m"), ("1 sec", "1s"), ("2 hours", "2h"), ("30secs", "30s"), ("500 msec", "500ms")],
)
def test_near_miss_units_get_did_you_mean(written: str, meant: str):
    for parse in (parse_seconds, parse_prom_duration):
        with pytest.raises(ValueError, match=f"did you mean {meant}\\?$"):
            parse(written)


def test_no_guess_when_there_is_no_obvious_rewrite():
    with pytest.raises(ValueError) as err:
        parse_prom_duration("1.5h")  # Prometheus durations take whole numbers
    assert "did you mean" not in str(err.value) and "write e.g. 5m" in str(err.value)
    with pytest.raises(ValueError) as err:
        parse_seconds("soon")
    assert "did you mean" not in str(err.value)


def test_spec_for_10min_says_did_you_mean_10m():
    found = problems(GOOD + "alerts:\n  ttft: {for: 10min}\n")
    assert found == ["s.yaml:5:15: error: alerts.ttft.for: '10min' is not a Prometheus duration; did you mean 10m?"]


@pytest.mark.parametrize("value", ["120%", "100.5%", "-5%"])
def test_percentage_out_of_range_is_called_out_of_range(value: str):
    with pytest.raises(ValueError) as err:
        parse_ratio(value)
    assert str(err.value) == f"{value!r} is out of range; a percentage here is between 0% and 100%"
    assert "not a percentage" not in str(err.value)


def test_unreachable_threshold_warning_uses_one_unit():
    # e2e on vLLM 0.7.0 has buckets up to 60s; a 1m threshold equals the top bucket
    doc = load_spec_text(GOOD + "service: {engine_version: '0.7.0', selector: {job: v}}\nalerts:\n  e2e: {warning: 1m, critical: 2m}\n")
    warnings = [w for w in build_plan(doc).warnings if "can never fire" in w]
    assert warnings, build_plan(doc).warnings
    for w in warnings:
        assert "is 1m;" in w and "60s" not in w, w
