"""A block-style YAML writer for the documents genobs generates: dicts with text keys, lists,
text, integers, floats, booleans and None. It writes byte for byte what PyYAML's emitters write with
dump_yaml's options (block style, indent 2, sequences in mappings not indented, width 100000,
unicode as is, text with a line break as a `|` block) and gives up (`Unsupported`) on anything
else: other types, shared dicts or lists (PyYAML writes anchors), keys that are not
simple, characters or line breaks that need escapes or a double-quoted scalar, text long enough
to be folded. The caller then uses PyYAML. tests/test_build.py compares the bytes with PyYAML's
pure-Python emitter on every generated document and on random text.

Why: PyYAML builds a node per value and asks its resolver twice per scalar before libyaml
writes it; most of a build's YAML time went there. The style of a text is decided once per
distinct text here (a generated test repeats the same few thousand texts)."""

from __future__ import annotations

import re

from yaml.resolver import Resolver

# what PyYAML's resolver reads a plain scalar as (int, float, bool, null, timestamp, merge, value):
# its own compiled expressions by first character, in its order (yaml/resolver.py)
_RESOLVERS = Resolver.yaml_implicit_resolvers
_FLOAT_TAG = "tag:yaml.org,2002:float"
# characters PyYAML's analysis calls special (written escaped, double-quoted) or that make the
# emitters differ: controls but the newline, C1, the line and paragraph separators, BOM,
# non-characters and everything beyond the BMP. Lone surrogates are special too: dump_yaml
# hands back text that is not valid UTF-8 (a class holding them costs 3 ms to compile).
_SPECIAL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\ufeff\ufffe-\U0010ffff]")


def _resolved(text: str) -> str | None:
    """The tag PyYAML's resolver gives `text` written plain; None for text."""
    for tag, regexp in _RESOLVERS.get(text[0], ()):
        if regexp.match(text):
            return tag
    return None


_INF = float("inf")
_WIDTH = 90000  # well under dump_yaml's width: PyYAML folds quoted and plain text past it


class Unsupported(Exception):
    """A document this writer does not write the way PyYAML would."""


def _analyze(text: str) -> tuple[bool, bool, bool]:
    """(block plain allowed, single-quoted allowed, literal block allowed) of a non-empty text,
    as yaml/emitter.py's analyze_scalar decides them for the characters _SPECIAL lets through."""
    block = False
    if text.startswith(("---", "...")):
        block = True
    n = len(text)
    first = text[0]
    followed = n == 1 or text[1] in " \n"
    if first in "#,[]{}&*!|>'\"%@`":
        block = True
    elif first in "?:" and followed:
        block = True
    elif first == "-" and followed:
        block = True
    if not block:
        if ": " in text or " #" in text or text.endswith(":") or ":\n" in text or "\n#" in text:
            block = True
    line_breaks = "\n" in text
    leading = first in " \n"
    trailing_space = text[-1] == " "
    trailing = trailing_space or text[-1] == "\n"
    space_break = " \n" in text
    break_space = "\n " in text
    plain = not (line_breaks or block or leading or trailing or space_break or break_space)
    single = not (space_break or break_space)
    literal = not (space_break or trailing_space)
    return plain, single, literal


def trailing_lines(text: str) -> bool:
    """Text PyYAML writes as a `|+` block (trailing blank lines, or nothing but line breaks),
    which libyaml ends with `...` and this writer leaves to PyYAML."""
    return text.endswith("\n\n") or bool(text and not text.strip("\n"))


def _quoted(text: str) -> str:
    """A non-empty one-line text as PyYAML writes it, key or value: plain where its analysis
    allows and the resolver reads it back as text, else single-quoted."""
    plain, single, _ = _analyze(text)
    if plain and _resolved(text) is None:
        return text
    if single:
        return "'" + text.replace("'", "''") + "'"
    raise Unsupported("text PyYAML double-quotes")


class _Writer:
    __slots__ = ("parts", "seen", "values", "keys")

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.seen: set[int] = set()
        self.values: dict[str, str] = {}  # text -> how it is written after "key:" or "-"
        self.keys: dict[str, str] = {}

    def key(self, k: object) -> str:
        if type(k) is not str:
            raise Unsupported("a key that is not text")
        found = self.keys.get(k)
        if found is None:
            if not k or "\n" in k or len(k) >= 100 or _SPECIAL.search(k):
                raise Unsupported("a key that is not a simple key")
            found = self.keys[k] = _quoted(k)
        return found

    def text(self, v: str, indent: int) -> str:
        """` value` to follow a `key:` or `-` whose content is indented by `indent`."""
        found = self.values.get(v)
        if found is not None:
            return found
        if "\n" in v:
            return self.literal(v, indent)
        if not v:
            found = " ''"
        else:
            if len(v) > _WIDTH or _SPECIAL.search(v):
                raise Unsupported("text PyYAML escapes or folds")
            found = " " + _quoted(v)
        self.values[v] = found
        return found

    def literal(self, v: str, indent: int) -> str:
        if _SPECIAL.search(v) or trailing_lines(v):
            raise Unsupported("a block PyYAML escapes or keeps trailing lines of")
        _, _, allowed = _analyze(v)
        if not allowed:
            raise Unsupported("text PyYAML double-quotes")
        hints = ("2" if v[0] in " \n" else "") + ("" if v.endswith("\n") else "-")
        pad = " " * indent
        lines = v[:-1].split("\n") if v.endswith("\n") else v.split("\n")
        return " |" + hints + "".join("\n" + pad + line if line else "\n" for line in lines)

    def scalar(self, v: object, indent: int) -> str:
        t = type(v)
        if t is str:
            return self.text(v, indent)  # type: ignore[arg-type]
        if t is int:
            return " " + str(v)
        if t is bool:
            return " true" if v else " false"
        if v is None:
            return " null"
        if t is float:
            if v != v:
                found = ".nan"
            elif v in (_INF, -_INF):
                found = ".inf" if v > 0 else "-.inf"
            else:
                found = repr(v).lower()
                if "." not in found and "e" in found:
                    found = found.replace("e", ".0e", 1)
            if _resolved(found) != _FLOAT_TAG:
                raise Unsupported("a float PyYAML tags")
            return " " + found
        raise Unsupported(f"a value of type {t.__name__}")

    def enter(self, node: dict | list) -> None:
        """Each dict or list once: PyYAML writes one met again as an anchor and an alias."""
        if id(node) in self.seen:
            raise Unsupported(f"a shared {type(node).__name__} (PyYAML writes an anchor)")
        self.seen.add(id(node))

    def mapping(self, d: dict, indent: int, first: str) -> None:
        """`d` (not empty) with its keys at column `indent`; the first key follows `first`."""
        self.enter(d)
        add = self.parts.append
        pad = "\n" + " " * indent
        lead = first
        for k, v in d.items():
            add(lead + self.key(k) + ":")
            lead = pad
            t = type(v)
            if t is dict:
                if v:
                    self.mapping(v, indent + 2, "\n" + " " * (indent + 2))
                else:
                    add(" {}")
            elif t is list:
                if v:
                    self.sequence(v, indent, pad)
                else:
                    add(" []")
            else:
                add(self.scalar(v, indent + 2))

    def sequence(self, items: list, indent: int, first: str) -> None:
        """`items` (not empty) with their dashes at column `indent`; the first follows `first`."""
        self.enter(items)
        add = self.parts.append
        pad = "\n" + " " * indent
        lead = first
        for v in items:
            t = type(v)
            if t is dict:
                if v:
                    self.mapping(v, indent + 2, lead + "- ")
                else:
                    add(lead + "- {}")
            elif t is list:
                if v:
                    self.sequence(v, indent + 2, lead + "- ")
                else:
                    add(lead + "- []")
            else:
                add(lead + "-" + self.scalar(v, indent + 2))
            lead = pad


def dump(data: object) -> str:
    """The YAML of `data` (a non-empty dict), as yaml.dump writes it with dump_yaml's options.
    Raises Unsupported for what this writer leaves to PyYAML."""
    if type(data) is not dict or not data:
        raise Unsupported("a document that is not a non-empty mapping")
    w = _Writer()
    w.mapping(data, 0, "")
    w.parts.append("\n")
    return "".join(w.parts)
