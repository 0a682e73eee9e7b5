"""RUNBOOK.md from the Plan through a Jinja2 template (prose only)."""

from __future__ import annotations

import contextlib
import functools
import re
from pathlib import Path

from genobs.plan.model import Plan


def templates_dir() -> Path:
    """Inside the wheel the templates sit in genobs/templates; in a checkout, at the top level."""
    here = Path(__file__).resolve().parent.parent
    for candidate in (here / "templates", here.parent / "templates"):
        if (candidate / "runbook.md.j2").is_file():
            return candidate
    raise FileNotFoundError("genobs templates not found")


_INLINE = re.compile(r"([\\`*_\[\]<>|~#&])")  # emphasis, code, links, raw HTML, entities, table cells
_LINE_START = re.compile(r"^([+\-=]|\d+[.)])")  # list items, setext underlines, "1." and "1)"


def md_quote(text: str) -> str:
    """Free text as a Markdown block quote whose every line is escaped: whatever the
    spec's description holds, it cannot open a code fence, a heading, a list, a table
    row or raw HTML, nor reach the runbook's structure after it."""
    lines = []
    for raw in text.strip().splitlines():
        line = _INLINE.sub(r"\\\1", raw.strip())  # no leading spaces: they would make a code block
        line = _LINE_START.sub(lambda m: m.group(1)[:-1] + "\\" + m.group(1)[-1], line)
        lines.append(f"> {line}" if line else ">")
    return "\n".join(lines)


def _bytecode_cache(directory: str | None = None):  # noqa: ANN202 (jinja2 imported here)
    """Jinja2's cache of compiled templates (default: its per-user folder in the temp directory,
    0700), keyed by the template's checksum; a cache file that cannot be read or written is
    only skipped. None where there is no safe folder."""
    import jinja2

    class QuietCache(jinja2.FileSystemBytecodeCache):
        def load_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
            try:
                super().load_bytecode(bucket)
            except Exception:  # unreadable or cut short: compile as without a cache
                bucket.reset()

        def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
            with contextlib.suppress(OSError):
                super().dump_bytecode(bucket)

    try:
        return QuietCache(directory)
    except (OSError, RuntimeError):
        return None


def environment(bytecode_cache: object = None):  # noqa: ANN201
    """The runbook's Jinja2 environment (`bytecode_cache`: see _bytecode_cache)."""
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
        bytecode_cache=bytecode_cache,  # type: ignore[arg-type]
    )
    env.filters["md_quote"] = md_quote
    return env


@functools.cache
def _environment():  # noqa: ANN202
    """One Jinja2 environment per process: it keeps the compiled template (recompiled when the
    file changes), so a multi-spec build compiles it once, and a later build loads it from
    the bytecode cache (compiling costs a build 16 ms)."""
    return environment(_bytecode_cache())


def render_runbook(plan: Plan, spec_file: str) -> str:
    return _environment().get_template("runbook.md.j2").render(plan=plan, spec_file=spec_file)
