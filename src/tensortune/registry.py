"""Lazy registries: every pluggable kind (tuner, explorer, selector, cost model, scheduler,
template) is reachable by a short name, and its module is imported only when it is asked for.

A registry maps names to ``"module:Attribute"`` strings (or to objects already loaded), so
listing the names (``tensortune --help``) imports nothing: PyTorch, XGBoost and Ray load only
with the part that needs them. A plug-in adds a kind with :meth:`Registry.register`.

This module is a leaf: it imports nothing of tensortune but its errors and extras.
"""
from __future__ import annotations

import importlib
from typing import Any, Generic, Iterator, TypeVar

from .errors import TensortuneError
from .extras import missing_extra

T = TypeVar("T")


class RegistryError(TensortuneError, ValueError):
    """An unknown name, or an entry whose module or attribute cannot be loaded."""


class Registry(Generic[T]):
    """Names -> ``"module:Attribute"`` (loaded on first :meth:`get`) or objects.

    ``kind`` names the registry in messages ("unknown tuner 'x'; known: ...").
    """

    def __init__(self, kind: str, entries: dict[str, str | T] | None = None) -> None:
        self.kind = kind
        self._entries: dict[str, str | T] = dict(entries or {})
        self._loaded: dict[str, T] = {}

    def register(self, name: str, target: str | T) -> None:
        """Make ``target`` (an object or a ``"module:Attribute"`` string) reachable as ``name``;
        a later registration replaces an earlier one."""
        self._entries[name] = target
        self._loaded.pop(name, None)

    def get(self, name: str) -> T:
        """The object called ``name`` (its module imported on first use)."""
        if name in self._loaded:
            return self._loaded[name]
        try:
            target = self._entries[name]
        except (KeyError, TypeError):
            raise RegistryError(f"unknown {self.kind} {name!r}; known: {', '.join(self.names())}") from None
        try:
            obj = load(target) if isinstance(target, str) else target
        except RegistryError as exc:
            raise missing_extra(exc, f"{self.kind} {name!r}") or exc from exc
        self._loaded[name] = obj
        return obj

    def names(self) -> list[str]:
        """Registered names, in registration order (nothing is imported)."""
        return list(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self._entries)

    def __getitem__(self, name: str) -> T:
        return self.get(name)

    def items(self) -> list[tuple[str, T]]:
        """(name, object) pairs: loads every entry (for contract tests and listings)."""
        return [(n, self.get(n)) for n in self.names()]


def load(spec: str) -> Any:
    """The attribute ``"package.module:Name"`` names (RegistryError when it cannot be loaded)."""
    module, _, attr = spec.partition(":")
    if not module or not attr:
        raise RegistryError(f"{spec!r} is not of the form 'module:Attribute'")
    try:
        obj: Any = importlib.import_module(module)
    except ImportError as exc:
        raise RegistryError(f"cannot import {module!r} for {spec!r}: {exc}") from exc
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise RegistryError(f"{module!r} has no attribute {attr!r}") from None
    return obj
