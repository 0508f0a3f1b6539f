"""Config problems: one line each, `<config path>: <what is wrong>`.

A problem carries its location as a tuple (`("fleets", 1, "taints", 0, "effect")`)
and is formatted against the StackConfig model, so a dict key prints as
`labels['tuist.dev/x']` and a list index as `[1]`. Sorting by the model's field
order (then list index) keeps the report stable and in the order a stack file is
written, whichever rule found the problem.
"""

from __future__ import annotations

import difflib
import json
import re
import types
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from config.models import StackConfig

Loc = tuple[str | int, ...]

# Problems about secrets sort after every config key: they are fixed with a different command.
SECRETS_SECTION = "secrets"


@dataclass(frozen=True)
class Problem:
    loc: Loc
    message: str

    def line(self) -> str:
        return f"{format_loc(self.loc)}: {self.message}"


class ConfigError(Exception):
    """A stack config that cannot be deployed; `.problems` has one line per problem."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        count = len(self.problems)
        super().__init__(f"{count} config problem{'' if count == 1 else 's'}:\n" + "\n".join(self.problems))


def _unwrap(tp: Any) -> Any:
    """Strip Annotated[...] and `X | None` down to the type that gives the next path step."""
    while True:
        origin = get_origin(tp)
        if origin is Annotated:
            tp = get_args(tp)[0]
        elif origin in (Union, types.UnionType):
            rest = [a for a in get_args(tp) if a is not type(None)]
            if len(rest) != 1:
                return tp
            tp = rest[0]
        else:
            return tp


def _is_model(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, BaseModel)


def _walk(loc: Loc) -> tuple[str, tuple[int, ...], Any]:
    """Formatted path, sort key, and the model type that holds the last step."""
    tp: Any = StackConfig
    text = ""
    key: list[int] = []
    parent: Any = None
    for step in loc:
        if step == "[key]":  # pydantic's marker for "the dict key itself was invalid"
            continue
        tp = _unwrap(tp)
        origin = get_origin(tp)
        parent = tp
        if _is_model(tp) and isinstance(step, str):
            names = list(tp.model_fields)
            if step in names:
                key.append(names.index(step))
                tp = tp.model_fields[step].annotation
            else:
                key.append(len(names) + (1 if step == SECRETS_SECTION and tp is StackConfig else 0))
                tp = Any
            text += f".{step}" if text else step
        elif origin is list and isinstance(step, int):
            key.append(step)
            tp = get_args(tp)[0]
            text += f"[{step}]"
        elif origin is dict:
            key.append(0)
            tp = get_args(tp)[1]
            name = str(step) if len(str(step)) <= 60 else str(step)[:57] + "..."  # a key is a value too
            text += f"[{name!r}]"
        else:
            key.append(step if isinstance(step, int) else 0)
            tp = Any
            text += f"[{step}]" if isinstance(step, int) else (f".{step}" if text else step)
    return text, tuple(key), parent


def format_loc(loc: Loc) -> str:
    return _walk(loc)[0]


def sort_key(problem: Problem) -> tuple[int, ...]:
    return _walk(problem.loc)[1]


def ordered_lines(problems: Iterable[Problem]) -> list[str]:
    """Lines in stack-file order; equal locations keep the order the rules found them."""
    unique: dict[str, Problem] = {}
    for p in problems:
        unique.setdefault(p.line(), p)
    return [p.line() for p in sorted(unique.values(), key=sort_key)]


def show(value: Any) -> str:
    """A config value as an operator would type it; never long, never a container dump."""
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    text = json.dumps(value) if isinstance(value, bool | int | float) or value is None else f"'{value}'"
    return text if len(text) <= 80 else text[:77] + "..."


_QUOTED = re.compile(r"'([^']*)'")
_SECRET_WORDS = ("secret", "password", "consumer", "private", "token", "kubeconfig")


def suggestion(word: str, known: Iterable[str]) -> str:
    close = difflib.get_close_matches(word, list(known), n=1, cutoff=0.7)
    return f" (did you mean '{close[0]}'?)" if close else ""


def _message(err: ErrorDetails, parent: Any) -> str:
    kind = err["type"]
    ctx: dict[str, Any] = dict(err.get("ctx") or {})
    got = err.get("input")
    if kind == "missing":
        return "required"
    if kind == "extra_forbidden":
        field = str(err["loc"][-1])
        removed: dict[str, str] = getattr(parent, "REMOVED_FIELDS", {}) if _is_model(parent) else {}
        if field in removed:
            return removed[field]
        what = "unknown config key" if parent is StackConfig else "unknown field"
        if any(word in field.lower() for word in _SECRET_WORDS):
            # Never point at a similar field name: the value belongs in a pulumi secret.
            return f"{what}; secrets never go in the stack config, set them with pulumi config set --secret"
        known = list(parent.model_fields) if _is_model(parent) else []
        return what + suggestion(field, known)
    if kind in ("enum", "literal_error"):
        choices = ", ".join(_QUOTED.findall(str(ctx.get("expected", ""))))
        return f"must be one of: {choices} (got {show(got)})"
    if kind == "string_type":
        hint = "; quote it" if isinstance(got, bool | int | float) else ""
        return f"must be a string (got {show(got)}{hint})"
    if kind == "string_too_short":
        n = ctx.get("min_length", 1)
        return "must not be empty" if n == 1 else f"must be at least {n} characters (got {show(got)})"
    if kind == "string_too_long":
        return f"must be at most {ctx.get('max_length')} characters"
    if kind in ("int_type", "int_parsing", "int_from_float"):
        return f"must be a whole number (got {show(got)})"
    if kind in ("bool_type", "bool_parsing"):
        return f"must be true or false (got {show(got)})"
    if kind in ("decimal_type", "decimal_parsing", "float_type", "float_parsing"):
        return f"must be a number (got {show(got)})"
    if kind == "finite_number":
        return f"must be a finite number (got {show(got)})"
    if kind == "greater_than":
        return f"must be greater than {ctx.get('gt')} (got {show(got)})"
    if kind == "greater_than_equal":
        return f"must be at least {ctx.get('ge')} (got {show(got)})"
    if kind == "less_than":
        return f"must be less than {ctx.get('lt')} (got {show(got)})"
    if kind == "less_than_equal":
        return f"must be at most {ctx.get('le')} (got {show(got)})"
    if kind == "list_type":
        return f"must be a list (got {show(got)})"
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        return f"must be a mapping (got {show(got)})"
    if kind == "too_short":
        n = ctx.get("min_length", 1)
        return f"must have at least {n} item{'' if n == 1 else 's'}"
    if kind == "value_error":
        return str(ctx.get("error", err["msg"]))
    return str(err["msg"])


def from_validation_error(error: ValidationError, prefix: Loc = ()) -> list[Problem]:
    """Translate pydantic's errors into problems; `prefix` places a piece validated on its own."""
    problems = []
    for err in error.errors(include_url=False):
        loc = prefix + tuple(err["loc"])
        parent = _walk(loc)[2]
        problems.append(Problem(loc, _message(err, parent)))
    return problems
