"""The ``compatshim`` command: ``run``, ``doctor``, ``bench`` and ``report``. Heavy imports happen in each command."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

from compatshim._stages import STAGES

__all__ = ['main']

EXIT_OK, EXIT_REGRESSION, EXIT_ERROR = 0, 1, 2
EXIT_NOT_FOUND = 127


def _run(args: argparse.Namespace) -> int:
    from compatshim._bootstrap import child_environment, exec_command

    command = list(args.command)
    if command[:1] == ['--']:
        command = command[1:]
    if not command:
        print(
            'compatshim run: no command given; usage: compatshim run [--stage batch|microbatch] '
            '[--allow-untested] -- COMMAND [ARGS...]',
            file=sys.stderr,
        )
        return EXIT_ERROR
    try:
        env = child_environment(os.environ, args.stage, args.allow_untested)
    except ValueError as exc:
        print(f'{exc} (compatshim run: nothing was run)', file=sys.stderr)
        return EXIT_ERROR
    try:
        exec_command(command, env)
    except OSError as exc:  # FileNotFoundError, PermissionError: exec never happened
        print(f'compatshim run: cannot run {command[0]!r}: {exc.strerror or exc}', file=sys.stderr)
        return EXIT_NOT_FOUND


def _doctor(args: argparse.Namespace) -> int:
    from compatshim import doctor

    report = doctor.run(args.device, stage=args.stage, allow_untested=args.allow_untested or None)
    print(json.dumps(report, indent=2) if args.json else doctor.text(report))
    return int(report['exit_code'])


def _summary(result: dict[str, Any]) -> str:
    planted = (f', PLANTED slowdown {result["planted_slowdown"]:.0%}' if result['planted_slowdown'] else '') + (
        f', PLANTED hook delay {result["planted_hook_us"]:g} µs' if result.get('planted_hook_us') else ''
    )
    lines = [
        f'{result["env"]} ({result["family"]}), size {result["fingerprint"]["size"]["name"]}, '
        f'{result["elapsed_s"]:.0f} s' + planted
    ]
    lines.append(f'  {"leg":18}{"placement":14}{"coherence":34}{"samples/s":>16}')
    for leg, data in result['legs'].items():
        if not data['available']:
            lines.append(f'  {leg:18}n/a: {data["reason"]}')
            continue
        thr = data['samples_per_s']
        lines.append(
            f'  {leg:18}{data["placement"]:14}{data["coherence"]:34}{thr["median"]:>9.0f} ± {thr["iqr"]:<5.0f}'
        )
    head = result['headline']
    from compatshim.bench.compare import RATIO_METRICS

    for metric in RATIO_METRICS:
        if head[metric]['n']:
            lines.append(f'  {metric:30} {head[metric]["median"]:.3f} (IQR {head[metric]["iqr"]:.3f})')
    hook = result['hook_overhead_us']
    if hook['available']:
        lines.append(
            f'  {"shim hook overhead":30} '
            + ', '.join(
                f'{stage} {hook[stage]["median"]:.1f} µs/batch (IQR {hook[stage]["iqr"]:.1f})'
                for stage in ('batch', 'microbatch')
            )
        )
    else:
        lines.append(f'  {"shim hook overhead":30} n/a: {hook["reason"]}')
    recipe = result['recipe']
    if recipe['bytes_shim_vs_unpatched'] is not None:
        lines.append(
            f'  {"recipe: bytes shim/unpatched":30} {recipe["bytes_shim_vs_unpatched"]:.2f} '
            f'({recipe["legs"]["shim-batch"]["h2d_bytes_per_step"]} vs '
            f'{recipe["legs"]["unpatched"]["h2d_bytes_per_step"]} bytes/step)'
        )
    lines.append(f'  {"recipe: plain device_transforms":30} {recipe["plain_device_transforms"]["words"]}')
    comparison = result.get('comparison')
    if comparison:
        lines.append(f'  baseline: {comparison["baseline"] or "none"} -> worst verdict: {comparison["worst"]}')
        if comparison.get('drift'):
            lines.append(
                f'  machine drift: the legs that run no shim code moved {comparison["drift"]["change"]:+.1%} '
                '(reported, not a regression; the ratios decide)'
            )
        for metric, judgement in comparison['verdicts'].items():
            if judgement['verdict'] != 'ok':
                lines.append(f'    {metric}: {judgement["verdict"]} ({judgement["reason"]})')
    return '\n'.join(lines)


def _bench(args: argparse.Namespace) -> int:
    from compatshim.bench import compare as cmp
    from compatshim.bench import run

    if args.record and not args.baselines:
        print('compatshim bench: --record needs --baselines DIR', file=sys.stderr)
        return EXIT_ERROR
    if args.record and (args.plant_slowdown or args.plant_hook_us):
        print('compatshim bench: a run with a planted slowdown cannot be recorded as a baseline', file=sys.stderr)
        return EXIT_ERROR
    if args.record and not args.replace:
        existing = cmp.baseline_path(args.baselines, args.device, run.env_name(args.device))
        if existing.exists():
            print(
                f'compatshim bench: a baseline exists at {existing}; pass --replace to overwrite it (nothing was run)',
                file=sys.stderr,
            )
            return EXIT_ERROR
    try:
        result = run.run(
            args.device,
            args.size,
            plant_slowdown=args.plant_slowdown,
            progress=sys.stderr,
            plant_hook_us=args.plant_hook_us,
        )
    except (ValueError, RuntimeError, ImportError) as exc:
        print(exc, file=sys.stderr)
        return EXIT_ERROR
    _judge(result, args.baselines)
    code = EXIT_REGRESSION if result['comparison']['worst'] == 'regression' else EXIT_OK
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=1) + '\n')
    print(_summary(result))
    if args.record:
        try:
            path = cmp.record_baseline(result, args.baselines, replace=args.replace)
        except (cmp.BaselineExistsError, ValueError) as exc:
            print(exc, file=sys.stderr)
            return EXIT_ERROR
        print(f'  recorded baseline {path}')
    return code


def _judge(result: dict[str, Any], baselines: Optional[str]) -> None:
    """Set ``result['comparison']``: every metric judged against the env's baseline under ``baselines`` (if any)."""
    from compatshim.bench import compare as cmp

    baseline = cmp.load_baseline(baselines, result['device'], result['env']) if baselines else None
    result['comparison'] = cmp.compare(result, baseline)
    result['comparison']['baseline'] = (
        str(cmp.baseline_path(baselines, result['device'], result['env'])) if baselines and baseline else None
    )


def _report(args: argparse.Namespace) -> int:
    from compatshim.bench import report

    results = []
    for name in args.results:
        try:
            data = json.loads(Path(name).read_text())
        except (OSError, ValueError) as exc:
            print(f'compatshim report: cannot read bench result {name}: {exc}', file=sys.stderr)
            return EXIT_ERROR
        # A bench result, or a whole report.json (its results: to re-judge a recorded run under today's rule).
        got = data.get('results') if isinstance(data, dict) and 'legs' not in data else [data]
        if not isinstance(got, list) or not all(isinstance(r, dict) and 'legs' in r and 'env' in r for r in got):
            print(
                f'compatshim report: {name} is neither a bench result (compatshim bench --out) nor a report.json',
                file=sys.stderr,
            )
            return EXIT_ERROR
        results.extend(got)
    if args.rejudge:
        if not Path(args.rejudge).is_dir():
            print(f'compatshim report: --rejudge {args.rejudge}: no such baselines directory', file=sys.stderr)
            return EXIT_ERROR
        for result in results:
            _judge(result, args.rejudge)
    written = report.write(results, args.out, png=not args.no_png)
    print(
        f'wrote {args.out}/report.md, report.json{"" if args.no_png else ", " + ", ".join(report.CHARTS)}: '
        f'{len(results)} env(s), worst verdict {written["worst"]}'
    )
    return EXIT_REGRESSION if written['worst'] == 'regression' else EXIT_OK


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of the ``compatshim`` console script and ``python -m compatshim``."""
    parser = argparse.ArgumentParser(prog='compatshim', description='Composer device_transforms compatibility shim.')
    sub = parser.add_subparsers(dest='subcommand', required=True)

    run = sub.add_parser(
        'run',
        help='run a command with the shim enabled in every Python process that imports Composer',
        description='Run COMMAND with the shim enabled in every Python process of the run that imports Composer '
        '(launcher ranks, multiprocessing children, subprocesses), without editing any script.',
    )
    run.add_argument('--stage', choices=STAGES, default=None, help='default stage (default: batch)')
    run.add_argument(
        '--allow-untested',
        action='store_true',
        help='patch a Composer newer than the support table if its code has a known shape',
    )
    run.add_argument('command', nargs=argparse.REMAINDER, metavar='-- COMMAND [ARGS...]')
    run.set_defaults(func=_run)

    doctor = sub.add_parser('doctor', help='am I affected, and does the shim fix it here?')
    doctor.add_argument('--json', action='store_true', help='print the findings as JSON')
    doctor.add_argument('--device', choices=('cpu', 'cuda', 'mps'), help='device for the self-check (default: best)')
    doctor.add_argument(
        '--stage',
        choices=STAGES,
        default=None,
        help="stage the self-check enables (default: this process's, else batch)",
    )
    doctor.add_argument(
        '--allow-untested',
        action='store_true',
        help='check a Composer release outside the support table (as enable(allow_untested=True))',
    )
    doctor.set_defaults(func=_doctor)

    bench = sub.add_parser('bench', help='measure the legs on this release and compare with a baseline')
    bench.add_argument('--device', choices=('cpu', 'cuda', 'mps'), default='cpu')
    bench.add_argument(
        '--size',
        choices=('tiny', 'cpu', 'gpu'),
        default=None,
        help='workload size (default: cpu on cpu, gpu on cuda/mps)',
    )
    bench.add_argument('--baselines', metavar='DIR', help='baseline directory (e.g. matrix/baselines)')
    bench.add_argument('--record', action='store_true', help='record this run as the baseline (never overwrites)')
    bench.add_argument('--replace', action='store_true', help='with --record: overwrite an existing baseline')
    bench.add_argument('--out', metavar='FILE', help='write the result (with its comparison) as JSON')
    bench.add_argument(
        '--plant-slowdown',
        type=float,
        default=0.0,
        metavar='FRACTION',
        help='make the transform this much slower in the shim legs (checks the comparison)',
    )
    bench.add_argument(
        '--plant-hook-us',
        type=float,
        default=0.0,
        metavar='MICROSECONDS',
        help="make every call of the shim's own hooks this much slower (checks the overhead gate)",
    )
    bench.set_defaults(func=_bench)

    rep = sub.add_parser('report', help='aggregate bench results into report.md, report.json and the charts')
    rep.add_argument('results', nargs='+', metavar='RESULT.json')
    rep.add_argument('--out', metavar='DIR', required=True)
    rep.add_argument('--no-png', action='store_true', help='skip the plot (no matplotlib needed)')
    rep.add_argument(
        '--rejudge',
        metavar='BASELINES',
        help="judge every result again, under this checkout's rule, against the baselines in BASELINES "
        '(e.g. matrix/baselines): how a change of the rule is checked against recorded runs, in seconds',
    )
    rep.set_defaults(func=_report)

    args = parser.parse_args(argv)
    if args.subcommand == 'bench' and args.size is None:
        args.size = 'cpu' if args.device == 'cpu' else 'gpu'
    return int(args.func(args))


if __name__ == '__main__':
    sys.exit(main())
