"""The CI plan: which jobs run which tox envs, derived from tox.ini (whose envs the support table drives).

    python matrix/plan.py                 # the plan as JSON, for people
    python matrix/plan.py --github        # one line per job kind for $GITHUB_OUTPUT: cpu=[...], bench=[...], ...
    python matrix/plan.py --summary ENV results/junit.xml   # a job's test results in Markdown, for its summary
    python matrix/plan.py --head head/doctor.json head/junit.xml   # the nightly Composer-main job's verdict

Job kinds: ``cpu`` (every env of tox's env_list: the cpu matrix, the Python factor, unit, lint, build, the offline GPU
kit), ``cuda`` and ``mps`` (the tox labels of those names; each entry also names the release's bench env on that device,
from the ``report-cuda``/``report-mps`` labels, where it has one), ``bench`` (the cpu bench envs of the ``report``
label). Each entry: the env, the Python it needs, the lock file whose hash keys its package cache, and the device.
A release added to the support table (and so to tox.ini, which ``tests/unit/test_support_table.py`` holds to it) is
in CI with no edit of the workflow. Needs only the standard library.
"""

from __future__ import annotations

import argparse
import configparser
import json
import re
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
#: compatshim.config.support.DEFAULT_PYTHON, which this script cannot import (it runs before anything is installed);
#: tests/unit/test_workflow.py holds every planned env's Python to the support table's.
DEFAULT_PYTHON = '3.11'


def expand(spec: str) -> list[str]:
    """Expand tox's generative names: ``a{x,y}-b`` -> ``a x-b``, ``a y-b`` (nested in order)."""
    match = re.search(r'\{([^}]*)\}', spec)
    if not match:
        return [spec]
    return [n for alt in match.group(1).split(',') for n in expand(spec[: match.start()] + alt + spec[match.end() :])]


def _split(value: str) -> list[str]:
    """Split a tox list at the commas outside braces."""
    parts, depth, current = [], 0, ''
    for char in value:
        depth += {'{': 1, '}': -1}.get(char, 0)
        if char == ',' and depth == 0:
            parts.append(current.strip())
            current = ''
        else:
            current += char
    return [p for p in [*parts, current.strip()] if p]


def tox_config() -> tuple[list[str], dict[str, list[str]]]:
    """tox.ini's ``env_list`` and ``labels``, expanded."""
    config = configparser.ConfigParser(interpolation=None)
    config.read(ROOT / 'tox.ini')
    envs = [e for line in config['tox']['env_list'].split() for e in expand(line)]
    labels = {}
    for line in config['tox']['labels'].strip().splitlines():
        name, _, value = line.partition('=')
        labels[name.strip()] = [e for part in _split(value) for e in expand(part)]
    return envs, labels


def _entry(env: str) -> dict[str, Any]:
    """What a job needs to run one env: its Python, the lock file keying its cache, its device (the env-name grammar of
    ``compatshim.config.support.split_env``, which this script cannot import: it runs before anything is installed)."""
    name, _, device = env.removeprefix('bench-').rpartition('-')
    row, device = (name, device) if device in ('cpu', 'cuda', 'mps') else (env, 'cpu')  # unit, lint, build, ...
    python = re.search(r'-py(3\.\d+)$', row)
    lock = ROOT / 'matrix' / f'{row}.txt'
    return {
        'env': env,
        'python': python.group(1) if python else DEFAULT_PYTHON,
        'lock': lock.relative_to(ROOT).as_posix() if lock.exists() else 'pyproject.toml',
        'device': device,
    }


def plan() -> dict[str, list[dict[str, Any]]]:
    envs, labels = tox_config()

    def with_bench(device: str) -> list[dict[str, Any]]:
        benched = set(labels[f'report-{device}'])
        return [{**_entry(e), 'bench': f'bench-{e}' if f'bench-{e}' in benched else ''} for e in labels[device]]

    return {
        'cpu': [_entry(e) for e in envs],
        'cuda': with_bench('cuda'),
        'mps': with_bench('mps'),
        'bench': [_entry(e) for e in labels['report'] if e.startswith('bench-')],
    }


def _cases(junit: Path) -> list[tuple[str, Any]]:
    """Each test case of a JUnit XML file: its outcome (passed, failure, error, skipped) and the element saying so."""
    cases = []
    for case in ET.parse(junit).getroot().iter('testcase'):
        found = next((child for child in case if child.tag in ('failure', 'error', 'skipped')), None)
        cases.append((found.tag if found is not None else 'passed', found))
    return cases


def summary(env: str, junit: Path) -> tuple[str, list[str]]:
    """A job's JUnit results as Markdown (the counts, each skip reason with its count), and the warning annotations
    for the log: a device the runner lacks is a visible skip, never a silent pass."""
    if not junit.exists():  # an env that runs no pytest (lint, build), or one that failed before it wrote any
        return f'### {env}: no JUnit results\n', []
    outcomes: Counter[str] = Counter()
    skipped: Counter[str] = Counter()
    for outcome, found in _cases(junit):
        outcomes[outcome] += 1
        if found is not None and outcome == 'skipped' and found.get('type') != 'pytest.xfail':
            skipped[(found.get('message') or '').removeprefix('Skipped: ')] += 1
    lines = [f'### {env}: ' + ', '.join(f'{n} {outcome}' for outcome, n in sorted(outcomes.items()))]
    lines += [f'- skipped {n}: {reason}' for reason, n in skipped.most_common()]
    absent = [reason for reason in skipped if 'is_available() is False' in reason]
    return '\n'.join(lines) + '\n', [f'::warning title={env} - device absent::{reason}' for reason in absent]


def head_summary(doctor: Path, junit: Path) -> tuple[str, list[str]]:
    """The nightly job against Composer's main branch, in Markdown, and the warning annotations for its log.

    ``doctor`` is ``compatshim doctor --allow-untested --json``'s output, ``junit`` the placement tests' JUnit XML (run
    with ``COMPATSHIM_ALLOW_UNTESTED=1``). Either may be missing (Composer's head did not install, or the step died).
    The verdict is *patched and placed* only when the doctor's with-shim leg saw the device in train, eval and predict
    and every placement test passed; anything else is a warning: the early sign that Composer's shape moved.
    """
    lines, problems = ['### Composer main (allow-untested)'], []
    report: dict[str, Any] = {}
    if doctor.exists() and doctor.read_text().strip():
        try:
            report = json.loads(doctor.read_text())
        except ValueError:
            problems.append(f'the doctor wrote no JSON to {doctor.name}')
    else:
        problems.append("the doctor did not run (did Composer's main branch install?)")
    if report:
        lines.append(f'- Composer {report.get("composer")}, torch {report.get("torch")}: {report.get("summary")}')
        check = report.get('self_check') or {}
        with_shim = check.get('with_shim') or {}
        placed = [with_shim.get(mode) for mode in ('train', 'eval', 'predict')]
        lines.append(f'- with the shim: train {placed[0]}, eval {placed[1]}, predict {placed[2]}')
        if check.get('enable_error'):
            problems.append(f'enable() failed: {check["enable_error"]}')
        elif placed != ['device'] * 3:
            problems.append(f'the shim did not put the transform on the device ({", ".join(map(str, placed))})')
    if junit.exists():
        counts = Counter(outcome for outcome, _ in _cases(junit))
        lines.append('- placement tests: ' + ', '.join(f'{n} {o}' for o, n in sorted(counts.items())))
        if counts['failure'] or counts['error'] or not counts['passed']:
            problems.append('the placement tests did not all pass')
    else:
        problems.append('the placement tests wrote no JUnit XML')
    if problems:
        lines.append('- **warning**: ' + '; '.join(problems) + '. The support table and the patches may need work.')
    else:
        lines.append('- the shim patches Composer main and every placement test passes.')
    warnings = [f'::warning title=Composer main::{problem}' for problem in problems]
    return '\n'.join(lines) + '\n', warnings


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog='python matrix/plan.py', description=__doc__.split('\n\n')[0])
    parser.add_argument('--github', action='store_true', help='print kind=<json> lines for $GITHUB_OUTPUT')
    parser.add_argument('--summary', nargs=2, metavar=('ENV', 'JUNIT'), help="a job's JUnit XML as Markdown")
    parser.add_argument('--head', nargs=2, metavar=('DOCTOR_JSON', 'JUNIT'), help="the Composer-main job's verdict")
    args = parser.parse_args(argv)
    if args.summary or args.head:
        markdown, warnings = (
            summary(args.summary[0], Path(args.summary[1]))
            if args.summary
            else head_summary(Path(args.head[0]), Path(args.head[1]))
        )
        print(markdown, end='')
        print('\n'.join(warnings), file=sys.stderr)
        return 0
    found = plan()
    if args.github:
        for kind, entries in found.items():
            print(f'{kind}={json.dumps(entries, separators=(",", ":"))}')
    else:
        print(json.dumps(found, indent=1))
    return 0


if __name__ == '__main__':
    raise SystemExit(main(sys.argv[1:]))
