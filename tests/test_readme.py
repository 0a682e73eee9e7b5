"""The README is the newcomer's only guide: its spec table names every key the
schema has (and nothing else), and its preset table every threshold a preset sets."""

from __future__ import annotations

import re

import pytest
import yaml

from genobs.spec import json_schema
from tests.conftest import REPO

README = (REPO / "README.md").read_text(encoding="utf-8")


def _section(title: str) -> str:
    start = README.index(f"\n{title}\n")
    end = README.find("\n## ", start + 1)
    return README[start : end if end != -1 else None]


def _first_cells(section: str) -> list[str]:
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    return [row.split(" | ")[0].strip("| ") for row in rows]


def readme_keys() -> set[str]:
    """`a.b` / `c` / `d` in a first cell stands for a.b, a.c and a.d."""
    keys: set[str] = set()
    for cell in _first_cells(_section("## The spec").split("### Use-case presets")[0]):
        parts = [p.strip().strip("`") for p in cell.split(" / ")]
        head = parts[0]
        keys.add(head)
        stem = head.rpartition(".")[0]
        keys.update(f"{stem}.{p}" if stem else p for p in parts[1:])
    return keys


def schema_keys() -> tuple[set[str], set[str]]:
    """(leaf keys, keys that hold other keys) of the JSON Schema; list items as `[]`,
    every per-signal key under alerts as `alerts.<signal>` (the Signals table lists them)."""
    schema = json_schema()
    defs = schema.get("$defs", {})
    leaves: set[str] = set()
    parents: set[str] = set()

    def resolve(node: dict) -> dict:
        for alt in node.get("anyOf", []):
            if alt.get("type") != "null":
                node = alt
                break
        if "$ref" in node:
            node = defs[node["$ref"].rsplit("/", 1)[1]]
        return node

    def walk(node: dict, path: str) -> None:
        node = resolve(node)
        if path.startswith("alerts."):
            leaves.add("alerts.<signal>")
            return
        if node.get("type") == "array" and "properties" in resolve(node.get("items", {})):
            parents.add(path)
            walk(node["items"], path + "[]")
            return
        if "properties" in node:
            if path:
                parents.add(path)
            for key, sub in node["properties"].items():
                walk(sub, f"{path}.{key}" if path else key)
            return
        leaves.add(path)

    walk(schema, "")
    return leaves, {p.removesuffix("[]") for p in parents}


def test_readme_spec_table_lists_every_schema_key():
    leaves, parents = schema_keys()
    documented = readme_keys()
    missing = sorted(leaves - documented)
    assert not missing, f"README's spec table lacks {missing}: add a row to '## The spec'"
    unknown = sorted(documented - leaves - parents)
    assert not unknown, f"README's spec table names keys the schema does not have: {unknown}"


# words the preset table uses for each signal a preset sets
_WORDS = {
    "ttft": "TTFT",
    "e2e": "E2E",
    "queue_time": "queue time",
    "output_speed_per_user": "output speed",
    "waiting_requests": "waiting",
    "itl": "ITL",
}


def _preset_rows() -> dict[str, str]:
    section = _section("### Use-case presets")
    rows = {}
    for line in section.splitlines():
        m = re.match(r"\| `(\w+)` \|", line)
        if m:
            rows[m.group(1)] = line
    return rows


@pytest.mark.parametrize("use_case", list(yaml.safe_load((REPO / "genobs/data/presets.yaml").read_text())))
def test_readme_preset_row_lists_every_threshold(use_case: str):
    preset = yaml.safe_load((REPO / "genobs/data/presets.yaml").read_text())[use_case]
    row = _preset_rows().get(use_case)
    assert row, f"README's preset table has no row for {use_case}"
    for signal, levels in preset.get("alerts", {}).items():
        words = _WORDS.get(signal, signal)
        thresholds = row.split(" | ")[2]  # after the use case and its KPI
        clause = next((c for c in thresholds.split(";") if words in c), None)
        assert clause, f"{use_case}: README row does not mention {words} ({signal})"
        if levels.get("enabled") is False:
            assert "off" in clause, (use_case, signal, clause)
            continue
        for sev in ("warning", "critical"):
            if sev in levels:
                value = str(levels[sev])
                assert re.search(rf"(?<![\d.]){re.escape(value)}(?![\d.])", clause), (use_case, signal, sev, clause)
