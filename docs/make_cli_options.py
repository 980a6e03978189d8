"""Write docs/cli-options.md: every command's ``--help``, read from the parser itself, so the
reference cannot drift from the code (``make docs``; a test checks the file is current)."""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent / "cli-options.md"
WIDTH = "100"


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:  # argparse keeps its sub-parsers only here
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _walk(parser: argparse.ArgumentParser, path: list[str]) -> list[tuple[list[str], str]]:
    out = [(path, parser.format_help())]
    for name, sub in _subcommands(parser).items():
        out += _walk(sub, [*path, name])
    return out


def render() -> str:
    """The page: the top-level help, then each command's, in the order ``--help`` lists them."""
    os.environ["COLUMNS"] = WIDTH  # argparse wraps at the terminal's width
    from tensortune.cli import build_parser

    parts = ["# Every command's options\n",
             "Made by `make docs` from the parser (`docs/make_cli_options.py`); what they mean: [cli.md](cli.md).\n"]
    for path, text in _walk(build_parser(), ["tensortune"]):
        parts.append(f"## `{' '.join(path)}`\n\n```text\n{text.rstrip()}\n```\n")
    return "\n".join(parts)


if __name__ == "__main__":
    OUT.write_text(render())
    sys.stdout.write(f"wrote {OUT}\n")
