"""Every committed dashboard of out/ type-checks as `Dashboard` of Grafana's own npm package
@grafana/schema (generated from Grafana's CUE dashboard kind), with the real TypeScript
compiler. Both are pinned in tests/grafana_schema/package-lock.json and installed by
`make test` (`npm ci --prefix tests/grafana_schema`). The only errors allowed are ALLOWED:
places where the schema is stricter than Grafana itself and the dashboard needs the field."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO

NPM = REPO / "tests" / "grafana_schema"
TSC = NPM / "node_modules" / "typescript" / "bin" / "tsc"
SCHEMA = NPM / "node_modules" / "@grafana" / "schema" / "dist" / "types" / "index.d.ts"
DASHBOARDS = sorted(REPO.glob("out/*/grafana/*.json"))

# (JSON path of the reported value, TypeScript message, why Grafana needs it as written)
ALLOWED = (
    (
        r"panels\[\d+\](\.panels\[\d+\])?\.links\[\d+\]",
        r"is missing the following properties from type .*': asDropdown, icon, includeVars, keepTime, and 3 more\.$",
        "the schema types panel links as dashboard links; Grafana's panel links are data links "
        "({title, url, targetBlank}), which its panel editor writes without the dashboard-link fields",
    ),
    (
        r"annotations\.list\[\d+\]\.expr",
        r"""'"expr"' does not exist in type""",
        "the schema's annotation has no Prometheus fields; Grafana's Prometheus data source reads the "
        "query from `expr` (and `step`, `tagKeys`, `titleFormat`, `textFormat`, `useValueForTime`) "
        "on the annotation itself (tsc names only the first unknown key of an object)",
    ),
    (
        r"templating\.list\[\d+\]\.definition",
        r"""'"definition"' does not exist in type""",
        "Grafana writes a query variable's query as text in `definition` whenever it saves one and shows "
        "it in the variables list; without it a save rewrites the provisioned file",
    ),
)

# JSON has no TypeScript enums: a string-enum field ("palette-classic") is compared by its values
PRELUDE = """import type { Dashboard } from "@grafana/schema";
type Json<T> = T extends string
  ? `${T}`
  : T extends readonly (infer U)[]
    ? Json<U>[]
    : T extends object
      ? { [K in keyof T]: Json<T[K]> }
      : T;
export const dashboard: Json<Dashboard> = """


def _lines(value: object, path: str, indent: int, out: list[tuple[str, str]], prefix: str = "") -> None:
    """Pretty-print JSON as (line, JSON path of the value that starts on it) pairs."""
    pad = "  " * indent
    if isinstance(value, dict) and value:
        out.append((f"{pad}{prefix}{{", path))
        for i, (key, item) in enumerate(value.items()):
            _lines(item, f"{path}.{key}" if path else key, indent + 1, out, f"{json.dumps(key)}: ")
            out[-1] = (out[-1][0] + ("," if i < len(value) - 1 else ""), out[-1][1])
        out.append((f"{pad}}}", path))
    elif isinstance(value, list) and value:
        out.append((f"{pad}{prefix}[", path))
        for i, item in enumerate(value):
            _lines(item, f"{path}[{i}]", indent + 1, out)
            out[-1] = (out[-1][0] + ("," if i < len(value) - 1 else ""), out[-1][1])
        out.append((f"{pad}]", path))
    else:
        out.append((f"{pad}{prefix}{json.dumps(value)}", path))


def _tsc_ready() -> str:
    """Why tsc cannot run here, or ''. In CI a missing part fails the test; elsewhere it skips."""
    if shutil.which("node") is None:
        return "node is not installed (Debian: apt-get install nodejs npm)"
    if not (TSC.is_file() and SCHEMA.is_file()):
        return f"tsc and @grafana/schema are not installed: run `npm ci --prefix {NPM.relative_to(REPO)}`"
    return ""


def type_check(work: Path, boards: dict[str, object]) -> list[tuple[str, str, str]]:
    """(file, JSON path, message) of every tsc error over `boards` typed as Dashboard."""
    paths: dict[str, list[str]] = {}
    head = PRELUDE.splitlines()
    for name, board in boards.items():
        lines: list[tuple[str, str]] = []
        _lines(board, "", 0, lines)
        text = head[:-1] + [head[-1] + lines[0][0]] + [t for t, _ in lines[1:]]
        (work / f"{name}.ts").write_text("\n".join(text) + ";\n")
        paths[f"{name}.ts"] = [""] * (len(head) - 1) + [p for _, p in lines]
    config = {
        "compilerOptions": {
            "strict": True,
            "noEmit": True,
            "target": "es2020",
            "module": "commonjs",
            "moduleResolution": "node",
            "types": [],
            "noErrorTruncation": True,
            "baseUrl": str(NPM),
            "paths": {"@grafana/schema": [str(SCHEMA)]},
        },
        "files": sorted(paths),
    }
    (work / "tsconfig.json").write_text(json.dumps(config, indent=2))
    proc = subprocess.run(
        ["node", str(TSC), "-p", str(work / "tsconfig.json"), "--pretty", "false"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    errors = []
    for line in proc.stdout.splitlines():
        m = re.match(r"^(\S+\.ts)\((\d+),\d+\): error TS\d+: (.*)$", line)
        if m:
            name = Path(m.group(1)).name
            errors.append((name, paths[name][int(m.group(2)) - 1], m.group(3)))
    assert proc.returncode == 0 or errors, proc.stdout + proc.stderr  # tsc failed for another reason
    return errors


def _require_tsc() -> None:
    missing = _tsc_ready()
    if missing and os.environ.get("CI"):
        pytest.fail(missing)
    if missing:
        pytest.skip(missing)


@pytest.fixture(scope="module")
def tsc_errors(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[str, str, str]]:
    _require_tsc()
    boards = {b.parent.parent.name: json.loads(b.read_text()) for b in DASHBOARDS}
    return type_check(tmp_path_factory.mktemp("grafana_schema"), boards)


def test_every_example_spec_has_a_committed_dashboard():
    specs = {p.stem for p in (REPO / "specs").glob("*.yaml")}
    assert {b.parent.parent.name for b in DASHBOARDS} == specs


def unexplained(errors: list[tuple[str, str, str]]) -> list[str]:
    return [
        f"{name} {path}: {message}"
        for name, path, message in errors
        if not any(re.fullmatch(p, path) and re.search(m, message) for p, m, _ in ALLOWED)
    ]


def test_dashboards_type_check_against_grafanas_schema(tsc_errors: list[tuple[str, str, str]]):
    bad = unexplained(tsc_errors)
    assert not bad, f"{len(bad)} schema errors:\n" + "\n".join(bad[:40])


def test_every_allowed_error_still_occurs(tsc_errors: list[tuple[str, str, str]]):
    """An allow-list entry the dashboards no longer need is removed, not kept as a blind spot."""
    for pattern, message, _ in ALLOWED:
        assert any(re.fullmatch(pattern, p) and re.search(message, m) for _, p, m in tsc_errors), pattern


def test_the_check_reports_what_grafanalib_writes_at_its_json_path(tmp_path: Path):
    _require_tsc()
    board = json.loads((REPO / "out" / "chat" / "grafana" / "genobs-chat.json").read_text())
    panel = next(i for i, p in enumerate(board["panels"]) if p["type"] == "timeseries")
    board["panels"][panel]["fieldConfig"]["defaults"]["decimals"] = None  # grafanalib's defaults
    board["templating"]["list"][0]["current"]["tags"] = []
    bad = unexplained(type_check(tmp_path, {"chat": board}))
    assert [b.split(": ")[0] for b in bad] == [
        f"chat.ts panels[{panel}].fieldConfig.defaults.decimals",
        "chat.ts templating.list[0].current.tags",
    ], bad
