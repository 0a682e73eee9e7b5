"""Wall time and peak memory of `genobs build`, each in a fresh process, best of N runs:
the example specs with and without promtool checks, next to importing genobs' runtime
dependencies in a bare interpreter, and (`--scale`) large specs: many SLOs, many models."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import scale_specs  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
DEPS = "import click, pydantic, yaml, jinja2, grafanalib.core, promql_parser"  # what a build imports
# name -> (SLOs, models)
SCALE = {
    "100 SLOs": (100, 1),
    "300 SLOs": (300, 1),
    "1000 SLOs": (1000, 1),
    "100 models x 50 SLOs": (50, 100),
    "1000 models x 50 SLOs": (50, 1000),
    "5000 models x 50 SLOs": (50, 5000),
}
TIMED_OUT = (float("inf"), float("inf"))
# example specs of the other engines, each against the vLLM chat spec (target: at most 1.2x)
ENGINE_SPECS = ("specs/sglang.yaml", "specs/sglang-pd.yaml", "specs/trtllm.yaml")
ENGINE_TARGET = 1.2
IMPORT_TARGET = 2.0  # a --no-check build of any example spec, over importing its dependencies (CPU)


def _once(cmd: list[str], timeout: float | None) -> tuple[float, float, float]:
    """(wall seconds, CPU seconds, peak RSS MiB) of one run of `cmd` in a fresh process; a run
    past `timeout` seconds is stopped: (inf, inf, its peak RSS until then)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)  # this child's own CPU time and peak RSS
        if pid:
            break
        if timeout is not None and time.perf_counter() - start > timeout:
            proc.kill()
            _, _, usage = os.wait4(proc.pid, 0)
            return (*TIMED_OUT, usage.ru_maxrss / 1024)
        time.sleep(0.01)
    wall = time.perf_counter() - start
    if status != 0:
        raise SystemExit(f"{cmd} failed with status {status}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def measure_together(
    cmds: list[list[str]], runs: int, timeout: float | None = None, warm_up: bool = True
) -> list[tuple[float, float, float]]:
    """(best wall seconds, best CPU seconds, peak RSS MiB of the child) of each command over
    `runs` runs, after one warm-up run each (unless `warm_up` is false). The commands run in
    turns (a, b, a, b, ...): on a shared machine whose load comes and goes, the ratio of two
    is then taken over the same stretches of load, not one command's quiet minute against the
    other's busy one. CPU time (user + system of the child) is what a loaded machine distorts
    least. Children may write bytecode (PYTHONDONTWRITEBYTECODE unset): an installed genobs
    has its .pyc files, as its dependencies do, so the warm-up run leaves the same state."""
    best = [[float("inf"), float("inf"), 0.0] for _ in cmds]
    stopped: set[int] = set()  # commands that ran past `timeout` once: not run again
    for i in range(runs + 1 if warm_up else runs):
        for k, (cmd, found) in enumerate(zip(cmds, best)):
            if k in stopped:
                continue
            wall, cpu, rss = _once(cmd, timeout)
            found[2] = max(found[2], rss)
            if wall == float("inf"):
                stopped.add(k)
                found[0] = found[1] = wall
            elif not (warm_up and i == 0):
                found[0], found[1] = min(found[0], wall), min(found[1], cpu)
    return [(w, c, r) for w, c, r in best]


def measure(
    cmd: list[str], runs: int, timeout: float | None = None, warm_up: bool = True
) -> tuple[float, float, float]:
    """measure_together for one command."""
    return measure_together([cmd], runs, timeout, warm_up)[0]


# Stands in for promtool on PATH: runs the real one, then appends the CPU time (user, system)
# of what it ran to $PROMTOOL_CPU_LOG (bash's `times`, run in this shell, not a pipeline's
# subshell: its first line is the shell's own, its second the children's).
_PROMTOOL_WRAPPER = """#!/bin/bash
"{promtool}" "$@"
rc=$?
times >> "$PROMTOOL_CPU_LOG"
exit $rc
"""


def _seconds(text: str) -> float:
    """bash's `times` field, e.g. 1m2.500s."""
    minutes, _, rest = text.partition("m")
    return int(minutes) * 60 + float(rest.rstrip("s"))


def promtool_cpu(cmd: list[str], tmp: Path) -> tuple[float, int]:
    """(CPU seconds of every promtool `cmd` starts, number of promtool runs): `cmd` runs once
    with a promtool on PATH that logs its own CPU time. What the checks cost at least: on C
    cores, the checked build takes no less than that over C, however it shares the runs."""
    real = shutil.which("promtool")
    if real is None:
        raise SystemExit("promtool is not on PATH")
    folder = tmp / "promtool-wrapper"
    folder.mkdir(exist_ok=True)
    wrapper = folder / "promtool"
    wrapper.write_text(_PROMTOOL_WRAPPER.format(promtool=real))
    wrapper.chmod(0o755)
    log = folder / "cpu.log"
    log.write_text("")
    env = {**os.environ, "PATH": f"{folder}{os.pathsep}{os.environ.get('PATH', '')}", "PROMTOOL_CPU_LOG": str(log)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    subprocess.run(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    runs = [line.split() for line in log.read_text().splitlines()[1::2]]  # each run's second line
    return sum(_seconds(user) + _seconds(system) for user, system in runs), len(runs)


def _sizes(prom: Path) -> str:
    """Sizes of the rule files, of the generated unit tests, and of slo.rules.yaml alone."""
    mib = 2**20
    rules = sum(p.stat().st_size for p in prom.glob("*.yaml")) / mib
    tests = sum(p.stat().st_size for p in (prom / "tests").rglob("*.yaml")) / mib
    slo = (prom / "slo.rules.yaml").stat().st_size / mib
    return f"rules {rules:.2f} MiB (slo.rules {slo:.2f}), tests {tests:.2f} MiB"


def main() -> None:
    global REPO
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5, help="runs per command; the best is reported")
    parser.add_argument("--scale", action="store_true", help="also the large specs (minutes; one run each)")
    parser.add_argument("--timeout", type=float, default=600, help="seconds before a large-spec build is stopped")
    parser.add_argument("--slos-only", action="store_true", help="only the 100, 300 and 1000 SLO builds of --scale")
    parser.add_argument(
        "--specs-only",
        action="store_true",
        help="only every example spec's --no-check build against the import floor, in turns",
    )
    parser.add_argument(
        "--engines-only", action="store_true", help="only the other engines' example specs against specs/chat.yaml"
    )
    parser.add_argument(
        "--repo",
        type=Path,
        default=REPO,
        help="a checkout of genobs to measure (e.g. a git worktree of an earlier commit, for before figures); "
        "its own specs/ and genobs package, this interpreter's dependencies",
    )
    args = parser.parse_args()
    REPO = args.repo.resolve()
    genobs = [sys.executable, "-m", "genobs"]
    rows: list[tuple[str, float, float, float, str]] = []

    def ratio(a: tuple[float, float, float], b: tuple[float, float, float], what: str) -> str:
        return f"{a[0] / b[0]:.1f}x {what} (CPU {a[1] / b[1]:.1f}x)"

    with tempfile.TemporaryDirectory() as tmp:
        if not (args.slos_only or args.engines_only):
            # every example spec against the import floor (target: IMPORT_TARGET), all in turns
            specs = sorted(str(p.relative_to(REPO)) for p in (REPO / "specs").glob("*.yaml"))
            deps, *found = measure_together(
                [[sys.executable, "-c", DEPS]] + [[*genobs, "build", "--no-check", s, "-o", tmp] for s in specs],
                args.runs,
            )
            rows.append(("import of the runtime dependencies", *deps, "the floor of the rows below"))
            for spec, one in zip(specs, found):
                over = one[1] / deps[1]
                verdict = "ok" if over <= IMPORT_TARGET else f"ABOVE the {IMPORT_TARGET:g}x target"
                rows.append((f"build --no-check {spec}", *one, f"{ratio(one, deps, 'the import')}: {verdict}"))
        if not (args.slos_only or args.specs_only):
            # an engine's spec builds as fast as the vLLM chat spec (within ENGINE_TARGET); in turns
            builds = [[*genobs, "build", "--no-check", s, "-o", tmp] for s in ("specs/chat.yaml", *ENGINE_SPECS)]
            chat, *others = measure_together(builds, args.runs)
            rows.append(("build --no-check specs/chat.yaml", *chat, "vLLM: the reference"))
            for spec, found in zip(ENGINE_SPECS, others):
                over = found[1] / chat[1]
                verdict = "ok" if over <= ENGINE_TARGET else f"ABOVE the {ENGINE_TARGET:g}x target"
                rows.append((f"build --no-check {spec}", *found, f"{ratio(found, chat, 'chat.yaml')}: {verdict}"))
        if not (args.slos_only or args.engines_only or args.specs_only):
            # each ratio's two commands run in turns (measure_together)
            deps, helped, one = measure_together(
                [
                    [sys.executable, "-c", DEPS],
                    [*genobs, "--help"],
                    [*genobs, "build", "--no-check", "specs/chat.yaml", "-o", tmp],
                ],
                args.runs,
            )
            rows.append(("import of the runtime dependencies", *deps, ""))
            rows.append(("genobs --help", *helped, ""))
            rows.append(("genobs build --no-check specs/chat.yaml", *one, ratio(one, deps, "the import")))
            rows.append(
                (
                    "genobs build specs/chat.yaml",
                    *measure([*genobs, "build", "specs/chat.yaml", "-o", tmp], args.runs),
                    "",
                )
            )
            # promtool runs in child processes, one per core: wait4 counts their CPU too (Linux reports
            # a reaped child with the descendants it waited for)
            fast, checked = measure_together(
                [[*genobs, "build", "--no-check", "specs/", "-o", tmp], [*genobs, "build", "specs/", "-o", tmp]],
                args.runs,
            )
            rows.append(("genobs build --no-check specs/", *fast, ""))
            rows.append(("genobs build specs/ (promtool checks)", *checked, ratio(checked, fast, "--no-check")))
            # the floor of that ratio: promtool's own CPU on what the check stage runs, over the cores
            cpu, runs = promtool_cpu([*genobs, "build", "specs/", "-o", tmp], Path(tmp))
            cores = os.cpu_count() or 1
            floor = (cpu / cores, cpu, 0.0)
            rows.append(
                (
                    f"promtool alone, {runs} runs, over {cores} cores",
                    *floor,
                    f"{cpu / cores / fast[0]:.1f}x --no-check: the checks' floor (wall = its CPU / cores)",
                )
            )
        if args.scale or args.slos_only:
            folder = Path(tmp) / "scale"
            folder.mkdir()
            times: dict[str, tuple[float, float, float]] = {}
            for label, (slos, models) in SCALE.items():
                if args.slos_only and models > 1:
                    continue
                name = label.replace(" ", "-").lower()  # a spec name is lower-case
                spec = scale_specs.write(folder, name, slos, models)
                cmd = [*genobs, "build", "--no-check", str(spec), "-o", str(folder / "out")]
                # one run each, no warm-up: the example specs above already wrote the bytecode
                times[label] = found = measure(cmd, 1, args.timeout, warm_up=False)
                if found[0] == float("inf"):
                    rows.append((f"build --no-check, {label}", *found, f"stopped after {args.timeout:g} s"))
                    continue
                note = _sizes(folder / "out" / name / "prometheus")
                if label in ("300 SLOs", "1000 SLOs") and times["100 SLOs"][0] != float("inf"):
                    # linear means the time per SLO stays put: 1.0x
                    per = slos / 100
                    per_slo = (found[0] / per, found[1] / per, found[2])
                    note += ", " + ratio(per_slo, times["100 SLOs"], "the 100 SLOs' time per SLO")
                rows.append((f"build --no-check, {label}", *found, note))
    print(f"{'command':<44} {'best wall s':>12} {'best CPU s':>11} {'peak RSS MiB':>13}  note")
    for name, wall, cpu, rss, note in rows:
        print(f"{name:<44} {wall:>12.3f} {cpu:>11.3f} {rss:>13.1f}  {note}")


if __name__ == "__main__":
    main()
