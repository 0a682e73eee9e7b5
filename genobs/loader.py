"""`load` stage: read a spec file into a validated `Spec`, remembering where every
value sits in the file so each problem names file, line, column and field."""

from __future__ import annotations

import difflib
import typing
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from pydantic import BaseModel, ValidationError

from genobs.errors import Problem, SpecError
from genobs.spec import Spec

MAX_BYTES = 1_000_000
MAX_NODES = 100_000
Path_ = tuple[str | int, ...]


@dataclass
class SpecDocument:
    """A validated spec plus the positions of its values, for later-stage problems."""

    spec: Spec
    file: str
    positions: dict[Path_, tuple[int, int]] = field(default_factory=dict)

    def problem(self, path: Path_, message: str, level: str = "error") -> Problem:
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


def _mark(node: yaml.Node) -> tuple[int, int]:
    return node.start_mark.line + 1, node.start_mark.column + 1


class _Builder:
    """Turns a composed YAML node tree into plain data, refusing duplicate keys
    and runaway alias expansion, and records positions."""

    def __init__(self, file: str):
        self.file = file
        self.positions: dict[Path_, tuple[int, int]] = {}
        self.problems: list[Problem] = []
        self.count = 0

    def build(self, node: yaml.Node, path: Path_) -> object:
        self.count += 1
        if self.count > MAX_NODES:
            raise SpecError([Problem("document expands to too many values (alias bomb?)", self.file, *_mark(node))])
        self.positions.setdefault(path, _mark(node))
        if isinstance(node, yaml.MappingNode):
            out: dict = {}
            for key_node, value_node in node.value:
                if not isinstance(key_node, yaml.ScalarNode):
                    self.problems.append(
                        Problem("mapping keys must be plain strings", self.file, *_mark(key_node), _field_text(path))
                    )
                    continue
                key = key_node.value
                if key == "<<":
                    self.problems.append(Problem("merge keys (<<) are not supported", self.file, *_mark(key_node)))
                    continue
                if key in out:
                    first = self.positions.get((*path, key), (None, None))[0]
                    self.problems.append(
                        Problem(
                            f"duplicate key {key!r} (first defined on line {first})",
                            self.file,
                            *_mark(key_node),
                            _field_text((*path, key)),
                        )
                    )
                    continue
                self.positions[(*path, key)] = _mark(value_node)
                out[key] = self.build(value_node, (*path, key))
            return out
        if isinstance(node, yaml.SequenceNode):
            return [self.build(child, (*path, i)) for i, child in enumerate(node.value)]
        return yaml.SafeLoader.construct_scalar_value(node)


def _construct_scalar(node: yaml.ScalarNode) -> object:
    loader = yaml.SafeLoader("")
    return loader.construct_object(node, deep=True)


yaml.SafeLoader.construct_scalar_value = staticmethod(_construct_scalar)  # type: ignore[attr-defined]


def parse_yaml(text: str, file: str) -> tuple[object, dict[Path_, tuple[int, int]]]:
    for lineno, line in enumerate(text.splitlines(), 1):
        stripped = line.lstrip(" ")
        if stripped.startswith("\t"):
            raise SpecError(
                [Problem("tab used for indentation; YAML needs spaces", file, lineno, len(line) - len(stripped) + 1)]
            )
    try:
        nodes = list(yaml.compose_all(text, Loader=yaml.SafeLoader))
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (None, None)
        raise SpecError([Problem(f"invalid YAML: {exc.problem}", file, line, col)]) from None
    except yaml.YAMLError as exc:
        raise SpecError([Problem(f"invalid YAML: {exc}", file)]) from None
    if len(nodes) != 1:
        raise SpecError([Problem(f"expected one YAML document, found {len(nodes)}", file, 1, 1)])
    root = nodes[0]
    if not isinstance(root, yaml.MappingNode):
        raise SpecError([Problem("a spec must be a mapping of keys (version, name, service, ...)", file, *_mark(root))])
    builder = _Builder(file)
    data = builder.build(root, ())
    if builder.problems:
        raise SpecError(builder.problems)
    return data, builder.positions


def _model_at(loc: Path_) -> type[BaseModel] | None:
    """The pydantic model class that validates the mapping at `loc`."""
    model: type[BaseModel] | None = Spec
    for part in loc:
        if model is None:
            return None
        if isinstance(part, int):
            continue
        info = model.model_fields.get(part)
        if info is None:
            info = next((f for f in model.model_fields.values() if f.alias == part), None)
        if info is None:
            return None
        model = _find_model(info.annotation)
    return model


def _find_model(annotation: object) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _find_model(arg)
        if found:
            return found
    return None


def _field_names(model: type[BaseModel]) -> list[str]:
    return [f.alias or name for name, f in model.model_fields.items()]


def _message(err: dict) -> tuple[Path_, str]:
    loc = tuple(
        p
        for p in err["loc"]
        if not (isinstance(p, str) and (p.startswith("function-") or p in {"str", "float", "int"}))
    )
    kind = err["type"]
    if kind == "extra_forbidden":
        model = _model_at(loc[:-1])
        names = _field_names(model) if model else []
        hint = difflib.get_close_matches(str(loc[-1]), names, n=1)
        msg = f"unknown key {loc[-1]!r}"
        msg += f"; did you mean {hint[0]!r}?" if hint else (f"; expected one of: {', '.join(names)}" if names else "")
        return loc, msg
    if kind == "literal_error":
        expected = err.get("ctx", {}).get("expected", "")
        allowed = [s.strip().strip("'") for s in expected.replace(" or ", ", ").split(",")]
        hint = difflib.get_close_matches(str(err.get("input")), allowed, n=1)
        msg = f"{err.get('input')!r} is not allowed; expected one of: {', '.join(allowed)}"
        if hint:
            msg += f" (did you mean {hint[0]!r}?)"
        return loc, msg
    if kind == "missing":
        return loc, "required key is missing"
    msg = err["msg"]
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    return loc, msg


def load_spec(path: str | Path) -> SpecDocument:
    path = Path(path)
    file = str(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise SpecError([Problem(f"cannot read spec: {exc.strerror}", file)]) from None
    if len(raw) > MAX_BYTES:
        raise SpecError([Problem(f"spec is {len(raw)} bytes; the limit is {MAX_BYTES}", file)])
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError([Problem(f"spec is not UTF-8 (byte {exc.start})", file)]) from None
    return load_spec_text(text, file)


def load_spec_text(text: str, file: str = "<spec>") -> SpecDocument:
    data, positions = parse_yaml(text, file)
    try:
        spec = Spec.model_validate(data)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            loc, msg = _message(err)
            problems.append(_problem(file, positions, loc, msg))
        raise SpecError(problems) from None
    return SpecDocument(spec=spec, file=file, positions=positions)
