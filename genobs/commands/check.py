"""Instead of `write`: `genobs check` renders in memory and diffs with the output folder (stale, missing, extra)."""

from __future__ import annotations

import difflib
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

import click

from genobs.errors import printable
from genobs.inputs import Unreadable, file_kind, read_regular

DIFF_FILES = 3  # changed files shown with a diff
DIFF_BYTES = 1024 * 1024  # of a changed file read for its diff
LINE_WIDTH = 200


@dataclass
class FolderDiff:
    """How one output folder differs from what its spec generates."""

    spec_file: str
    target: Path
    changed: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    extra: list[str] = field(default_factory=list)
    diffs: dict[str, list[str]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not (self.changed or self.missing or self.extra)


def _files_on_disk(target: Path) -> dict[str, Path]:
    """Every entry of the folder that is not a sub-folder: regular files, and also FIFOs,
    devices and symbolic links (never followed), which genobs never writes."""
    if not target.is_dir() or target.is_symlink():
        return {}
    out = {}
    for dirpath, dirnames, filenames in os.walk(target):
        links = [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]
        for name in (*filenames, *links):
            path = Path(dirpath, name)
            out[path.relative_to(target).as_posix()] = path
    return dict(sorted(out.items()))


def _read(path: Path, expected: int) -> tuple[bytes | None, str]:
    """(up to `expected` + 1 bytes of a regular file, or None; why it is not what genobs wrote).
    A file of another size is different without reading it: a 3 GB file costs nothing."""
    st = os.lstat(path)
    if not stat.S_ISREG(st.st_mode):
        kind = "a symbolic link" if stat.S_ISLNK(st.st_mode) else file_kind(st.st_mode)
        return None, f"not a regular file ({kind})"
    if st.st_size != expected:
        return None, ""
    try:
        return read_regular(path, expected + 1), ""
    except Unreadable as exc:
        return None, exc.message


def _diff(rel: str, target: Path, old: bytes, new: bytes, spec_file: str, max_lines: int) -> list[str]:
    a = old.decode("utf-8", "replace").splitlines()
    b = new.decode("utf-8", "replace").splitlines()
    lines = difflib.unified_diff(
        a, b, f"{target}/{rel} (on disk)", f"{target}/{rel} (generated from {spec_file})", n=2, lineterm=""
    )
    out = []
    for i, line in enumerate(lines):
        if i >= max_lines:
            out.append(f"... (diff cut after {max_lines} lines)")
            break
        out.append(line if len(line) <= LINE_WIDTH else line[: LINE_WIDTH - 3] + "...")
    return out


def _head(path: Path) -> bytes:
    """The start of a changed file, enough for the diff shown."""
    try:
        return read_regular(path, DIFF_BYTES)
    except Unreadable:
        return b""


def compare(outputs: list, root: Path, max_lines: int = 20) -> list[FolderDiff]:
    """One FolderDiff per genobs.build.Output, comparing bytes with root/<name>/."""
    result = []
    for out in outputs:
        target = root / out.name
        d = FolderDiff(out.spec_file, target)
        disk = _files_on_disk(target)
        for rel in sorted(out.files):
            if rel not in disk:
                d.missing.append(rel)
                continue
            old, why = _read(disk[rel], len(out.files[rel]))
            if old != out.files[rel]:
                d.changed.append(rel + (f" ({why})" if why else ""))
                if len(d.diffs) < DIFF_FILES and not why:
                    shown = old if old is not None else _head(disk[rel])
                    d.diffs[rel] = _diff(rel, target, shown, out.files[rel], out.spec_file, max_lines)
        d.extra = sorted(set(disk) - set(out.files))
        result.append(d)
    return result


def orphan_folders(outputs: list, root: Path) -> list[Path]:
    """Folders under root that no spec generates (hidden folders, e.g. a write in progress, are skipped)."""
    if not root.is_dir():
        return []
    names = {o.name for o in outputs}
    # anything but a hidden entry: a FIFO or a symbolic link loop is no output of a spec either
    return [p for p in sorted(root.iterdir()) if not p.name.startswith(".") and p.name not in names]


def report(diffs: list[FolderDiff], orphans: list[Path], rebuild: str) -> str:
    lines: list[str] = []
    for d in diffs:
        if d.ok:
            continue
        if not d.target.is_dir():
            lines.append(f"{d.target}/ is missing ({d.spec_file} generates it)")
            continue
        lines.append(f"{d.target}/ is stale ({d.spec_file}):")
        lines += [f"  changed  {rel}" for rel in d.changed]
        lines += [f"  missing  {rel}" for rel in d.missing]
        lines += [f"  extra    {rel}" for rel in d.extra]
        for diff in d.diffs.values():
            lines += ["", *diff]
        unshown = len([c for c in d.changed if " (" not in c]) - len(d.diffs)  # special files have no diff
        if unshown > 0:
            lines.append(f"({unshown} more changed file(s) not shown)")
        lines.append("")
    lines += [
        f"{p}/ is not generated by any spec checked (extra folder: remove it, or restore its spec)" for p in orphans
    ]
    bad = sum(not d.ok for d in diffs) + len(orphans)
    lines.append(
        f"{bad} output folder(s) differ from the specs; regenerate with: {rebuild} "
        "(edit specs, not generated files: hand edits are overwritten)"
    )
    return "\n".join(printable(line) for line in lines)  # file names and contents come from disk


@click.command()
@click.argument("specs", nargs=-1, type=click.Path(path_type=Path))
@click.option(
    "-o",
    "--output",
    "output",
    type=click.Path(path_type=Path, file_okay=False),
    default=Path("out"),
    show_default=True,
    help="Folder holding one sub-folder per spec.",
)
@click.option("--kubernetes", is_flag=True, help="Expect kubernetes/ for every spec (as `build --kubernetes`).")
@click.option("--diff-lines", default=20, show_default=True, help="Diff lines shown per changed file.")
def check(specs: tuple[Path, ...], output: Path, kubernetes: bool, diff_lines: int) -> None:
    """Regenerate SPECS (default: specs/) in memory and compare with OUTPUT.
    Exit 0 when identical, 1 when OUTPUT is stale or was edited by hand, 2 on
    spec problems. Nothing is written."""
    from genobs.build import render_all
    from genobs.cli import fail_spec
    from genobs.errors import SpecError

    specs = specs or (Path("specs"),)
    for s in specs:
        if not s.exists():
            click.echo(f"{s}: error: no such file or folder", err=True)
            raise SystemExit(2)
    try:
        outputs = render_all(list(specs), kubernetes=kubernetes or None)
    except SpecError as exc:
        fail_spec(exc, f"{output}/ was not checked")
    if not outputs:
        click.echo("no specs found", err=True)
        raise SystemExit(2)
    diffs = compare(outputs, output, diff_lines)
    orphans = orphan_folders(outputs, output) if all(s.is_dir() for s in specs) else []
    if all(d.ok for d in diffs) and not orphans:
        n = sum(len(o.files) for o in outputs)
        click.echo(f"{output}/ is up to date ({len(outputs)} spec(s), {n} files)")
        return
    rebuild = " ".join(["genobs build", *map(str, specs), "-o", str(output), *(["--kubernetes"] if kubernetes else [])])
    click.echo(report(diffs, orphans, rebuild))
    raise SystemExit(1)
