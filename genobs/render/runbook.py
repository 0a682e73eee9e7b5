"""RUNBOOK.md from the Plan through a Jinja2 template (prose only)."""

from __future__ import annotations

from pathlib import Path

from genobs.plan.model import Plan


def templates_dir() -> Path:
    """Inside the wheel the templates sit in genobs/templates; in a checkout, at the top level."""
    here = Path(__file__).resolve().parent.parent
    for candidate in (here / "templates", here.parent / "templates"):
        if (candidate / "runbook.md.j2").is_file():
            return candidate
    raise FileNotFoundError("genobs templates not found")


def render_runbook(plan: Plan, spec_file: str) -> str:
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )
    return env.get_template("runbook.md.j2").render(plan=plan, spec_file=spec_file)
