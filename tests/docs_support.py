"""Reading the README and the docs/ pages as a reader does: their pages, headings and
anchors (GitHub's rules), links, ```sh blocks and the commands in them."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from tests.conftest import REPO

DOCS = REPO / "docs"
# every Markdown page a reader is sent to: the README, the changelog and docs/
PAGES = [REPO / "README.md", REPO / "CHANGELOG.md", *sorted(DOCS.glob("*.md"))]


def page(name: str) -> str:
    """A page by its path in the repository, e.g. "docs/spec.md"."""
    return (REPO / name).read_text(encoding="utf-8")


def rel(path: Path) -> str:
    return str(path.relative_to(REPO))


def outside_fences(text: str):
    """(line number, line) of every line outside fenced code blocks."""
    fence = None
    for n, line in enumerate(text.splitlines(), 1):
        m = re.match(r"^ *(```+|~~~+)", line)
        if m:
            if fence is None:
                fence = m.group(1)
            elif m.group(1).startswith(fence):
                fence = None
            continue
        if fence is None:
            yield n, line


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: the rendered text (no code marks, link text only),
    lower case, punctuation other than - and _ dropped, spaces turned into -."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "").strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def headings(text: str) -> list[tuple[int, str]]:
    """(level, text) of every heading outside code blocks."""
    out = []
    for _, line in outside_fences(text):
        m = re.match(r"^(#{1,6}) +(.*?) *#*$", line)
        if m:
            out.append((len(m.group(1)), m.group(2)))
    return out


def anchors(text: str) -> set[str]:
    """Every anchor GitHub gives the page's headings (a repeated one gets -1, -2, ...)."""
    seen: dict[str, int] = {}
    out = set()
    for _, title in headings(text):
        s = slug(title)
        n = seen.get(s, 0)
        out.add(s if n == 0 else f"{s}-{n}")
        seen[s] = n + 1
    return out


def links(text: str) -> list[tuple[int, str]]:
    """(line, target) of every Markdown link and image outside code, inline code dropped."""
    out = []
    for n, line in outside_fences(text):
        line = re.sub(r"`[^`]*`", "", line)
        out += [(n, m.group(1)) for m in re.finditer(r"\]\(([^)\s]+)(?: \"[^\"]*\")?\)", line)]
    return out


def section(text: str, title: str) -> str:
    """From the heading line `title` (e.g. "## Use-case presets") to the next heading of
    the same or a higher level."""
    level = len(title) - len(title.lstrip("#"))
    start = text.index(f"\n{title}\n") if not text.startswith(f"{title}\n") else 0
    nxt = re.compile(rf"^#{{1,{level}}} ", re.M)
    m = nxt.search(text, text.index("\n", start + 1) + 1)
    return text[start : m.start() if m else None]


def sh_blocks(text: str) -> list[str]:
    """The ```sh blocks, dedented as a reader would paste them."""
    out = []
    for m in re.finditer(r"^( *)```sh\n(.*?)^\1```", text, re.M | re.S):
        indent = len(m.group(1))
        out.append("\n".join(line[indent:] for line in m.group(2).splitlines()) + "\n")
    return out


def logical_lines(block: str) -> list[str]:
    """What the shell reads as one line: backslash continuations joined, a here-document's
    body kept with the line that opens it; blank and comment-only lines dropped."""
    lines = block.splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        while line.endswith("\\") and i + 1 < len(lines):
            i += 1
            line = line[:-1] + " " + lines[i].strip()
        m = re.search(r"<<-?\s*(['\"]?)(\w+)\1", line)
        if m:
            body = []
            while i + 1 < len(lines) and lines[i + 1].strip() != m.group(2):
                i += 1
                body.append(lines[i])
            i += 1  # the delimiter
            line = "\n".join([line, *body, m.group(2)])
        i += 1
        if line.strip() and not line.lstrip().startswith("#"):
            out.append(line)
    return out


@dataclass
class Command:
    """One simple command: environment assignments, then the words as the shell passes
    them (quotes removed, globs not yet expanded)."""

    env: dict[str, str] = field(default_factory=dict)
    argv: list[str] = field(default_factory=list)


_SEPARATORS = {";", "&&", "||", "|", "&", "(", ")"}
_REDIRECTS = {">", ">>", "<", "<<", "<<-", ">&", "<&", "&>", ">|"}


def simple_commands(line: str) -> list[Command]:
    """The simple commands of a logical line (its first physical line: a here-document's
    body is data). Redirections and their targets are dropped."""
    lexer = shlex.shlex(line.split("\n", 1)[0], posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    commands = [Command()]
    tokens = list(lexer)
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok in _SEPARATORS:
            commands.append(Command())
        elif tok in _REDIRECTS or re.fullmatch(r"\d[<>]+&?", tok):
            i += 1  # its target
        else:
            cmd = commands[-1]
            m = re.fullmatch(r"([A-Za-z_]\w*)=(.*)", tok, re.S)
            if m and not cmd.argv:
                cmd.env[m.group(1)] = m.group(2)
            else:
                cmd.argv.append(tok)
        i += 1
    return [c for c in commands if c.argv or c.env]


def substitutions(word: str) -> list[str]:
    """The command lines inside $( ... ) of a word."""
    return re.findall(r"\$\(([^()]*)\)", word)


@dataclass
class ShellLine:
    page: str  # e.g. "docs/gates.md"
    block: int  # index of the ```sh block on the page
    text: str  # the logical line as written
    cwd: str  # where the docs say it runs: "." (the clone) or an absolute folder


def shell_lines(path: Path) -> list[ShellLine]:
    """Every logical line of a page's ```sh blocks, with the folder it runs in: the clone,
    unless an earlier `cd` on the page (a shell the walkthrough keeps open) moved it, or
    the block's first comment says `(in /some/folder)`."""
    out = []
    cwd = "."
    for b, block in enumerate(sh_blocks(path.read_text(encoding="utf-8"))):
        first = block.lstrip().splitlines()[0] if block.strip() else ""
        m = re.match(r"#.*\(in (/[^)\s]+)\)", first)
        block_cwd = m.group(1) if m else cwd
        for line in logical_lines(block):
            out.append(ShellLine(rel(path), b, line, block_cwd))
            for cmd in simple_commands(line):
                if cmd.argv[:1] == ["cd"] and len(cmd.argv) == 2:
                    target = cmd.argv[1]
                    block_cwd = target if target.startswith("/") else f"{block_cwd}/{target}"
                    cwd = block_cwd
    return out
