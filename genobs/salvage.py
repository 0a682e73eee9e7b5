"""`load` stage, after schema errors: what is left of a spec once every value with a
problem is removed, so the version, SLO and threshold checks of `plan` still run on
the rest and one run reports every problem of the file (not one kind per run)."""

from __future__ import annotations

from pydantic import BaseModel, ValidationError

from genobs.messages import message

Path_ = tuple[str | int, ...]

# required top-level keys get a stand-in when missing or invalid, so the rest can be checked
_STAND_INS = {"version": "genobs/v1", "name": "spec", "use_case": "chat"}
_ROUNDS = 6  # each round removes what the last validation refused; real specs settle in 2


def _prune(data: object, bad: set[Path_], path: Path_ = ()) -> tuple[object, dict[Path_, Path_]]:
    """(data without the values at `bad`, new path -> original path). List items
    after a removed one move up; the map keeps their original file positions."""
    moves: dict[Path_, Path_] = {path: path}
    if isinstance(data, dict):
        out_d: dict = {}
        for key, value in data.items():
            if (*path, key) in bad:
                continue
            out_d[key], sub = _prune(value, bad, (*path, key))
            moves.update(sub)
        return out_d, moves
    if isinstance(data, list):
        out_l: list = []
        for i, value in enumerate(data):
            if (*path, i) in bad:
                continue
            pruned, sub = _prune(value, bad, (*path, i))
            new = (*path, len(out_l))
            moves.update({new + p[len(path) + 1 :]: p for p in sub})
            out_l.append(pruned)
        return out_l, moves
    return data, moves


def _bad_paths(exc: ValidationError) -> set[Path_]:
    bad: set[Path_] = set()
    for err in exc.errors():
        loc, _ = message(err)
        loc = tuple(loc)
        if err["type"] == "missing":
            loc = loc[:-1]  # the mapping that lacks a required key cannot be kept
        if loc:
            bad.add(loc)
    return bad


def salvage(model: type[BaseModel], data: object, bad: set[Path_]) -> tuple[BaseModel, dict[Path_, Path_]] | None:
    """A valid model from `data` minus the values at `bad` (and whatever validation
    then refuses), with new path -> original path; None when nothing usable is left."""
    if not isinstance(data, dict):
        return None
    moves: dict[Path_, Path_] = {}
    current: dict = dict(data)
    for _ in range(_ROUNDS):
        for key in list(bad):
            if len(key) == 1 and key[0] in _STAND_INS:
                bad.discard(key)
                current[key[0]] = _STAND_INS[key[0]]
        for key, value in _STAND_INS.items():
            current.setdefault(key, value)
        pruned, step = _prune(current, bad)
        moves = {new: moves.get(old, old) for new, old in step.items()}
        try:
            return model.model_validate(pruned), moves
        except ValidationError as exc:
            current, bad = pruned, _bad_paths(exc)  # type: ignore[assignment]
            if not bad:
                return None
    return None
