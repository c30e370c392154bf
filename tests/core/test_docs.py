"""The short docs stay short and every number they quote names a committed run file (issue 53 item 6)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ("docs/sim_to_real.md", "docs/benchmarks.md")
MAX_LINES = 260
# What `.gitignore` lets into git under bench/results: `<area>/<run>.json`, `<run>` starting with its date.
RESULT = re.compile(r"bench/results/[\w.-]+/\d[\w.-]*\.json")
# A measured number in a table row once code spans are taken out: a decimal or a percentage.
NUMBER = re.compile(r"\d\.\d|\d\s?%")


def rows_by_heading(text: str) -> list[tuple[str, str]]:
    """(heading, row) for every table body row (not the header, not the separator)."""
    out, heading, in_table = [], "", False
    for line in text.splitlines():
        if line.startswith("#"):
            heading, in_table = line.lstrip("#").strip(), False
        elif line.startswith("|"):
            if in_table and not re.fullmatch(r"[|\s:-]+", line):
                out.append((heading, line))
            in_table = True
        else:
            in_table = False
    return out


@pytest.mark.parametrize("doc", DOCS)
def test_short(doc: str) -> None:
    n = len((ROOT / doc).read_text().splitlines())
    assert n <= MAX_LINES, f"{doc} has {n} lines; the history goes to docs/log/"


@pytest.mark.parametrize("doc", DOCS)
def test_every_named_result_file_exists(doc: str) -> None:
    text = (ROOT / doc).read_text()
    named = [p for p in re.findall(r"bench/results/[^\s`|)]*\.json", text) if "<" not in p]  # not a <template>
    assert named, f"{doc} names no result file"
    for path in named:
        assert RESULT.fullmatch(path), f"{doc}: {path} is not a committed run file's name (bench/results/<area>/<run>)"
        assert (ROOT / path).is_file(), f"{doc}: {path} does not exist"


@pytest.mark.parametrize("doc", DOCS)
def test_every_number_names_its_file(doc: str) -> None:
    rows = rows_by_heading((ROOT / doc).read_text())
    current = [row for heading, row in rows if heading == "Current numbers"]
    assert current, f"{doc} has no table under 'Current numbers'"
    for heading, row in rows:
        plain = re.sub(r"`[^`]*`", "", row)
        if heading == "Current numbers" or NUMBER.search(plain):
            assert RESULT.search(row), f"{doc}, {heading!r}: a row with a figure names no result file: {row}"
