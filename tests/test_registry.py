"""Lazy registries, options from text, and the import structure (no cycles, light imports)."""
from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass, field

import pytest

from tensortune.registry import Registry, RegistryError, load
from tensortune.utils.options import OptionError, make_options, parse_assignments


def test_registry_loads_lazily_and_names_the_known_ones() -> None:
    reg = Registry("widget", {"json": "json:dumps", "broken": "no_such_module_xyz:thing"})
    assert reg.names() == ["json", "broken"] and "json" in reg and len(reg) == 2
    import json

    assert reg.get("json") is json.dumps
    with pytest.raises(RegistryError, match=r"unknown widget 'x'; known: json, broken"):
        reg.get("x")
    with pytest.raises(RegistryError, match="cannot import 'no_such_module_xyz'"):
        reg.get("broken")
    reg.register("obj", 42)
    assert reg.get("obj") == 42
    with pytest.raises(RegistryError, match="not of the form"):
        load("json.dumps")


@dataclass(frozen=True)
class Opts:
    n: int = 3
    rate: float = 0.5
    flag: bool = False
    name: str | None = None
    pair: tuple[float, float] = (1.0, 0.0)
    part_options: dict = field(default_factory=dict)


def test_options_from_text() -> None:
    o = make_options(Opts, parse_assignments(["n=7", "rate=1e-3", "flag=true", "name=none", "pair=2,1", "part.k=v"]))
    assert o == Opts(7, 1e-3, True, None, (2.0, 1.0), {"k": "v"})
    assert make_options(Opts, None) == Opts() and make_options(Opts, o) is o
    assert make_options(Opts, o, n=1).n == 1
    for bad, msg in [({"m": "1"}, r"unknown option 'm' for thing; known: n, rate, flag, name, pair, part_options"),
                     ({"n": "x"}, r"option n='x' for thing"), ({"flag": "maybe"}, "true or false"),
                     ({"pair": "1"}, "2 comma-separated")]:
        with pytest.raises(OptionError, match=msg):
            make_options(Opts, bad, owner="thing")
    with pytest.raises(OptionError, match="key=value"):
        parse_assignments(["n"])


def fresh_modules(code: str) -> str:
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return p.stdout.strip()


def test_template_registry_is_a_leaf_and_task_does_not_load_templates() -> None:
    """The template registry imports no task code; a task imports the registry only, and a
    template module only when the task's space is asked for."""
    out = fresh_modules("import sys; import tensortune.templates.registry; "
                        "print(any(m.startswith('tensortune.task') for m in sys.modules))")
    assert out == "False"
    out = fresh_modules("import sys; from tensortune.task import Task; "
                        "print(sorted(m for m in sys.modules if m.startswith('tensortune.templates')))")
    assert out == "['tensortune.templates', 'tensortune.templates.registry']"


def test_builtin_templates_are_registered_by_name() -> None:
    from tensortune.templates import TEMPLATES, Template, get_template

    for name in TEMPLATES.names():
        t = get_template(name)
        assert isinstance(t, Template) and t.name == name and get_template(name) is t
