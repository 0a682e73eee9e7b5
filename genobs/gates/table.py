"""The output discipline of the gate commands (CI logs, PR comments, machines):
plain-text and Markdown tables, every value that came from an input escaped for
where it is shown, and strict JSON."""

from __future__ import annotations

import json
import math
import re

from genobs.errors import printable

# CommonMark's backslash-escapable punctuation that can start markup, a link, HTML (<!--) or a cell
_MD_SPECIAL = re.compile(r"([\\`*_\[\]|<>&#~!])")


def md_escape(text: str) -> str:
    """`text` as literal Markdown inline text: no control character, markup, HTML or new table cell."""
    return _MD_SPECIAL.sub(r"\\\1", printable(text))


def escape(text: str, fmt: str) -> str:
    """An input-derived value for output format `fmt` (text or md)."""
    return md_escape(text) if fmt == "md" else printable(text)


def render(header: list[str], rows: list[list[str]], fmt: str) -> str:
    """`text`: columns padded with two spaces; `md`: a GitHub table. Every cell is escaped."""
    rows = [[escape(c, fmt) for c in row] for row in rows]
    if fmt == "md":
        lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
        lines += ["| " + " | ".join(row) + " |" for row in rows]
        return "\n".join(lines)
    # drop columns that are empty in every row (e.g. notes), keep the header readable
    keep = [i for i in range(len(header)) if any(row[i] for row in rows)] or list(range(len(header)))
    header = [header[i] for i in keep]
    rows = [[row[i] for i in keep] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    out = ["  ".join(h.ljust(w) for h, w in zip(header, widths)).rstrip()]
    out.append("  ".join("-" * w for w in widths))
    out += ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    return "\n".join(out)


def _finite(value: object, path: str, found: list[str]) -> object:
    if isinstance(value, float) and not math.isfinite(value):
        found.append(f"{path}: {value!r} written as null (not a finite number)")
        return None
    if isinstance(value, dict):
        return {k: _finite(v, f"{path}.{k}" if path else str(k), found) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v, f"{path}[{i}]", found) for i, v in enumerate(value)]
    return value


def strict_json(doc: dict) -> str:
    """`doc` as standard JSON: NaN and infinities become null, each named in `non_finite`."""
    found: list[str] = []
    clean = _finite(doc, "", found)
    if found:
        clean["non_finite"] = found
    return json.dumps(clean, indent=2, ensure_ascii=False, allow_nan=False) + "\n"
