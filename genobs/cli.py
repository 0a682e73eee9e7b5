"""Command line: `genobs build|schema|init|explain|check|...`. Decides exit codes:
0 ok, 1 a check failed (or genobs itself failed), 2 the input is wrong. Heavy
modules are imported only when a command runs, so --help and completion stay fast."""

from __future__ import annotations

import contextlib
import gc
import importlib
import os
import sys
import typing
from pathlib import Path

import click

from genobs import __version__
from genobs.errors import SpecError, printable

# commands that live in heavier modules: name -> (module:attribute, one-line help)
LAZY_COMMANDS = {
    "simulate": ("genobs.sim.cli:simulate", "Run a simulated vLLM /metrics exporter (demos and tests)."),
    "init": ("genobs.commands.scaffold:init", "Write a commented starting spec for a use case."),
    "explain": (
        "genobs.commands.explain:explain",
        "Explain an alert or signal: PromQL, thresholds, first action.",
    ),
    "check": ("genobs.commands.check:check", "Fail when out/ is stale or hand-edited (CI, pre-commit)."),
    "scrape-config": (
        "genobs.commands.scrape_config:scrape_config",
        "Print a Prometheus scrape job that keeps vLLM's ':' names.",
    ),
    "doctor": ("genobs.commands.doctor:doctor", "Check a live Prometheus for the vLLM series a spec needs."),
    "benchmark": (
        "genobs.commands.benchmark:benchmark",
        "Judge benchmark exports (AIPerf, GuideLLM, vllm bench) by the spec's use-case KPIs.",
    ),
    "backtest": (
        "genobs.commands.backtest:backtest",
        "Replay a spec's alerts over a live Prometheus' history: episodes, pages per day.",
    ),
    "compare": (
        "genobs.commands.compare:compare",
        "Compare a baseline and a candidate in a live Prometheus; flag KPI regressions.",
    ),
}


class LazyGroup(click.Group):
    """Imports a command's module only when that command runs, so --help stays fast."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *LAZY_COMMANDS])

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in LAZY_COMMANDS:
            module, attr = LAZY_COMMANDS[name][0].split(":")
            return getattr(importlib.import_module(module), attr)
        return super().get_command(ctx, name)

    def invoke(self, ctx: click.Context):
        """Spec problems exit 2 with every problem listed; anything unexpected is one
        line and exit 1 (GENOBS_DEBUG=1 shows the traceback), never a traceback."""
        try:
            return super().invoke(ctx)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except SpecError as exc:
            # read-only commands (explain, doctor, ...) never write, so "nothing was written" would mislead
            fail_spec(exc, f"fix the spec and run genobs {ctx.invoked_subcommand} again")
        except BrokenPipeError:  # `genobs explain x | head`
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            sys.exit(1)
        except Exception as exc:
            if os.environ.get("GENOBS_DEBUG"):
                raise
            first = printable((str(exc).strip().splitlines() or [""])[0][:300])
            if isinstance(exc, OSError):
                click.echo(f"error: {first}", err=True)
            else:
                # genobs.build.InternalError already names the spec and the original exception
                kind = "" if type(exc).__name__ == "InternalError" else f"{type(exc).__name__}: "
                click.echo(
                    f"genobs: internal error: {kind}{first} "
                    "(a bug in genobs, not in the spec; GENOBS_DEBUG=1 shows the traceback)",
                    err=True,
                )
            sys.exit(1)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = []
        for name in self.list_commands(ctx):
            if name in LAZY_COMMANDS:
                rows.append((name, LAZY_COMMANDS[name][1]))
            else:
                cmd = super().get_command(ctx, name)
                if cmd is not None and not cmd.hidden:
                    rows.append((name, cmd.get_short_help_str(formatter.width - 6 - len(name))))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="genobs")
def main() -> None:
    """Compile LLM-serving specs into Prometheus rules, Grafana dashboards,
    runbooks and promtool unit tests."""


MAX_SHOWN = 200  # problems printed; a generated or corrupted file can hold thousands


def fail_spec(exc: SpecError, outcome: str = "nothing was written") -> typing.NoReturn:
    """Print every problem (file:line:column: error: field: message) and exit 2."""
    for p in exc.problems[:MAX_SHOWN]:
        click.echo(str(p), err=True)
    if len(exc.problems) > MAX_SHOWN:
        click.echo(f"... {len(exc.problems) - MAX_SHOWN} more problems not shown", err=True)
    n = len(exc.problems)
    click.echo(f"{n} problem{'s' if n != 1 else ''} found; {outcome}", err=True)
    sys.exit(2)


_fail_spec = fail_spec


@main.command()
@click.argument("specs", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "-o",
    "--output",
    "output",
    type=click.Path(path_type=Path),
    default=Path("out"),
    show_default=True,
    help="Folder that receives one sub-folder per spec.",
)
@click.option("--strict", is_flag=True, help="Fail when promtool is missing (nothing is written then).")
@click.option("--no-check", is_flag=True, help="Skip promtool.")
@click.option(
    "--kubernetes",
    is_flag=True,
    help="Also write kubernetes/ (PrometheusRule, dashboard ConfigMap, Grafana provisioning) for every spec.",
)
@click.option(
    "--force", is_flag=True, help="Replace OUTPUT/<name>/ even when genobs did not create it (its files are deleted)."
)
@click.option(
    "--tier",
    type=click.Choice(["all", "edge", "global"]),
    default=None,
    help="Which rules to write, overriding each spec's output.tier: all (one Prometheus), edge (each cluster's "
    "recording rules and the remote_write filter) or global (alerts, SLOs, dashboard over the shipped series).",
)
def build(
    specs: tuple[Path, ...], output: Path, strict: bool, no_check: bool, kubernetes: bool, force: bool, tier: str | None
) -> None:
    """Build SPECS (files or folders of *.yaml) into OUTPUT/<name>/.

    Every output is checked with promtool first (a private copy of its files, while
    later specs still render, one promtool per core); only when all checks pass are
    the folders staged and swapped in, all together. A failed check leaves OUTPUT as
    it was."""
    for s in specs:
        if not s.exists():
            click.echo(f"{s}: error: no such file or folder", err=True)
            sys.exit(2)
    # the output (or the first of its parents that exists) must be a folder: checked before any work
    probe = output
    while not probe.exists() and not probe.is_symlink() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        click.echo(printable(f"{probe}: error: -o needs a folder, and this is not one; nothing was written"), err=True)
        sys.exit(2)
    # what the build imports (some hundred thousand objects, all kept until exit) is not worth
    # the cyclic collector's passes while it loads: a tenth of the import time; freeze_imports
    # then moves it out of the collector's sight for good
    collecting = gc.isenabled()
    gc.disable()
    try:
        from genobs import build as pipeline
        from genobs import promtool
        from genobs.checks import Checks
        from genobs.writer import SwapFailed, WriteRefused

        pipeline.freeze_imports()
    finally:
        if collecting:
            gc.enable()
    run_checks = not no_check
    promtool_missing = run_checks and promtool.find() is None
    with contextlib.ExitStack() as stack:
        checks = stack.enter_context(Checks()) if run_checks and not promtool_missing else None
        try:
            outputs = pipeline.render_all(
                list(specs), kubernetes=kubernetes or None, on_output=checks.submit if checks else None, tier=tier
            )
        except SpecError as exc:
            stack.close()  # stop the checks already running before exiting
            fail_spec(exc)
        if not outputs:
            click.echo("no specs found", err=True)
            sys.exit(2)
        for out in outputs:
            for line in out.capabilities:
                click.echo(printable(f"{out.spec_file}: note: {line}"), err=True)
            for warning in out.warnings:
                click.echo(printable(f"{out.spec_file}: warning: {warning}"), err=True)
        kept = ", ".join(f"{output / o.name}/" for o in outputs)
        if promtool_missing:
            msg = "promtool not found on PATH: rules were not checked (install Debian's 'prometheus' package)"
            if strict:
                click.echo(f"error: {msg}", err=True)
                click.echo(f"nothing was written; {kept} {'stays' if len(outputs) == 1 else 'stay'} as it was", err=True)
                sys.exit(1)
            click.echo(f"warning: {msg}", err=True)
        failed = [r for r in checks.results() if not r.ok] if checks else []
    if failed:
        for result in failed:
            click.echo(result.output, err=True)
        click.echo(
            f"promtool checks failed; nothing was written: {kept} {'stays' if len(outputs) == 1 else 'stay'} as it was",
            err=True,
        )
        sys.exit(1)
    undeleted: list[Path] = []
    try:
        dirs = pipeline.write(outputs, output, force=force, undeleted=undeleted)
    except WriteRefused as exc:
        for line in exc.lines:
            click.echo(printable(f"error: {line}"), err=True)
        click.echo("nothing was written; move it away, choose another -o, or pass --force to replace it", err=True)
        sys.exit(2)
    except SwapFailed as exc:
        click.echo(printable(f"error: {exc.cause}"), err=True)
        if exc.replaced:
            click.echo("these folders hold the new build: " + ", ".join(f"{p}/" for p in exc.replaced), err=True)
        else:
            click.echo("no output folder was replaced; the previous build is still in place", err=True)
        sys.exit(1)
    for out, target in zip(outputs, dirs):
        click.echo(printable(f"{out.spec_file} -> {target}/ ({len(out.files)} files)"))
    for path in undeleted:  # the build is in place; only the old copy stays behind
        click.echo(printable(f"warning: {path}/ (old output) could not be deleted; remove it by hand"), err=True)


@main.command()
def schema() -> None:
    """Print the JSON Schema of the spec format."""
    import json

    from genobs.spec import json_schema

    click.echo(json.dumps(json_schema(), indent=2, sort_keys=True))


if __name__ == "__main__":
    main()
