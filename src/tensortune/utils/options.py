"""Options of pluggable parts: frozen dataclasses, built from ``key=value`` text or keywords.

Every tuner, explorer, selector wrapper and cost model declares its settings once, as a frozen
dataclass with defaults. :func:`make_options` builds one from a mapping (values may be the
strings a command line gives: ``"32"``, ``"true"``, ``"none"``, ``"1.0,0.0"``), checks every key
and converts every value to the field's type, and raises :class:`OptionError` with one line
that names the known keys when a key is unknown or a value does not convert.

Keys with a dot (``explorer.n_chains=32``) address a part's own options; they are gathered into
the dict field ``<part>_options`` of the owner (see :func:`split_nested`).
"""
from __future__ import annotations

import dataclasses
import math
import types
import typing
from typing import Any, Mapping, Sequence, TypeVar

from ..errors import TensortuneError
from ..limits import MAX_EXTENT

O = TypeVar("O")


class OptionError(TensortuneError, ValueError):
    """An unknown option key, or a value that does not fit its option."""


def parse_assignments(items: Sequence[str]) -> dict[str, str]:
    """``["a=1", "b.c=x"]`` -> ``{"a": "1", "b.c": "x"}``; OptionError for an item without ``=``."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise OptionError(f"option {item!r} is not of the form key=value")
        out[key.strip()] = value.strip()
    return out


def split_nested(values: Mapping[str, Any]) -> dict[str, Any]:
    """Gather ``part.key`` entries into ``{"part_options": {"key": value}}`` (merged with a
    ``part_options`` dict given directly); plain keys pass through."""
    out: dict[str, Any] = {}
    nested: dict[str, dict[str, Any]] = {}
    for key, value in values.items():
        part, dot, sub = key.partition(".")
        if dot:
            nested.setdefault(f"{part}_options", {})[sub] = value
        else:
            out[key] = value
    for field, sub in nested.items():
        out[field] = {**dict(out.get(field) or {}), **sub}
    return out


def option_names(cls: type) -> list[str]:
    """The option keys of an options dataclass."""
    return [f.name for f in dataclasses.fields(cls)]


def make_options(cls: type[O], values: Mapping[str, Any] | O | None = None, owner: str = "",
                 **overrides: Any) -> O:
    """An instance of the options dataclass ``cls`` from ``values`` (an instance passes through)
    with ``overrides`` (keyword values of its fields) on top.

    ``owner`` names what the options belong to in messages ("tuner 'autotvm'").
    """
    if values is None and not overrides:
        return cls()
    if isinstance(values, cls) and not overrides:
        return values
    if dataclasses.is_dataclass(values) and not isinstance(values, type):  # this or another options class
        values = {f.name: getattr(values, f.name) for f in dataclasses.fields(values)}
    values = split_nested({**dict(values or {}), **overrides})
    known = option_names(cls)
    hints = typing.get_type_hints(cls)
    where = f" for {owner}" if owner else ""
    kwargs: dict[str, Any] = {}
    for key, value in values.items():
        if key not in known:
            raise OptionError(f"unknown option {key!r}{where}; known: {', '.join(known) or 'none'}")
        try:
            kwargs[key] = convert(value, hints[key])
        except (TypeError, ValueError) as exc:
            raise OptionError(f"option {key}={value!r}{where}: {exc}") from None
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as exc:
        raise OptionError(f"options{where}: {exc}") from None


def options_dict(options: Any) -> dict[str, Any]:
    """An options dataclass as a plain dict (for reports and JSON)."""
    return dataclasses.asdict(options)


_TRUE, _FALSE, _NONE = {"1", "true", "yes", "on"}, {"0", "false", "no", "off"}, {"none", "null", ""}


def convert(value: Any, hint: Any) -> Any:
    """``value`` as type ``hint`` (str values parsed; other values checked)."""
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if isinstance(value, str) and value.lower() in _NONE and type(None) in args:
            return None
        if value is None and type(None) in args:
            return None
        errors = []
        for a in args:
            if a is type(None):
                continue
            try:
                return convert(value, a)
            except (TypeError, ValueError) as exc:
                errors.append(str(exc))
        raise ValueError("; ".join(errors))
    if hint is Any:
        return value
    if hint is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in _TRUE | _FALSE:
            return value.lower() in _TRUE
        raise ValueError(f"expected true or false, got {value!r}")
    if hint is int:
        if isinstance(value, bool):
            raise ValueError(f"expected an integer, got {value!r}")
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        elif isinstance(value, str):
            value = int(value)
        if not isinstance(value, int):
            raise ValueError(f"expected an integer, got {value!r}")
        if abs(value) > MAX_EXTENT:
            raise ValueError(f"out of range (at most {MAX_EXTENT} in magnitude)")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise ValueError(f"expected a number, got {value!r}")
        try:
            number = float(value)
        except OverflowError:  # an integer beyond the floats
            number = math.inf
        if not math.isfinite(number):
            raise ValueError(f"expected a finite number, got {value!r}")
        return number
    if hint is str:
        if isinstance(value, str):
            return value
        raise ValueError(f"expected text, got {value!r}")
    if origin is tuple:
        items = value.split(",") if isinstance(value, str) else list(value)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(convert(v, args[0]) for v in items)
        if len(items) != len(args):
            raise ValueError(f"expected {len(args)} comma-separated values, got {value!r}")
        return tuple(convert(v, a) for v, a in zip(items, args))
    if origin in (dict, Mapping, typing.Mapping) or hint in (dict, Mapping):
        if isinstance(value, Mapping):
            return dict(value)
        raise ValueError(f"expected key=value options (as part.key=value), got {value!r}")
    return value
