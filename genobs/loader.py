"""`load` stage: read a spec file into a validated `Spec`, remembering where every
value sits in the file so each problem names file, line, column and field."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from pydantic import ValidationError

from genobs.errors import Problem, SpecError
from genobs.inputs import Unreadable, read_regular
from genobs.messages import message, threshold_problems
from genobs.spec import Spec

MAX_BYTES = 1_000_000
MAX_NODES = 20_000  # values after alias expansion; real specs hold a few hundred
MAX_DEPTH = 40  # nesting of mappings and lists; real specs nest 4 deep
Path_ = tuple[str | int, ...]

_T = "tag:yaml.org,2002:"
_SCALAR_TAGS = {_T + t for t in ("str", "int", "float", "bool", "null", "timestamp")}
_COLLECTION_TAGS = {_T + "map", _T + "seq"}


@dataclass
class SpecDocument:
    """A validated spec plus the positions of its values, for later-stage problems."""

    spec: Spec
    file: str
    positions: dict[Path_, tuple[int, int]] = field(default_factory=dict)
    key_positions: dict[Path_, tuple[int, int]] = field(default_factory=dict)
    # a partial document (see load_spec_text): its path -> the path in the file
    origins: dict[Path_, Path_] = field(default_factory=dict)

    def problem(self, path: Path_, message: str, level: str = "error") -> Problem:
        path = tuple(path)
        for n in range(len(path), 0, -1):
            if path[:n] in self.origins:
                path = self.origins[path[:n]] + path[n:]
                break
        return _problem(self.file, self.positions, path, message, level)


def _field_text(path: Path_) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


def _problem(file: str, positions: dict, path: Path_, message: str, level: str = "error") -> Problem:
    probe = tuple(path)
    while probe and probe not in positions:
        probe = probe[:-1]
    line, col = positions.get(probe, (None, None))
    return Problem(message=message, file=file, line=line, column=col, field=_field_text(path), level=level)


def sort_problems(problems: list[Problem]) -> list[Problem]:
    """File order kept; within a file by line, then column (file-level problems first)."""
    order: dict[str, int] = {}
    for p in problems:
        order.setdefault(p.file, len(order))
    return sorted(problems, key=lambda p: (order[p.file], p.line or 0, p.column or 0))


def _mark(mark: yaml.Mark | None) -> tuple[int | None, int | None]:
    return (mark.line + 1, mark.column + 1) if mark is not None else (None, None)


def _at(node: yaml.Node) -> tuple[int | None, int | None]:
    return _mark(node.start_mark)


class _Limit(yaml.YAMLError):
    def __init__(self, message: str, mark: yaml.Mark | None):
        super().__init__(message)
        self.message = message
        self.mark = mark


class _Loader(yaml.SafeLoader):
    """Composes nodes only (never constructs objects), refusing deep nesting and
    documents with too many nodes before Python's recursion limit or memory is hit."""

    def __init__(self, stream: str):
        super().__init__(stream)
        self.depth = 0
        self.nodes = 0

    def compose_node(self, parent, index):
        self.depth += 1
        self.nodes += 1
        try:
            if self.depth > MAX_DEPTH:
                raise _Limit(f"values are nested more than {MAX_DEPTH} levels deep", self.peek_event().start_mark)
            if self.nodes > MAX_NODES:
                raise _Limit(f"document has more than {MAX_NODES} values", self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


_CONSTRUCT = yaml.constructor.SafeConstructor()


def _scalar(node: yaml.ScalarNode) -> object:
    if node.tag in (_T + "str", _T + "timestamp"):
        return node.value  # dates stay the text that was written
    if node.tag == _T + "null":
        return None
    if node.tag == _T + "bool":
        return _CONSTRUCT.construct_yaml_bool(node)
    if node.tag == _T + "int":
        return _CONSTRUCT.construct_yaml_int(node)
    value = _CONSTRUCT.construct_yaml_float(node)
    if not math.isfinite(value):
        raise ValueError(f"{node.value!r} is not a finite number")
    return value


def _tag_text(tag: str) -> str:
    return "!!" + tag[len(_T) :] if tag.startswith(_T) else tag


class _Builder:
    """Turns a composed YAML node tree into plain data, refusing duplicate keys,
    tags, cycles and runaway alias expansion, and records positions."""

    def __init__(self, file: str):
        self.file = file
        self.positions: dict[Path_, tuple[int, int]] = {}
        self.key_positions: dict[Path_, tuple[int, int]] = {}
        self.problems: list[Problem] = []
        self.sizes: dict[int, int] = {}

    def _fatal(self, message: str, node: yaml.Node) -> SpecError:
        return SpecError([Problem(message, self.file, *_at(node))])

    def size(self, node: yaml.Node, stack: set[int]) -> int:
        """How many values the node expands to once aliases are copied; cheap (shared
        nodes are counted once per node, not once per use) and refuses cycles."""
        key = id(node)
        if key in self.sizes:
            return self.sizes[key]
        if key in stack:
            raise self._fatal("an alias refers to the value that contains it (recursive alias)", node)
        stack.add(key)
        if isinstance(node, yaml.MappingNode):
            n = 1 + sum(self.size(k, stack) + self.size(v, stack) for k, v in node.value)
        elif isinstance(node, yaml.SequenceNode):
            n = 1 + sum(self.size(c, stack) for c in node.value)
        else:
            n = 1
        stack.discard(key)
        n = min(n, MAX_NODES + 1)
        self.sizes[key] = n
        return n

    def build(self, node: yaml.Node, path: Path_) -> object:
        self.positions.setdefault(path, _at(node))
        if isinstance(node, (yaml.MappingNode, yaml.SequenceNode)) and node.tag not in _COLLECTION_TAGS:
            self.problems.append(
                Problem(f"YAML tag {_tag_text(node.tag)} is not supported", self.file, *_at(node), _field_text(path))
            )
            return None
        if isinstance(node, yaml.MappingNode):
            return self._mapping(node, path)
        if isinstance(node, yaml.SequenceNode):
            return [self.build(child, (*path, i)) for i, child in enumerate(node.value)]
        if node.tag not in _SCALAR_TAGS:
            self.problems.append(
                Problem(
                    f"YAML tag {_tag_text(node.tag)} is not supported; write plain values "
                    "(quote text that YAML would read as a number or boolean)",
                    self.file,
                    *_at(node),
                    _field_text(path),
                )
            )
            return None
        try:
            return _scalar(node)
        except ValueError as exc:
            self.problems.append(Problem(str(exc), self.file, *_at(node), _field_text(path)))
            return None

    def _mapping(self, node: yaml.MappingNode, path: Path_) -> dict:
        out: dict = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                self.problems.append(
                    Problem("mapping keys must be plain names", self.file, *_at(key_node), _field_text(path))
                )
                continue
            key = key_node.value
            if key == "<<" and key_node.tag == _T + "merge":
                self.problems.append(
                    Problem(
                        "merge keys (<<) are not supported; write the keys out",
                        self.file,
                        *_at(key_node),
                        _field_text(path),
                    )
                )
                continue
            if key in out:
                first = self.key_positions.get((*path, key), (None, None))[0]
                self.problems.append(
                    Problem(
                        f"duplicate key {key!r} (first defined on line {first}); keep one of them",
                        self.file,
                        *_at(key_node),
                        _field_text((*path, key)),
                    )
                )
                continue
            self.key_positions[(*path, key)] = _at(key_node)
            self.positions[(*path, key)] = _at(value_node)
            out[key] = self.build(value_node, (*path, key))
        return out


def _tab_problems(text: str, file: str) -> list[Problem]:
    problems = []
    for lineno, line in enumerate(text.splitlines(), 1):
        stripped = line.lstrip(" ")
        if stripped.startswith("\t"):
            col = len(line) - len(stripped) + 1
            problems.append(Problem("tab used for indentation; YAML needs spaces", file, lineno, col))
    return problems


def _position(text: str, offset: int) -> tuple[int, int]:
    line = text.count("\n", 0, offset) + 1
    return line, offset - (text.rfind("\n", 0, offset) + 1) + 1


def _compose(text: str, file: str) -> yaml.Node:
    try:
        loader = _Loader(text)
    except yaml.reader.ReaderError as exc:
        raise SpecError([_reader_problem(exc, text, file)]) from None
    try:
        docs = []
        while loader.check_node():
            docs.append(loader.get_node())
    except yaml.reader.ReaderError as exc:
        raise SpecError([_reader_problem(exc, text, file)]) from None
    except _Limit as exc:
        raise SpecError([Problem(exc.message, file, *_mark(exc.mark))]) from None
    except yaml.MarkedYAMLError as exc:
        message = f"invalid YAML: {exc.problem}"
        if exc.context and exc.context_mark and exc.context_mark.line != getattr(exc.problem_mark, "line", None):
            message += f" ({exc.context} on line {exc.context_mark.line + 1})"
        raise SpecError([Problem(message, file, *_mark(exc.problem_mark))]) from None
    except yaml.YAMLError as exc:
        raise SpecError([Problem(f"invalid YAML: {exc}", file)]) from None
    finally:
        loader.dispose()
    docs = [d for d in docs if not (isinstance(d, yaml.ScalarNode) and d.tag == _T + "null" and d.value == "")]
    if not docs:
        raise SpecError(
            [Problem("the spec is empty; it needs at least version, name and use_case (see `genobs init`)", file, 1, 1)]
        )
    if len(docs) > 1:
        raise SpecError(
            [
                Problem(
                    f"a spec file holds one YAML document, this one holds {len(docs)}; "
                    "remove the '---' separator or split the file",
                    file,
                    *_at(docs[1]),
                )
            ]
        )
    root = docs[0]
    if not isinstance(root, yaml.MappingNode):
        kind = "a list" if isinstance(root, yaml.SequenceNode) else f"the single value {root.value[:40]!r}"
        raise SpecError(
            [Problem(f"a spec must be a mapping of keys (version: genobs/v1, name: ...), not {kind}", file, *_at(root))]
        )
    return root


def _reader_problem(exc: yaml.reader.ReaderError, text: str, file: str) -> Problem:
    char = exc.character if isinstance(exc.character, int) else ord(str(exc.character)[:1] or "\0")
    return Problem(
        f"control character U+{char:04X} is not allowed in a spec; remove it", file, *_position(text, exc.position)
    )


def parse_yaml(text: str, file: str) -> tuple[object, dict[Path_, tuple[int, int]]]:
    data, positions, _, problems = _parse(text, file)
    if problems:
        raise SpecError(problems)
    return data, positions


def _parse(text: str, file: str) -> tuple[dict, dict, dict, list[Problem]]:
    """(data, value positions, key positions, non-fatal problems); SpecError when
    the text cannot be read as one mapping at all."""
    tabs = _tab_problems(text, file)
    if tabs:
        raise SpecError(tabs)
    root = _compose(text, file)
    builder = _Builder(file)
    if builder.size(root, set()) > MAX_NODES:
        raise _bomb(builder, root, file)
    data = builder.build(root, ())
    return data, builder.positions, builder.key_positions, builder.problems


def _bomb(builder: _Builder, root: yaml.MappingNode, file: str) -> SpecError:
    """Names the first top-level value that aliases blow up (all of them were counted)."""
    for key_node, value_node in root.value:
        if builder.sizes.get(id(value_node), 0) > MAX_NODES:
            return SpecError(
                [
                    Problem(
                        f"aliases expand this value to more than {MAX_NODES} values (alias bomb?)",
                        file,
                        *_at(value_node),
                        str(getattr(key_node, "value", "")),
                    )
                ]
            )
    return SpecError([Problem(f"aliases expand the document to more than {MAX_NODES} values", file, *_at(root))])


def read_regular_file(path: Path, limit: int) -> bytes:
    """Up to `limit` bytes of a regular spec file (genobs.inputs.read_regular), as a SpecError naming it."""
    try:
        return read_regular(path, limit, "spec", "a spec is a regular YAML file")
    except Unreadable as exc:
        raise SpecError([Problem(exc.message, str(path))]) from None


def load_spec(path: str | Path) -> SpecDocument:
    path = Path(path)
    file = str(path)
    raw = read_regular_file(path, MAX_BYTES + 1)
    if len(raw) > MAX_BYTES:
        raise SpecError([Problem(f"spec is larger than {MAX_BYTES} bytes; a spec is a short file", file)])
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        start = raw.rfind(b"\n", 0, exc.start) + 1
        line = raw.count(b"\n", 0, exc.start) + 1
        col = len(raw[start : exc.start].decode("utf-8", "replace").removeprefix("\ufeff")) + 1
        message = f"byte 0x{raw[exc.start]:02x} is not UTF-8; save the spec as UTF-8"
        raise SpecError([Problem(message, file, line, col)]) from None
    return load_spec_text(text, file)


def load_spec_text(text: str, file: str = "<spec>") -> SpecDocument:
    """A validated spec, or SpecError with every problem; when the file has problems
    but enough is valid, the SpecError carries `partial`: a SpecDocument of what is
    left, on which `plan` runs its checks so one run reports everything."""
    text = text.removeprefix("\ufeff")
    data, positions, key_positions, problems = _parse(text, file)
    seen = {(p.line, p.column, p.field) for p in problems}
    bad: set[Path_] = set()

    def report(path: Path_, message: str, where: dict = positions) -> None:
        bad.add(tuple(path))
        p = _problem(file, where, path, message)
        if (p.line, p.column, p.field) not in seen:
            seen.add((p.line, p.column, p.field))
            problems.append(p)

    spec = None
    try:
        spec = Spec.model_validate(data)
    except ValidationError as exc:
        for err in exc.errors():
            loc, msg = message(err)
            key_error = err["type"] == "extra_forbidden" or err["loc"][-1:] == ("[key]",)
            report(loc, msg, key_positions if key_error and tuple(loc) in key_positions else positions)
    threshold_problems(data, report)
    if problems or spec is None:
        error = SpecError(sort_problems(problems))
        error.partial = _partial(data, bad, file, positions, key_positions)
        raise error
    return SpecDocument(spec=spec, file=file, positions=positions, key_positions=key_positions)


def _partial(data: object, bad: set[Path_], file: str, positions: dict, key_positions: dict) -> SpecDocument | None:
    from genobs.salvage import salvage

    found = salvage(Spec, data, {p for p in bad if p})
    if found is None:
        return None
    spec, moves = found
    # positions stay those of the file; problems are mapped back to the file's paths
    moved = {new: old for new, old in moves.items() if new != old}
    return SpecDocument(spec=spec, file=file, positions=positions, key_positions=key_positions, origins=moved)  # type: ignore[arg-type]
