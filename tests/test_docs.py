"""The documentation: a short README, every page of docs/ reachable from it, links that
resolve, an option reference made from the parser and current, help on every option."""
from __future__ import annotations

import argparse
import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
README_LINES = 200
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def _reference():
    spec = importlib.util.spec_from_file_location("make_cli_options", DOCS / "make_cli_options.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CODE = re.compile(r"```.*?```|`[^`\n]*`", re.S)


def _links(page: Path) -> list[Path]:
    text = CODE.sub("", page.read_text())  # code is not a link
    return [(page.parent / target).resolve() for target in LINK.findall(text)
            if not target.startswith(("http://", "https://", "mailto:"))]


def test_the_readme_is_short() -> None:
    assert len((ROOT / "README.md").read_text().splitlines()) <= README_LINES


def test_every_page_is_reachable_from_the_readme_and_every_link_resolves() -> None:
    seen, todo = set(), [ROOT / "README.md"]
    while todo:
        page = todo.pop()
        if page in seen:
            continue
        seen.add(page)
        for target in _links(page):
            assert target.exists(), f"{page.relative_to(ROOT)} links to a missing {target}"
            if target.suffix == ".md" and DOCS in target.parents:
                todo.append(target)
    orphans = {p.name for p in DOCS.glob("*.md")} - {p.name for p in seen}
    assert not orphans, f"pages no other page links to: {sorted(orphans)}"


def test_the_option_reference_is_current() -> None:
    assert (DOCS / "cli-options.md").read_text() == _reference().render(), "run `make docs`"


def test_every_option_of_every_command_says_what_it_does() -> None:
    from tensortune.cli import build_parser

    ref = _reference()
    missing = []

    def walk(parser: argparse.ArgumentParser, path: str) -> None:
        for a in parser._actions:
            if not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction, argparse._VersionAction)) \
                    and not a.help:
                missing.append(f"{path} {'/'.join(a.option_strings) or a.dest}")
        for name, sub in ref._subcommands(parser).items():
            walk(sub, f"{path} {name}")

    walk(build_parser(), "tensortune")
    assert not missing, missing
