"""Engine profiles against the released packages: every name a build reads at a release is
defined in that release's wheel (tests/fixtures/engines/*_release_names.txt, read from the wheels
on PyPI), both ends of a range build, a release just outside is a located error, and older
releases read their own names."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from genobs.catalog import format_version, load_catalog, parse_version
from genobs.cli import main
from tests.conftest import REPO
from tests.test_engines import read_names

FIXTURES = REPO / "tests" / "fixtures" / "engines"
SGLANG_SPEC = (REPO / "specs" / "sglang.yaml").read_text()
DYNAMO_SPEC = (REPO / "specs" / "dynamo.yaml").read_text()


def _releases(file: str) -> dict[str, list[str]]:
    """release -> the fields after the wheel's file name and digest, one fixture line per wheel."""
    out = {}
    for line in (FIXTURES / file).read_text().splitlines():
        if line and not line.startswith("#"):
            release, _wheel, _digest, *rest = line.split()
            out[release] = rest
    return out


def sglang_families() -> dict[str, set[str]]:
    """wheel release (with .postN) -> the sglang: families it defines (type:name after the files)."""
    return {r: {f.split(":", 1)[1] for f in rest[1:]} for r, rest in _releases("sglang_release_names.txt").items()}


def dynamo_families() -> dict[str, set[str]]:
    out = {}
    for release, rest in _releases("dynamo_release_names.txt").items():
        fields = dict(f.split("=", 1) for f in rest)
        out[release] = set(fields["names"].split(","))
    return out


def family(series: str) -> str:
    """The family of a sample name: a histogram's _bucket, _sum and _count are its family's."""
    return re.sub(r"_(bucket|sum|count)$", "", series)


def sglang_spec(version: str) -> str:
    """specs/sglang.yaml at another release, without what that release cannot back (queue-time
    alert before 0.5.2, speculative decoding before 0.5.4): those are errors tested below."""
    text = SGLANG_SPEC.replace('engine_version: "0.5.23"', f'engine_version: "{version}"')
    assert text != SGLANG_SPEC or version == "0.5.23"
    v = parse_version(version)
    if v < (0, 5, 4):
        text = text.replace("  speculative_decoding: true", "  speculative_decoding: false")
    if v < (0, 5, 2):
        text = text.replace("alerts:\n  queue_time: {warning: 2s}\n", "")
    return text


def _build(tmp_path: Path, text: str, check: bool = False):
    spec = tmp_path / "spec.yaml"
    spec.write_text(text)
    out = tmp_path / "out"
    args = ["build", "-o", str(out), str(spec)] if check else ["build", "--no-check", "-o", str(out), str(spec)]
    return CliRunner().invoke(main, args), out


def _rules(out: Path, name: str) -> str:
    return "".join(p.read_text() for p in sorted((out / name / "prometheus").glob("*.rules.yaml")))


SGLANG_VERSIONS = sorted({format_version(parse_version(r)) for r in sglang_families()}, key=parse_version)


def test_sglang_range_is_the_released_wheels():
    catalog = load_catalog("sglang")
    assert format_version(catalog.min_version) == SGLANG_VERSIONS[0] == "0.4.10"
    assert format_version(catalog.max_version) == SGLANG_VERSIONS[-1] == "0.5.23"


@pytest.mark.parametrize("version", SGLANG_VERSIONS)
def test_sglang_reads_only_names_its_release_defines(version: str, tmp_path: Path):
    """Every sglang: series a build reads (rules and panels) is a family of every wheel of the
    release (0.5.3 covers 0.5.3 to 0.5.3.post3: a spec's version has no .postN)."""
    spec = tmp_path / "sglang.yaml"
    spec.write_text(sglang_spec(version))
    read = {family(n) for n in read_names(spec) if n.startswith("sglang:")}
    assert read
    wheels = {r: f for r, f in sglang_families().items() if format_version(parse_version(r)) == version}
    assert wheels
    for release, families in wheels.items():
        assert not read - families, f"SGLang {release} defines no {sorted(read - families)}"


def test_sglang_profile_types_match_each_release():
    """A family the profile reads at a release has the profile's type in that release's wheel (a
    histogram's _sum read as a counter is the histogram's)."""
    catalog = load_catalog("sglang")
    typed = {}
    for line in (FIXTURES / "sglang_release_names.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            fields = line.split()
            typed[fields[0]] = {f.split(":", 1)[1]: f.split(":", 1)[0] for f in fields[4:]}
    checked = 0
    for release, types in typed.items():
        v = parse_version(release)
        for key, metric in catalog.metrics.items():
            name = metric.name_for(v)
            if name is None:
                continue
            want = "histogram" if family(name) != name else metric.type
            assert types.get(family(name)) == want, f"{key}: {family(name)} in SGLang {release}"
            checked += 1
    assert checked > 500


@pytest.mark.parametrize("version", ["0.4.10", "0.5.23"])
def test_sglang_range_ends_build_and_pass_promtool(version: str, tmp_path: Path, promtool: str):
    result, out = _build(tmp_path, sglang_spec(version), check=True)
    assert result.exit_code == 0, result.output
    assert (out / "sglang" / "prometheus" / "alerts.rules.yaml").exists()


@pytest.mark.parametrize(("version", "line"), [("0.4.9", 11), ("0.5.24", 11)])
def test_sglang_release_just_outside_is_a_located_error(version: str, line: int, tmp_path: Path):
    result, out = _build(tmp_path, sglang_spec(version))
    assert result.exit_code == 2, result.output
    assert (
        f"spec.yaml:{line}:19: error: service.engine_version: SGLang {version} is outside the versions genobs "
        "knows (0.4.10 to 0.5.23)"
    ) in result.output
    assert "Traceback" not in result.output and not out.exists()


@pytest.mark.parametrize(
    ("version", "present", "absent"),
    [
        ("0.5.2", ["rate(sglang:queue_time_s_bucket{"], ["sglang:queue_time_seconds"]),
        ("0.5.3", ["rate(sglang:queue_time_seconds_bucket{"], ["sglang:queue_time_s_"]),
        ("0.5.5", ["rate(sglang:num_retractions_sum{"], ["sglang:num_retracted_requests_total"]),
        ("0.5.7", ["rate(sglang:num_retracted_requests_total{"], ["sglang:num_retractions"]),
        # liveness: the tokenizer's progress per server before 0.5.7, each scheduler's own tokens from it
        ("0.5.6", ["rate(sglang:generation_tokens_total{", "and on (model_name, namespace, job, instance) genobs:engine_progress"],
         ["realtime_tokens", "instance, dp_rank) genobs:engine_progress"]),
        ("0.5.7", ["rate(sglang:realtime_tokens_total{", "and on (model_name, namespace, job, instance, dp_rank) genobs:engine_progress"],
         ["and on (model_name, namespace, job, instance) genobs:engine_progress"]),
        # cached over prompt tokens, no `mode` matcher: the old counter has no such label
        ("0.5.17", ["rate(sglang:cached_tokens_total{"], ["prefill_effective", "mode=~"]),
        ("0.5.18", ["rate(sglang:prefill_effective_tokens_total{", ',mode=~".*_hit"}'], ["cached_tokens"]),
        ("0.5.21", ["rate(sglang:inter_token_latency_seconds_sum{"], ["request_time_per_output_token"]),
        ("0.5.22", ["rate(sglang:request_time_per_output_token_seconds_sum{"], []),
    ],
)
def test_sglang_older_releases_read_their_own_names(version: str, present: list[str], absent: list[str], tmp_path: Path):
    result, out = _build(tmp_path, sglang_spec(version))
    assert result.exit_code == 0, result.output
    rules = _rules(out, "sglang")
    for text in present:
        assert text in rules, f"{text} not in the rules of SGLang {version}"
    for text in absent:
        assert text not in rules, f"{text} in the rules of SGLang {version}"


def test_sglang_before_queue_histogram_and_retractions_says_so(tmp_path: Path):
    result, _ = _build(tmp_path, sglang_spec("0.5.1").replace("use_case: chat\n", "use_case: chat\nalerts:\n  queue_time: {warning: 2s}\n"))
    assert result.exit_code == 2, result.output
    assert "error: alerts.queue_time: queue_time is not observable on SGLang 0.5.1: SGLang exports no queue-time histogram before 0.5.2" in result.output
    result, _ = _build(tmp_path, sglang_spec("0.5.4"))
    assert result.exit_code == 0, result.output
    assert "Preemptions (preemptions) is not observable on SGLang 0.5.4" in " ".join(result.output.split())
    result, _ = _build(tmp_path, sglang_spec("0.5.5"))
    assert "Preemptions (preemptions) is an approximation on SGLang 0.5.5: SGLang 0.5.5 and 0.5.6 count retractions only per finished request" in " ".join(result.output.split())
    hidden = "one hung scheduler of a server with --dp-size above 1 is hidden while the others progress"
    assert "(engine_hung) is an approximation on SGLang 0.5.5: before 0.5.7" in " ".join(result.output.split())
    assert hidden in " ".join(result.output.split())
    result, _ = _build(tmp_path, sglang_spec("0.5.7"))
    assert result.exit_code == 0 and hidden not in " ".join(result.output.split()), result.output


@pytest.mark.parametrize(("version", "other"), [("0.5.7", "0.5.6"), ("0.5.6", "0.5.7")])
def test_sglang_upgrade_across_the_per_scheduler_tokens_judges_liveness_per_server(version: str, other: str, tmp_path: Path):
    """A fleet half on 0.5.6 (no sglang:realtime_tokens_total) and half on 0.5.7: reading each
    scheduler's tokens would leave every 0.5.6 pod holding requests without progress (hung); both
    directions read the tokenizer's progress per server, which both releases write."""
    text = sglang_spec(version).replace(
        f'  engine_version: "{version}"', f'  engine_version: "{version}"\n  other_engine_version: "{other}"'
    )
    assert "other_engine_version" in text
    result, out = _build(tmp_path, text)
    assert result.exit_code == 0, result.output
    rules = _rules(out, "sglang")
    assert "realtime_tokens" not in rules
    assert "and on (model_name, namespace, job, instance) genobs:engine_progress" in rules
    assert "rate(sglang:generation_tokens_total{" in rules


def test_sglang_speculative_decoding_before_the_accept_rate_gauge_is_a_located_error(tmp_path: Path):
    text = sglang_spec("0.5.3").replace("  speculative_decoding: false", "  speculative_decoding: true")
    result, _ = _build(tmp_path, text)
    assert result.exit_code == 2, result.output
    assert (
        "error: features.speculative_decoding: SGLang 0.5.3 exports no speculative-decoding acceptance metrics; "
        "speculative_decoding needs a version where they exist (sglang:spec_accept_rate from 0.5.4 on)"
    ) in result.output


def _dynamo_spec(version: str) -> str:
    text = DYNAMO_SPEC.replace('  engine_version: "1.6"', f'  engine_version: "{version}"')
    assert text != DYNAMO_SPEC
    return text


@pytest.mark.parametrize("version", ["1.5.0", "1.6.1"])
def test_dynamo_range_ends_build_and_read_names_of_the_wheels(version: str, tmp_path: Path, promtool: str):
    result, out = _build(tmp_path, _dynamo_spec(version), check=True)
    assert result.exit_code == 0, result.output
    read = {family(n) for n in read_names(tmp_path / "spec.yaml") if n.startswith("dynamo_")}
    assert read
    minor = version.rsplit(".", 1)[0]
    wheels = {r: f for r, f in dynamo_families().items() if r.startswith(minor + ".")}
    assert len(wheels) == 2
    for release, families in wheels.items():
        assert not read - families, f"ai-dynamo-runtime {release} defines no {sorted(read - families)}"


def test_dynamo_release_just_below_the_range_is_a_located_error(tmp_path: Path):
    result, out = _build(tmp_path, _dynamo_spec("1.4.2"))
    assert result.exit_code == 2, result.output
    assert "gateway.engine_version: Dynamo frontend 1.4.2 is outside the versions genobs knows (1.5.0 to 1.6.1)" in result.output
    assert "Traceback" not in result.output and not out.exists()
