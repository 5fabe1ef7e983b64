"""Shared fixtures: the repository's Cora (data/cora, OGB's raw layout) and the command-line
binary the Python package is compared with (ESPALIER_CLI, else built by cargo)."""

import json
import os
import pathlib
import subprocess

import pytest

import espalier

ROOT = pathlib.Path(__file__).resolve().parents[2]
CORA = ROOT / "data" / "cora"
SPLIT = "per-class-20"


@pytest.fixture(scope="session")
def cli():
    """Path of the `espalier` binary: $ESPALIER_CLI, else `cargo build --bin espalier`."""
    path = os.environ.get("ESPALIER_CLI")
    if path:
        return path
    out = subprocess.run(
        ["cargo", "build", "--quiet", "--bin", "espalier", "--message-format=json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    for line in out.stdout.splitlines():
        msg = json.loads(line)
        if msg.get("reason") == "compiler-artifact" and msg["target"]["name"] == "espalier":
            if msg.get("executable"):
                path = msg["executable"]
    assert path, "cargo built no espalier binary"
    return path


def run_cli(cli, *args):
    """Runs the CLI; returns (exit code, standard output, its error message: from the line
    `error: ...` to the usage or a blank line, lines joined by spaces)."""
    p = subprocess.run([cli, *map(str, args)], capture_output=True, text=True, cwd=ROOT)
    lines = p.stderr.splitlines()
    starts = [i for i, l in enumerate(lines) if l.startswith("error: ")]
    if not starts:
        return p.returncode, p.stdout, None
    message = []
    for l in lines[starts[-1]:]:
        if not l.strip() or l.startswith("Usage:"):
            break
        message.append(l.strip())
    return p.returncode, p.stdout, " ".join(message)[len("error: "):]


def cli_json(cli, tmp_path, *args):
    """Runs `espalier ARGS --json FILE` and returns the JSON."""
    out = tmp_path / "cli.json"
    code, _, err = run_cli(cli, *args, "--json", out)
    assert code == 0, err
    return json.loads(out.read_text())


@pytest.fixture(scope="session")
def cora():
    """Cora with its per-class-20 split, through the CLI's loader and cache."""
    return espalier.Dataset.load(str(CORA), split=SPLIT)
