"""Check commit subjects against CONTRIBUTING.md's convention (``tox -e lint`` runs it).

    python matrix/check_commits.py            # every commit since the convention began (CONVENTION_SINCE)
    python matrix/check_commits.py A..B       # a range of your own

Fails (exit 1, one line per commit) where a subject is longer than 72 characters, is empty, or bundles a review's
fixes (``Review: ...``). Commits before the convention are not judged. Where the clone is too shallow to hold the
start of the range, HEAD alone is checked, and it says so.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: The last commit before the convention was written down: the commits after it are held to it.
CONVENTION_SINCE = '68e9d51c839875ccfe5e3cc520619ef9ad7ab79e'
LIMIT = 72


def problems(subject: str) -> list[str]:
    """What is wrong with one commit subject (empty: nothing)."""
    found = []
    if not subject.strip():
        found.append('empty subject')
    if len(subject) > LIMIT:
        found.append(f'{len(subject)} characters (at most {LIMIT})')
    if subject.lower().startswith('review:'):
        found.append('a "Review:" bundle: one commit per fix, each saying what it changed')
    return found


def _git(*args: str) -> str:
    return subprocess.run(['git', *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout


def _range(given: str | None) -> list[str]:
    if given:
        return [given]
    reachable = subprocess.run(
        ['git', 'merge-base', '--is-ancestor', CONVENTION_SINCE, 'HEAD'], cwd=ROOT, capture_output=True
    )
    if reachable.returncode == 0:
        return [f'{CONVENTION_SINCE}..HEAD']
    print(f'check_commits: {CONVENTION_SINCE[:7]} is not in this clone (shallow?): checking HEAD alone')
    return ['-1', 'HEAD']


def main(argv: list[str]) -> int:
    span = _range(argv[0] if argv else None)
    log = _git('log', '--format=%h%x00%s', *span)
    bad = 0
    for line in log.splitlines():
        short, _, subject = line.partition('\0')
        for problem in problems(subject):
            bad += 1
            print(f'{short} {subject[:60]!r}: {problem}')
    checked = len(log.splitlines())
    print(f'check_commits: {checked} commit(s) in {" ".join(span)}, {bad} problem(s)')
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
