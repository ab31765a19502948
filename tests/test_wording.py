"""The repository describes the project, not how the work on it was organised.

Every tracked text file is searched (data files, ``.csv`` and ``.json``, are
machine-written and left out): no numbered work phase ("stop" or "wave"
followed by a number) nor the other words ``WORK_PHASES`` lists, and no
Markdown heading titled by an issue number (an issue may be cited in the
text, never name a section).
"""

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA_SUFFIXES = {".csv", ".json", ".png", ".svg", ".jpg", ".gif", ".npz", ".npy", ".gz"}

WORK_PHASES = re.compile(r"\b(stop|wave)s? [0-9]+\b|\bsession\b", re.IGNORECASE)
ISSUE_HEADING = re.compile(r"^#{1,6}\s.*\bissues?\s+#?[0-9]+", re.IGNORECASE)


def tracked_text_files():
    """``(path relative to the root, text)`` of every tracked file that is text, not data."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=60
        ).stdout.decode()
    except (OSError, subprocess.SubprocessError):
        pytest.skip("not a git checkout: the tracked files are unknown")
    found = []
    for name in filter(None, listed.split("\0")):
        path = ROOT / name
        if path.suffix.lower() in DATA_SUFFIXES or not path.is_file():
            continue
        try:
            found.append((name, path.read_text(encoding="utf-8")))
        except UnicodeDecodeError:
            continue  # binary
    return found


def test_no_work_phase_words():
    hits = [
        f"{name}:{text.count(chr(10), 0, match.start()) + 1}: {match.group(0)!r}"
        for name, text in tracked_text_files()
        for match in WORK_PHASES.finditer(text)
    ]
    assert not hits, "words of how work was organised:\n" + "\n".join(hits)


def test_no_heading_is_titled_by_an_issue():
    hits = [
        f"{name}:{number}: {line}"
        for name, text in tracked_text_files()
        if name.endswith(".md")
        for number, line in enumerate(text.splitlines(), 1)
        if ISSUE_HEADING.match(line)
    ]
    assert not hits, "headings titled by an issue:\n" + "\n".join(hits)


@pytest.mark.parametrize(
    "line, bad",
    [
        ("the battery of st" "op 42", True),  # split: this file is searched too
        ("Rounds at the end of Wa" "ve 11", True),
        ("in this ses" "sion", True),
        ("early stopping after 30 rounds", False),
        ("a stopwatch", False),
    ],
)
def test_the_patterns_catch_what_they_mean(line, bad):
    assert bool(WORK_PHASES.search(line)) is bad


def test_the_heading_pattern_catches_an_issue_title():
    assert ISSUE_HEADING.match("## Issue 27: one pass a round")
    assert ISSUE_HEADING.match("### Levers (issue 16)")
    assert not ISSUE_HEADING.match("See issue 27 for the targets.")
