"""Build dataclasses from YAML data by walking their fields and type hints.

Handles the types configs use (int, float, bool, str, Optional, Literal, a union of such, list[...],
nested dataclasses) and numeric bounds declared with `bounded` (llmbench/engine/config.py; a list's bounds
apply to each item). Every problem is a ConfigError whose key is the full dotted path; range checks raised
by a dataclass's own __post_init__ get the path prefixed."""

from __future__ import annotations

import dataclasses
import difflib
import reprlib
import types
import typing
from typing import Any, Literal, Union

from llmbench.engine.config import ConfigError, describe, finite, within


def build(cls: type, data: Any, path: str, skip: set[tuple[type, str]] = frozenset()) -> Any:
    """Instantiate dataclass `cls` from a mapping; `skip` names (class, field) pairs not settable."""
    if not isinstance(data, dict):
        raise ConfigError(path or "<top>", f"expected a mapping, got {_show(data)}")
    settable = {f.name: f for f in dataclasses.fields(cls) if (cls, f.name) not in skip}
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for key, value in data.items():
        key_path = _join(path, str(key))
        if key not in settable:
            raise ConfigError(key_path, _unknown_key_message(str(key), list(settable)))
        spec = settable[key]
        kwargs[key] = _convert(hints[spec.name], value, key_path, spec.metadata, skip)
    try:
        return cls(**kwargs)
    except ConfigError as e:
        # a dataclass's own check may quote the value it refused, which can be megabytes long
        raise ConfigError(_join(path, e.key), clip(e.message, 160)) from None


def _convert(hint: Any, value: Any, path: str, bounds: Any, skip: set) -> Any:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        arms = [a for a in args if a is not type(None)]
        if len(arms) == 1:
            return _convert(arms[0], value, path, bounds, skip)
        for arm in arms:  # a number or a word (backend.workers: 4 or auto): the first arm that fits
            try:
                return _convert(arm, value, path, bounds, skip)
            except ConfigError:
                pass
        raise ConfigError(
            path, f"expected {' or '.join(_describe_arm(a, bounds) for a in arms)}, got {_show(value)}"
        )
    if origin is Literal:
        if value not in args:
            raise ConfigError(path, f"expected one of {', '.join(map(str, args))}, got {_show(value)}")
        return value
    if origin is list:
        (item_hint,) = args
        if not isinstance(value, list):
            raise ConfigError(path, f"expected a list, got {_show(value)}")
        return [_convert(item_hint, v, f"{path}[{i}]", bounds, skip) for i, v in enumerate(value)]
    if dataclasses.is_dataclass(hint):
        return build(hint, value, path, skip)
    return _scalar(hint, value, path, bounds)


def _scalar(hint: type, value: Any, path: str, bounds: Any) -> Any:
    # bool is an int subclass in Python; a YAML `true` must not pass as a number
    if hint is bool:
        ok = isinstance(value, bool)
    elif hint is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif hint is float:
        # inf and nan pass `> 0` checks but no field has a use for them
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and finite(value)
        value = float(value) if ok else value
    elif hint is str:
        ok = isinstance(value, str)
    else:
        raise TypeError(f"config field {path} has unsupported type {hint}")
    if not (ok and within(value, bounds)):
        # YAML reads a bare `null` as None, never as the string some fields (model.executor) accept
        hint_text = ' (quote it, "null", to mean the string)' if hint is str and value is None else ""
        raise ConfigError(path, f"expected {_describe(hint, bounds)}, got {_show(value)}{hint_text}")
    return value


def _describe(hint: Any, bounds: Any) -> str:
    noun = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}.get(hint, str(hint))
    return describe(noun, bounds)


def _describe_arm(hint: Any, bounds: Any) -> str:
    if typing.get_origin(hint) is Literal:
        return ", ".join(map(str, typing.get_args(hint)))
    return _describe(hint, bounds)


def _unknown_key_message(key: str, known: list[str]) -> str:
    close = difflib.get_close_matches(key, known, n=1)
    if close:
        return f"unknown key (did you mean {close[0]}?)"
    return f"unknown key (expected one of {', '.join(known)})"


# what an error quotes of a value: a few items and characters, however large or deep the value is
_quote = reprlib.Repr()
_quote.maxlevel, _quote.maxlist, _quote.maxdict = 2, 4, 4
_quote.maxstring = _quote.maxother = 60
_quote.maxlong = 40


def _show(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return _quote.repr(value)


def clip(text: str, limit: int = 300) -> str:
    """`text`, cut to `limit` characters with its full length said, so an error stays readable."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


def _join(path: str, key: str) -> str:
    # a YAML key may hold a newline or other control characters: shown escaped, the error stays one line
    key = key if key.isprintable() else repr(key)
    return f"{path}.{key}" if path else key
