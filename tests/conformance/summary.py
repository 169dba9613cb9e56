"""Conformance with 0.24.1 for the main job's report: every all-pairs program run at each stage with the shim (0.24.1
itself: without it), judged by :func:`rules.verdict`, counted.

In a release env, after the bench in the same process (``tox -m report``: Composer is imported once)::

    python tests/conformance/summary.py --out .tox/conformance/<env>.json --stages batch -- bench --device cpu ...

and in the report env, the table of every release found (exit 1 if any program differs from 0.24.1 with no rule)::

    python tests/conformance/summary.py --table .tox/conformance --write matrix/reports/conformance.md
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

from programs import generated, key  # noqa: E402
from rules import REFERENCE, explain, recorded, verdict  # noqa: E402


def measure(stages: list[str]) -> dict[str, Any]:
    """Run every program here at each of ``stages``; what each verdict counted."""
    import importlib.metadata

    from runner import run

    import compatshim
    from compatshim.shim.registry import STATE

    composer = importlib.metadata.version('mosaicml')
    reference, programs = recorded(), generated()
    counted: Counter[str] = Counter()
    differ: list[str] = []
    run_at: list[Any] = [None] if composer == REFERENCE else stages
    for stage in run_at:
        for program in programs:
            ref = reference.get(key(program))
            if ref is None:
                counted['not recorded'] += 1
                continue
            if stage is not None:
                compatshim.enable(stage=stage)
            STATE.warned.clear()
            got = run(program)
            compatshim.disable()
            said = verdict(program, stage or 'batch', ref, got) if stage else ('identical' if got == ref else None)
            counted[said or 'differs'] += 1
            if said is None:
                differ.append(explain(program, stage, ref, got))
    return {'composer': composer, 'stages': len(run_at), 'programs': len(programs), 'counted': dict(counted),
            'differ': differ}  # fmt: skip


def table(found: list[dict[str, Any]]) -> str:
    names = sorted({name for one in found for name in one['counted'] if name.startswith('by rule ')})
    head = ['env', 'programs x stages', 'identical', *(f'{n} (rule)' for n in (x[8:] for x in names)), 'differ']
    lines = ['| ' + ' | '.join(head) + ' |', '|' + '---|' * len(head)]
    for one in found:
        counted = one['counted']
        cells = [one['env'], f'{one["programs"]} x {one["stages"]}', counted.get('identical', 0)]
        cells += [counted.get(name, 0) for name in names] + [counted.get('differs', 0)]
        lines.append('| ' + ' | '.join(str(cell) for cell in cells) + ' |')
    return '\n'.join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--out', type=Path, help="write this env's counts here")
    parser.add_argument('--table', type=Path, help="read every env's counts in this folder")
    parser.add_argument('--write', type=Path, help='write the table (Markdown) here')
    parser.add_argument('--stages', default='batch,microbatch', help='the stages to run (comma-separated)')
    parser.add_argument('command', nargs='*', help='a compatshim command to run first, in this process (after --)')
    args = parser.parse_args()
    if args.out:
        ran = 0
        if args.command:
            from compatshim._cli import main as compatshim

            ran = compatshim(args.command)
            if ran == 2:
                return ran
        counts = measure(args.stages.split(','))
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(counts, indent=1) + '\n')
        print(f'conformance with {REFERENCE} on Composer {counts["composer"]}: {counts["counted"]}')
        print('\n\n'.join(counts['differ']))
        return max(ran, 1 if counts['differ'] else 0)
    files = sorted(args.table.glob('*.json')) if args.table else []
    found = [{**json.loads(path.read_text()), 'env': path.stem} for path in files]
    if not found:
        print(f'conformance: no results under {args.table} (tox -m report writes them); no table written')
        return 0
    text = (
        f'# Conformance with Composer {REFERENCE}\n\nEvery program of tests/conformance (every pair of values of any '
        'two axes, every algorithm with every Device in a fit run to its end), with the shim (the monitor imported) '
        f"at the stages counted, against {REFERENCE}'s traces: "
        'identical, or different only under a named rule (docs/how-it-works.md, "Every deliberate difference"); '
        f'{REFERENCE} itself without the shim. The tests run both stages in each family.\n\n' + table(found) + '\n'
    )
    if args.write:
        args.write.parent.mkdir(parents=True, exist_ok=True)
        args.write.write_text(text)
    print(text)
    return 1 if any(one['differ'] for one in found) else 0


if __name__ == '__main__':
    sys.exit(main())
