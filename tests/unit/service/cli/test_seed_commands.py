"""`seed-menu` and `seed-orders --past` at the command line: help with every flag and its
default, and bad flags refused in one line before any broker is asked."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from service.cli.main import cli

NO_BROKER = "127.0.0.1:1"  # nothing listens there: a flag that got past parsing would fail differently


def help_entry(text: str, flag: str) -> str:
    """A flag's part of the Options section, its wrapped lines joined."""
    lines = text.split("\nOptions:\n", 1)[1].splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.strip().startswith(flag + " ")), None)
    assert start is not None, f"{flag} is not in the help"
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("  -")), len(lines))
    return " ".join(ln.strip() for ln in lines[start:end])


def test_seed_menu_help_names_every_flag_with_its_default() -> None:
    result = CliRunner().invoke(cli, ["seed-menu", "--help"], prog_name="brewstream", terminal_width=200)
    assert result.exit_code == 0, result.output
    for flag, default in [("--count", None), ("--rate", "1s"), ("--burst", "16"), ("--seed", None),
                          ("--currency", "EUR"), ("--start", "now"), ("--step", "1m"), ("--late-fraction", "0.1"),
                          ("--max-late", "5s"), ("--withdraw-fraction", "0.05")]:
        entry = help_entry(result.output, flag)
        if default is not None:
            assert f"default: {default}" in entry, entry
    assert "brew.menu.v1" in result.output


def test_seed_orders_help_names_past_and_its_step() -> None:
    result = CliRunner().invoke(cli, ["seed-orders", "--help"], prog_name="brewstream", terminal_width=200)
    assert result.exit_code == 0, result.output
    assert "--past DURATION" in result.output and "--event-time-step DURATION" in result.output


@pytest.mark.parametrize(("args", "says"), [
    (["seed-menu", "--late-fraction", "2"], "--late-fraction"),
    (["seed-menu", "--withdraw-fraction", "-1"], "--withdraw-fraction"),
    (["seed-menu", "--max-late", "soon"], "--max-late"),
    (["seed-menu", "--step", "0"], "--step"),
    (["seed-menu", "--start", "yesterday"], "--start"),
    (["seed-menu", "--start", "1969-12-31T23:00:00Z"], "--start"),
    (["seed-menu", "--currency", "euro"], "--currency"),
    (["seed-menu", "--count", "-1"], "--count"),
    (["seed-menu", "--bogus"], "--bogus"),
    (["seed-orders", "--past", "yesterday"], "--past"),
    (["seed-orders", "--event-time-step", "1s"], "--event-time-step needs --past"),
    (["seed-orders", "--past", "1h", "--event-time-step", "0"], "--event-time-step"),
])
def test_a_bad_flag_is_one_line_and_a_non_zero_exit(args: list[str], says: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "service.cli", *args, "--bootstrap", NO_BROKER],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("brewstream: error:") and says in lines[0], proc.stderr
    assert proc.stdout == ""


def test_past_with_a_file_is_refused(tmp_path: Path) -> None:
    orders = tmp_path / "orders.jsonl"
    orders.write_text('{"order_id": "o-1", "shop_id": "shop-01", "items": [{"drink": "latte", "quantity": 1}]}\n')
    proc = subprocess.run([sys.executable, "-m", "service.cli", "seed-orders", "--file", str(orders), "--past", "1h",
                           "--bootstrap", NO_BROKER], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "--past stamps generated orders" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
