"""Command line: `genobs build|schema`. Decides exit codes: 0 ok, 1 a check
failed, 2 the input is wrong."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import click

from genobs import __version__

# commands that live in heavier modules: name -> (module:attribute, one-line help)
LAZY_COMMANDS = {
    "simulate": ("genobs.sim.cli:simulate", "Run a simulated vLLM /metrics exporter (demos and tests)."),
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


def _fail_spec(exc) -> None:
    for p in exc.problems:
        click.echo(str(p), err=True)
    n = len(exc.problems)
    click.echo(f"{n} problem{'s' if n != 1 else ''} found; nothing was written", err=True)
    sys.exit(2)


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
@click.option("--strict", is_flag=True, help="Fail when promtool is missing.")
@click.option("--no-check", is_flag=True, help="Skip promtool.")
def build(specs: tuple[Path, ...], output: Path, strict: bool, no_check: bool) -> None:
    """Build SPECS (files or folders of *.yaml) into OUTPUT/<name>/."""
    from genobs import build as pipeline
    from genobs import promtool
    from genobs.errors import SpecError

    for s in specs:
        if not s.exists():
            click.echo(f"{s}: error: no such file or folder", err=True)
            sys.exit(2)
    try:
        outputs = pipeline.render_all(list(specs))
    except SpecError as exc:
        _fail_spec(exc)
    if not outputs:
        click.echo("no specs found", err=True)
        sys.exit(2)
    dirs = pipeline.write(outputs, output)
    failed = False
    for out, target in zip(outputs, dirs):
        click.echo(f"{out.spec_file} -> {target}/ ({len(out.files)} files)")
        if no_check:
            continue
        if promtool.find() is None:
            msg = "promtool not found on PATH: rules were not checked (install Debian's 'prometheus' package)"
            click.echo(("error: " if strict else "warning: ") + msg, err=True)
            failed |= strict
            continue
        for result in pipeline.check(target):
            if not result.ok:
                click.echo(result.output, err=True)
                failed = True
    sys.exit(1 if failed else 0)


@main.command()
def schema() -> None:
    """Print the JSON Schema of the spec format."""
    import json

    from genobs.spec import json_schema

    click.echo(json.dumps(json_schema(), indent=2, sort_keys=True))


if __name__ == "__main__":
    main()
