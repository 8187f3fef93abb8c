"""User input at the edge: bounded file reading, strict YAML/JSON, shared field types.

Every file a user hands the orchestrator (job files, team configs, node lists, traces) is read
here, so each gets the same limits (rule 3: validate at the edge, once):

- only a regular file is read, never a FIFO, device or directory (``/dev/zero`` would never end),
  and at most ``max_bytes`` of it;
- YAML aliases are refused (a few hundred bytes of nested aliases expand to gigabytes), as are
  duplicate keys (the last one silently won), nesting deeper than :data:`MAX_DEPTH`, more than
  :data:`MAX_NODES` values, and integers longer than :data:`MAX_INT_DIGITS` digits (Python
  refuses to parse very long ones with a ``ValueError``);
- JSON gets the same duplicate-key, depth and integer limits.

Each refusal is a :class:`~orchestrator.errors.SpecError` (the CLI exits 2) saying what is wrong
and what is allowed. Numbers' ranges, finiteness and types are the models' business: they are
strict (``micro_batch: true`` is not 1) and refuse ``inf``/``nan``, so a request body validated
by the same models gets the same answers. :func:`describe_errors` turns pydantic's errors into
one line per problem, naming the field.
"""

from __future__ import annotations

import json
import os
import re
import stat
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import BaseModel, Field, ValidationError
from yaml.constructor import ConstructorError

from orchestrator.errors import SpecError
from orchestrator.names import NAME_PATTERN, PATTERN_RULES

__all__ = [
    "MAX_DEPTH",
    "MAX_FILE_BYTES",
    "MAX_INT_DIGITS",
    "MAX_NODES",
    "NAME_PATTERN",
    "Name",
    "describe_errors",
    "load_document",
    "parse_json",
    "parse_yaml",
    "read_stdin",
    "read_text",
]

MAX_FILE_BYTES = 1 << 20
"""Largest job, team or nodes file read (1 MiB; a job file is usually under 1 KiB)."""
MAX_DEPTH = 32
"""Deepest nesting of mappings and lists in a document."""
MAX_NODES = 20_000
"""Most values (scalars, lists, mappings) in one YAML document (a config of 1,000 teams has
about 9,000)."""
MAX_INT_DIGITS = 40
"""Longest integer literal, in characters (2**63 has 19 digits)."""

Name = Annotated[str, Field(pattern=NAME_PATTERN)]
"""A job or team name: the same rule everywhere a name is given."""


# ---- reading a file --------------------------------------------------------------------------

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def read_text(path: Path, *, max_bytes: int = MAX_FILE_BYTES) -> str:
    """The UTF-8 text of ``path``, if it is a regular file of at most ``max_bytes``.

    The file is opened without blocking (a FIFO with no writer would wait forever) and checked
    on the open descriptor, so what is read is what was checked.

    Raises:
        SpecError: missing, not a regular file, too large, unreadable, or not UTF-8 text.
    """
    source = str(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise SpecError(source, ["file not found"]) from None
    except OSError as err:
        raise SpecError(source, [f"cannot open the file: {err.strerror or err}"]) from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = next((name for test, name in _KINDS if test(mode)), "not a plain file")
            raise SpecError(source, [f"not a regular file ({kind}); give a file"])
        raw = os.read(fd, max_bytes + 1)
        while raw and len(raw) <= max_bytes:  # a regular file may return less than asked
            more = os.read(fd, max_bytes + 1 - len(raw))
            if not more:
                break
            raw += more
    except OSError as err:
        raise SpecError(source, [f"cannot read the file: {err.strerror or err}"]) from None
    finally:
        os.close(fd)
    return _text(raw, source, max_bytes)


def read_stdin(*, max_bytes: int = MAX_FILE_BYTES) -> str:
    """The UTF-8 text on standard input (``orch submit -``), within the limits of a file.

    Raises:
        SpecError: too large, unreadable, or not UTF-8 text.
    """
    try:
        raw = sys.stdin.buffer.read(max_bytes + 1)
    except OSError as err:
        raise SpecError("<stdin>", [f"cannot read standard input: {err.strerror or err}"]) from None
    return _text(raw, "<stdin>", max_bytes)


def _text(raw: bytes, source: str, max_bytes: int) -> str:
    if len(raw) > max_bytes:
        raise SpecError(source, [f"the file is larger than {max_bytes:,} bytes (the limit)"])
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise SpecError(
            source, [f"not UTF-8 text (invalid byte at offset {err.start}): a binary file?"]
        ) from None
    if "\x00" in text:
        raise SpecError(source, ["not text: the file holds NUL bytes (a binary file?)"])
    return text


def load_document(path: Path, *, max_bytes: int = MAX_FILE_BYTES) -> Any:
    """Read ``path`` (:func:`read_text`) and parse it: JSON for ``.json``, else YAML.

    Raises:
        SpecError: anything :func:`read_text`, :func:`parse_json` or :func:`parse_yaml` refuses,
            or an empty document.
    """
    text = read_text(path, max_bytes=max_bytes)
    source = str(path)
    data = parse_json(text, source) if path.suffix.lower() == ".json" else parse_yaml(text, source)
    if data is None:
        raise SpecError(source, ["the file is empty (or holds only comments)"])
    return data


# ---- YAML --------------------------------------------------------------------------------------


# libyaml's parser when PyYAML was built with it (the pure-Python one is 10-50x slower).
_Loader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _check_events(text: str, source: str) -> None:
    """Refuse aliases, deep nesting and huge documents from the event stream, before anything
    is built (so neither the composer's recursion nor an alias's expansion is reached).

    Raises:
        SpecError: the first limit exceeded, with its line and column.
    """
    depth = nodes = 0
    for event in yaml.parse(text, Loader=_Loader):
        problem = None
        if isinstance(event, yaml.AliasEvent):
            problem = (
                f"alias *{event.anchor} is not allowed (YAML aliases and merges are refused: "
                "write the value out)"
            )
        elif isinstance(event, (yaml.ScalarEvent, yaml.CollectionStartEvent)):
            nodes += 1
            depth += isinstance(event, yaml.CollectionStartEvent)
            if nodes > MAX_NODES:
                problem = f"more than {MAX_NODES:,} values in one file"
            elif depth > MAX_DEPTH:
                problem = f"nested more than {MAX_DEPTH} levels deep"
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1
        if problem is not None:
            mark = event.start_mark
            where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
            raise SpecError(source, [where + problem])


class _StrictLoader(_Loader):  # type: ignore[misc,valid-type]
    """PyYAML's safe loader, refusing duplicate keys and overlong integers (the other limits
    are checked on the events first, by :func:`_check_events`)."""

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        if isinstance(node, yaml.MappingNode):
            self.flatten_mapping(node)
            seen: set[Any] = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                try:
                    duplicate = key in seen
                    seen.add(key)
                except TypeError:  # unhashable: the base class says so
                    continue
                if duplicate:
                    raise ConstructorError(
                        None, None, f"duplicate key {key!r}", key_node.start_mark
                    )
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_int(self, node: Any) -> int:
        value = str(node.value)
        if len(value) > MAX_INT_DIGITS:
            raise ConstructorError(
                None,
                None,
                f"integer of {len(value)} characters; at most {MAX_INT_DIGITS} allowed",
                node.start_mark,
            )
        return int(super().construct_yaml_int(node))


_StrictLoader.add_constructor("tag:yaml.org,2002:int", _StrictLoader.construct_yaml_int)
# A number with an exponent is a float, as in YAML 1.2 and JSON: PyYAML follows YAML 1.1, where
# `1e7` and `1.5e7` are strings (its floats need a dot and a signed exponent), so `speed: 1e7`
# was refused as "must be a number, got '1e7'". Integers keep their resolver (met first).
_StrictLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def parse_yaml(text: str, source: str = "<input>") -> Any:
    """Parse one YAML document with the limits above (``None`` for an empty one).

    Raises:
        SpecError: invalid YAML or a limit exceeded, with the line and column.
    """
    try:
        _check_events(text, source)
        return yaml.load(text, Loader=_StrictLoader)  # a SafeLoader subclass
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        if "maximum nesting depth" in str(err.problem):
            # libyaml's own limit (1,000 flow levels, PyYAML >= 6.0.3 wheels) can stop the
            # scan before our event check sees level 33: the same refusal, in our words
            raise SpecError(source, [f"{where}nested more than {MAX_DEPTH} levels deep"]) from None
        what = " ".join(str(x) for x in (err.context, err.problem) if x)
        raise SpecError(source, [f"not valid YAML: {where}{what}"]) from None
    except yaml.YAMLError as err:  # a ReaderError: a character YAML does not allow
        text = " ".join(str(err).split()).replace(' in "<unicode string>", position', " at")
        raise SpecError(source, [f"not valid YAML: {text}"]) from None
    except (ValueError, OverflowError) as err:  # e.g. a timestamp 2024-13-45
        raise SpecError(source, [f"not valid YAML: {err}"]) from None


# ---- JSON --------------------------------------------------------------------------------------


class _Refused(ValueError):
    pass


def _bounded_int(literal: str) -> int:
    if len(literal) > MAX_INT_DIGITS:
        raise _Refused(f"integer of {len(literal)} characters; at most {MAX_INT_DIGITS} allowed")
    return int(literal)


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _Refused(f"duplicate key {key!r}")
        out[key] = value
    return out


def parse_json(text: str, source: str = "<input>") -> Any:
    """Parse a JSON document with the depth and integer limits above, refusing duplicate keys.

    Raises:
        SpecError: invalid JSON or a limit exceeded.
    """
    try:
        data = json.loads(text, parse_int=_bounded_int, object_pairs_hook=_unique_keys)
    except json.JSONDecodeError as err:
        raise SpecError(
            source, [f"not valid JSON: line {err.lineno}, column {err.colno}: {err.msg}"]
        ) from None
    except _Refused as err:
        raise SpecError(source, [f"not valid JSON: {err}"]) from None
    except RecursionError:
        raise SpecError(source, [f"nested more than {MAX_DEPTH} levels deep"]) from None
    if _depth(data) > MAX_DEPTH:
        raise SpecError(source, [f"nested more than {MAX_DEPTH} levels deep"])
    if "\\u" in text and (lone := _lone_surrogate(data)) is not None:
        raise SpecError(
            source,
            [
                f"not valid JSON: {lone} is half of a UTF-16 surrogate pair, not a character "
                "(escape the whole pair, or write the character itself)"
            ],
        )
    return data


_SURROGATE = re.compile("[\ud800-\udfff]")


def _lone_surrogate(data: Any) -> str | None:
    """The first code point of a surrogate pair left alone in ``data``'s strings (keys too),
    as ``\\udXXX``: JSON's ``"\\ud800"`` parses to one, and it is no character, so no text
    (a reply echoing it, a Redis field) can be encoded. A pair escaped whole parses to its
    character. Iterative: no recursion limit."""
    stack = [data]
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            stack.extend(value.keys())
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
        elif isinstance(value, str) and (found := _SURROGATE.search(value)) is not None:
            return f"\\u{ord(found[0]):04x}"
    return None


def _depth(data: Any) -> int:
    """How deeply lists and mappings nest in ``data`` (iterative: no recursion limit)."""
    deepest, stack = 0, [(data, 1)]
    while stack:
        value, level = stack.pop()
        if isinstance(value, dict):
            children: list[Any] = list(value.values())
        elif isinstance(value, list):
            children = value
        else:
            continue
        deepest = max(deepest, level)
        stack.extend((c, level + 1) for c in children)
    return deepest


# ---- pydantic errors as one line per problem ---------------------------------------------------

_TEMPLATES = {
    "greater_than": "must be > {gt}",
    "greater_than_equal": "must be >= {ge}",
    "less_than": "must be < {lt}",
    "less_than_equal": "must be <= {le}",
    "int_parsing": "must be an integer",
    "int_type": "must be an integer",
    "int_from_float": "must be a whole number",
    "float_parsing": "must be a number",
    "float_type": "must be a number",
    "finite_number": "must be a finite number",
    "bool_parsing": "must be true or false",
    "bool_type": "must be true or false",
    "string_type": "must be a string",
    "string_too_long": "must be at most {max_length} characters",
    "string_too_short": "must be at least {min_length} characters",
    "string_pattern_mismatch": "must match {pattern}",
    "dict_type": "must be a mapping",
    "model_type": "must be a mapping",
    "model_attributes_type": "must be a mapping",
    "list_type": "must be a list",
    "too_short": "must have at least {min_length} item(s)",
    "too_long": "must have at most {max_length} item(s)",
}


def _shown(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _model_at(root: type[BaseModel], loc: tuple[int | str, ...]) -> type[BaseModel] | None:
    """The model class that holds the field at ``loc[-1]``, to list its allowed fields."""
    model = root
    for part in loc[:-1]:
        if isinstance(part, int):  # an item of a list of models
            continue
        field = next((f for n, f in model.model_fields.items() if part in (n, f.alias)), None)
        if field is None:
            return None
        nested = [a for a in _flat_types(field.annotation) if isinstance(a, type)]
        sub = next((a for a in nested if issubclass(a, BaseModel)), None)
        if sub is None:
            return None
        model = sub
    return model


def _flat_types(tp: Any) -> list[Any]:
    args = getattr(tp, "__args__", None)
    if not args:
        return [tp]
    return [x for a in args for x in _flat_types(a)]


def _describe(
    err: Mapping[str, Any], root: type[BaseModel], patterns: Mapping[str, str]
) -> list[str]:
    loc: tuple[int | str, ...] = tuple(err["loc"])
    where = ".".join(str(p) for p in loc)
    kind = err["type"]
    ctx = err.get("ctx") or {}
    got = _shown(err.get("input"))
    if kind == "missing":
        return [f"{where} is required"]
    if kind == "invalid_key" or (loc and loc[-1] == "[key]"):  # a mapping's key
        where = ".".join(str(p) for p in loc[:-2]) if kind != "invalid_key" else ""
        rule = None if kind in ("invalid_key", "string_type") else _rule(err, patterns)
        said = f"key {got} {rule}" if rule else f"keys must be strings, got {got}"
        return [f"{where + ': ' if where else ''}{said}"]
    if kind == "extra_forbidden":
        model = _model_at(root, loc)
        allowed = ""
        if model is not None:
            allowed = f"; allowed: {', '.join(f.alias or n for n, f in model.model_fields.items())}"
        return [f"{where}: unknown field{allowed}"]
    if kind == "literal_error":
        return [f"{where} must be one of {ctx.get('expected', '?')}, got {got}"]
    if kind == "value_error":
        msg = str(ctx.get("error", err["msg"]))
        return [f"{where}: {m}" if where else m for m in msg.splitlines()]
    rule = _rule(err, patterns)
    if rule is not None:
        return [f"{where} {rule}, got {got}"]
    return [f"{where}: {err['msg']}, got {got}" if where else str(err["msg"])]


def _rule(err: Mapping[str, Any], patterns: Mapping[str, str]) -> str | None:
    """What the value must be ("must be ..."), in words where the error's kind has them."""
    kind, ctx = err["type"], err.get("ctx") or {}
    if kind == "string_pattern_mismatch" and ctx.get("pattern") in patterns:
        return patterns[ctx["pattern"]]
    if kind in _TEMPLATES:
        try:
            return _TEMPLATES[kind].format(**ctx)
        except (KeyError, IndexError):
            return str(err["msg"])
    return None


def describe_errors(
    err: ValidationError, root: type[BaseModel], patterns: Mapping[str, str] | None = None
) -> list[str]:
    """One line per problem in ``err``: the field's dotted path, what is allowed, what was given.

    Args:
        err: pydantic's error from validating ``root``.
        root: the model validated (to list the allowed fields of an unknown one).
        patterns: regex -> words, for fields whose pattern reads badly (those registered with
            :func:`orchestrator.names.ruled` are always known).
    """
    words = {**PATTERN_RULES, **(patterns or {})}
    problems: list[str] = []
    for e in err.errors():
        for part in _describe(e, root, words):
            if part not in problems:
                problems.append(part)
    return problems
