"""Plain-text and Markdown tables for the gate commands (CI logs and PR comments)."""

from __future__ import annotations


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render(header: list[str], rows: list[list[str]], fmt: str) -> str:
    """`text`: columns padded with two spaces; `md`: a GitHub table."""
    if fmt == "md":
        lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
        lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows]
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
