"""The site's command reference says what `--help` says: every command under its full name,
with every flag its help shows, however deep the command groups go. The page is generated
from the click commands (mkdocs-click in docs/reference/cli.md); this renders it with the
Markdown settings of mkdocs.yml, as `make docs` does, and reads it back."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import click
import markdown
import pytest
from click.testing import CliRunner
from markdown.extensions.toc import slugify
from mkdocs.config import load_config

from service.cli.main import cli

ROOT = Path(__file__).resolve().parents[3]
PAGE = ROOT / "docs" / "reference" / "cli.md"
HEADING = re.compile(r'<h([1-6]) id="([^"]+)"[^>]*>(.*?)</h\1>', re.S)


def command_paths(cmd: click.Command = cli, path: tuple[str, ...] = ("brewstream",)) -> Iterator[tuple[str, ...]]:
    """Every command `--help` can reach, groups included, depth first."""
    yield path
    if isinstance(cmd, click.Group):
        ctx = click.Context(cmd, info_name=path[-1])
        for name in cmd.list_commands(ctx):
            sub = cmd.get_command(ctx, name)
            if sub is not None and not sub.hidden:
                yield from command_paths(sub, (*path, name))


def help_flags(path: tuple[str, ...]) -> set[str]:
    """The flags in the Options section of `brewstream … --help`, as a user sees it."""
    result = CliRunner().invoke(cli, [*path[1:], "--help"], prog_name="brewstream")
    assert result.exit_code == 0, result.output
    options = result.output.split("\nOptions:\n", 1)[1].split("\nCommands:\n", 1)[0]
    flags: set[str] = set()
    for line in options.splitlines():
        if re.match(r"^  -", line):  # an option's own line; wrapped help is indented further
            names = re.split(r"\s{2,}", line.strip(), maxsplit=1)[0]
            flags.update(re.findall(r"(?<![\w-])--?[A-Za-z][\w-]*", names))
    assert flags, f"no flags found in the help of {' '.join(path)}"
    return flags


@cache
def rendered_sections() -> dict[str, tuple[str, str]]:
    """The CLI page as the site renders it: heading id -> (heading text, the text up to the next heading)."""
    config = load_config(str(ROOT / "mkdocs.yml"))
    md = markdown.Markdown(extensions=config["markdown_extensions"], extension_configs=config["mdx_configs"])
    page = md.convert(PAGE.read_text())
    headings = list(HEADING.finditer(page))
    sections = {}
    for i, h in enumerate(headings):
        end = headings[i + 1].start() if i + 1 < len(headings) else len(page)
        title = html.unescape(re.sub(r"<[^>]+>", "", h.group(3))).replace("¶", "").strip()
        sections[h.group(2)] = (title, html.unescape(re.sub(r"<[^>]+>", " ", page[h.end():end])))
    return sections


PATHS = list(command_paths())


def test_the_walk_reaches_nested_groups() -> None:
    names = {" ".join(p) for p in PATHS}
    assert {"brewstream sandbox node kill", "brewstream sandbox fault latency", "brewstream drill failover",
            "brewstream dlq replay", "brewstream spark-cluster up"} <= names
    assert len(PATHS) > 30


@pytest.mark.parametrize("path", PATHS, ids=" ".join)
def test_the_cli_reference_lists_every_command_and_flag(path: tuple[str, ...]) -> None:
    full_name = " ".join(path)
    sections = rendered_sections()
    anchor = slugify(full_name, "-")
    assert anchor in sections, f"docs/reference/cli.md has no section for `{full_name}`"
    title, text = sections[anchor]
    assert title == full_name, f"the section of `{full_name}` is headed {title!r}, not the full command name"
    missing = sorted(flag for flag in help_flags(path)
                     if not re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", text))
    assert not missing, f"`{full_name} --help` shows {missing}, which its section in docs/reference/cli.md lacks"


@pytest.mark.parametrize("name", ["README.md", "BENCHMARKS.md", "CHANGELOG.md"])
def test_the_top_level_pages_link_to_files_that_exist(name: str) -> None:
    """The site's own links are checked by `make docs` (strict); these pages sit outside it."""
    text = (ROOT / name).read_text()
    targets = re.findall(r"\]\(([^)\s#]+)(?:#[^)]*)?\)", text)
    broken = [t for t in targets if "://" not in t and not (ROOT / t).exists()]
    assert not broken, f"{name} links to {broken}, which do not exist"
