"""The documentation stays true to the CLI: every ``mosaic`` command line a README.md or docs/
page shows in a shell block uses only flags its subcommand's parser accepts, and every relative
link points at a file that exists."""

from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path

import pytest

from slurm_plugin.cli.main import build_parser
from slurm_plugin.directives import parse_directives

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
SHELL_LANGS = {"bash", "sh", "console", "shell"}
FENCE = re.compile(r"^```(\S*)\s*$")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
PREFIXES = ("mosaic ", ".venv/bin/mosaic ")
# Where a command line ends and another program's words begin.
SEPARATORS = {"|", "||", "&&", ";", ">", ">>", "2>", "<"}


def shell_lines(text: str) -> list[tuple[int, str]]:
    """(line number, command) of every line in a bash/sh/console fence, continuations joined."""
    out: list[tuple[int, str]] = []
    lang: str | None = None
    pending = ""
    start = 0
    for number, line in enumerate(text.splitlines(), 1):
        fence = FENCE.match(line.strip())
        if fence:
            lang = None if lang is not None else fence.group(1).lower()
            pending = ""
            continue
        if lang not in SHELL_LANGS:
            continue
        stripped = line.strip()
        if lang == "console":
            if not pending and not stripped.startswith("$ "):
                continue  # output, not a command
            stripped = stripped.removeprefix("$ ")
        if not pending:
            start = number
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        out.append((start, pending + stripped))
        pending = ""
    return out


def _words(command: str) -> list[str]:
    try:
        return shlex.split(command, comments=True)
    except ValueError:  # an unbalanced quote in an illustration: words as written
        return command.split("#", 1)[0].split()


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def unknown_flags(command: str, parser: argparse.ArgumentParser | None = None) -> list[str]:
    """The ``--flags`` of a ``mosaic ...`` command line that its (sub)command does not accept."""
    words = _words(command)
    if not words or words[0] not in ("mosaic", ".venv/bin/mosaic"):
        return []
    parser = parser or build_parser()
    path = ["mosaic"]
    bad: list[str] = []
    for word in words[1:]:
        if word in SEPARATORS or word == "--":
            break  # the rest is another program's, or sbatch's / the training command's
        choices = _subparsers(parser)
        if word in choices:
            parser = choices[word]
            path.append(word)
            continue
        if word.startswith("--"):
            flag = word.split("=", 1)[0]
            if flag not in parser._option_string_actions:
                bad.append(f"{' '.join(path)} {flag}")
    return bad


def doc_commands() -> list[tuple[str, str]]:
    found = []
    for doc in DOCS:
        for number, command in shell_lines(doc.read_text()):
            if command.startswith(PREFIXES):
                found.append((f"{doc.relative_to(ROOT)}:{number}", command))
    return found


def test_docs_show_mosaic_commands() -> None:
    commands = doc_commands()
    assert len(commands) >= 20, commands
    assert any(where.startswith("README.md") for where, _ in commands)


def test_every_flag_in_the_docs_exists() -> None:
    parser = build_parser()
    problems = [
        f"{where}: {bad}" for where, command in doc_commands() for bad in unknown_flags(command, parser)
    ]
    assert not problems, "flags the CLI does not accept:\n" + "\n".join(problems)


def test_the_check_finds_a_flag_that_does_not_exist() -> None:
    assert unknown_flags("mosaic sim --no-such-flag 1 --out d") == ["mosaic sim --no-such-flag"]
    bogus = unknown_flags("mosaic trace gen --kind gavel --bogus=1 --out x.csv")
    assert bogus == ["mosaic trace gen --bogus"]
    assert unknown_flags("mosaic submit job.sh -- --time=1:00:00") == []
    assert unknown_flags("mosaic sim --out d | tee log --x") == []
    text = "```bash\nmosaic status --json --nope \\\n    --rounds 3\n```\n"
    assert [unknown_flags(c) for _, c in shell_lines(text)] == [["mosaic status --nope"]]


def shell_blocks(text: str) -> list[tuple[int, str]]:
    """(first line number, text) of every bash/sh fence."""
    out: list[tuple[int, str]] = []
    lang: str | None = None
    lines: list[str] = []
    start = 0
    for number, line in enumerate(text.splitlines(), 1):
        fence = FENCE.match(line.strip())
        if fence and lang is None:
            lang, lines, start = fence.group(1).lower(), [], number + 1
        elif fence:
            if lang in ("bash", "sh"):
                out.append((start, "\n".join(lines) + "\n"))
            lang = None
        elif lang is not None:
            lines.append(line)
    return out


def test_every_mosaic_directive_in_the_docs_parses() -> None:
    """A job script a doc shows has ``#MOSAIC`` directives that ``mosaic submit`` accepts."""
    checked = 0
    for doc in DOCS:
        for start, block in shell_blocks(doc.read_text()):
            if "#MOSAIC" in block:
                parse_directives(block, f"{doc.relative_to(ROOT)}:{start}")  # raises on a bad one
                checked += 1
    assert checked >= 2


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: str(d.relative_to(ROOT)))
def test_relative_links_point_at_files(doc: Path) -> None:
    broken = []
    for target in LINK.findall(doc.read_text()):
        if re.match(r"^[a-z]+:", target) or target.startswith("#"):
            continue
        path = target.split("#", 1)[0]
        if not (doc.parent / path).exists():
            broken.append(target)
    assert not broken, f"{doc.relative_to(ROOT)} links to missing files: {broken}"
