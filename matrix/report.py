"""The harness's main job: run the benchmark legs in every matrix env of a device and write the report.

``tox -e report`` runs this (``tox -e report -- --help`` for the options). For each env it runs
``compatshim bench`` inside that env (``tox run`` with the env's commands overridden, which builds the env and
installs this checkout first), compares with
``matrix/baselines/<device>/<env>.json``, then aggregates every result into ``matrix/reports/<device>/``:
``report.md``, ``report.json`` and the charts
(``throughput.png``, ``ratios.png``, ``bytes.png``). Exit 0 when nothing regressed, 1 on a regression or an env that
failed, 2 on bad arguments.

    tox -e report                         # every cpu env, compared with the recorded cpu baselines
    tox -e report -- --device cuda        # the same on cuda (needs a GPU)
    tox -e report -- --record             # record baselines for envs that have none (never overwrites)
    tox -e report -- --envs composer0.28.0 --plant-slowdown 0.2   # check that a regression is caught
    tox -e report -- --envs composer0.28.0 --plant-hook-us 50     # ... and one of 50 µs in the shim's hook path
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from compatshim._support import DEFAULT_PYTHON, TESTED_RELEASES
from compatshim.bench import report

ROOT = Path(__file__).resolve().parent.parent
DEVICES = ('cpu', 'cuda', 'mps')


def _clean_env() -> dict[str, str]:
    """This process's environment without the outer tox env's markers, for the nested ``tox run``."""
    return {k: v for k, v in os.environ.items() if not k.startswith('TOX_') and k != 'VIRTUAL_ENV'}


def _bench(env: str, args: argparse.Namespace, out: Path, prefix: str) -> int:
    baselines = os.path.relpath(args.baselines, ROOT)  # the bench runs in ROOT; reports name no machine paths
    bench = ['compatshim', 'bench', '--device', args.device, '--baselines', baselines, '--out', str(out)]
    if args.size:
        bench += ['--size', args.size]
    if args.record:
        bench += ['--record'] + (['--replace'] if args.replace else [])
    if args.plant_slowdown:
        bench += ['--plant-slowdown', str(args.plant_slowdown)]
    if args.plant_hook_us:
        bench += ['--plant-hook-us', str(args.plant_hook_us)]
    # `tox run` with the env's commands overridden: tox builds the env and installs this checkout's wheel first
    # (`tox exec` would skip the package install and bench a stale compatshim).
    command = [sys.executable, '-m', 'tox', 'run', '-q', '-e', env, '-x', f'testenv.commands={shlex.join(bench)}']
    proc = subprocess.Popen(
        command, cwd=ROOT, env=_clean_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    log = []
    assert proc.stdout is not None
    for line in proc.stdout:
        log.append(line)
        # The bench's own progress lines start with the env name; the rest (installs, warnings) stays quiet.
        if (
            line.startswith(env)
            and (': window' in line or 'placement check' in line or 'hook overhead' in line)
            or 'recorded baseline' in line
        ):
            print(f'{prefix} {line.strip()}', flush=True)
    code = proc.wait()
    if code not in (0, 1):
        print(f'{prefix} FAILED (exit {code}); last output:\n' + ''.join(log[-40:]), flush=True)
    return code


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog='tox -e report --', description=__doc__.split('\n\n')[0])
    parser.add_argument('--device', choices=DEVICES, default='cpu')
    parser.add_argument('--envs', help='comma-separated env prefixes (default: every row of the support table)')
    parser.add_argument('--size', choices=('tiny', 'cpu', 'gpu'), help='workload size (default: by device)')
    parser.add_argument('--record', action='store_true', help='record baselines where none exist')
    parser.add_argument('--replace', action='store_true', help='with --record: overwrite existing baselines')
    parser.add_argument(
        '--plant-slowdown',
        type=float,
        default=0.0,
        metavar='FRACTION',
        help='make the transform this much slower in the shim legs (a planted regression)',
    )
    parser.add_argument(
        '--plant-hook-us',
        type=float,
        default=0.0,
        metavar='MICROSECONDS',
        help="make every call of the shim's own hooks this much slower (a planted regression)",
    )
    parser.add_argument('--baselines', type=Path, default=ROOT / 'matrix' / 'baselines')
    parser.add_argument('--out', type=Path, help='report directory (default: matrix/reports/<device>)')
    args = parser.parse_args(argv)
    # The benchmark runs on the default Python; the Python factor's envs are for the tests.
    rows = [row.env for row in TESTED_RELEASES if row.python == DEFAULT_PYTHON]
    chosen = rows if not args.envs else [e.strip() for e in args.envs.split(',') if e.strip()]
    unknown = [e for e in chosen if e not in rows]
    if unknown:
        parser.error(f'unknown env(s) {", ".join(unknown)}; choose from {", ".join(rows)}')
    out_dir = args.out or ROOT / 'matrix' / 'reports' / args.device
    envs = [f'{prefix}-{args.device}' for prefix in chosen]
    results, failed = [], []
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix='compatshim-report-') as tmp:
        for i, env in enumerate(envs, 1):
            prefix = f'[{i}/{len(envs)} {time.monotonic() - started:4.0f} s]'
            print(f'{prefix} {env}: building the env if needed, then benchmarking', flush=True)
            path = Path(tmp) / f'{env}.json'
            code = _bench(env, args, path, prefix)
            if path.exists():
                result = json.loads(path.read_text())
                results.append(result)
                head = result['headline']['shim_vs_unpatched']
                print(
                    f'{prefix} {env}: shim/unpatched {head["median"]:.3f}, worst verdict '
                    f'{result["comparison"]["worst"]} ({result["elapsed_s"]:.0f} s)',
                    flush=True,
                )
            if code not in (0, 1) or not path.exists():
                failed.append(env)
    written = report.write(results, out_dir)
    if failed:
        with open(out_dir / 'report.md', 'a') as md:
            md.write('\n## Envs that failed\n\n' + ''.join(f'- {env}\n' for env in failed))
    print(
        f'wrote {out_dir.relative_to(ROOT) if out_dir.is_relative_to(ROOT) else out_dir}/report.md, report.json, '
        f'{", ".join(report.CHARTS)} in {time.monotonic() - started:.0f} s: {len(results)} env(s), worst verdict '
        f'{written["worst"]}' + (f', FAILED: {", ".join(failed)}' if failed else '')
    )
    return 1 if failed or written['worst'] == 'regression' else 0


if __name__ == '__main__':
    raise SystemExit(main(sys.argv[1:]))
