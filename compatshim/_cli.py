"""The ``compatshim`` command: ``run``, ``doctor``, ``bench`` and ``report``. Heavy imports happen in each command."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

from compatshim import _exits
from compatshim.config import settings
from compatshim.config.stages import STAGES
from compatshim.config.support import DEVICES
from compatshim.errors import CompatShimWarning, ConfigurationError

__all__ = ['main']


def _run_command(args: argparse.Namespace) -> int:
    from compatshim._bootstrap import child_environment

    command = list(args.command)
    if command[:1] == ['--']:
        command = command[1:]
    if not command:
        return _error(
            'compatshim run: no command given; usage: compatshim run [--stage batch|microbatch] '
            '[--allow-untested] [--monitor[=strict]] -- COMMAND [ARGS...]'
        )
    try:
        env = child_environment(os.environ, args.stage, args.allow_untested, args.monitor)
    except ConfigurationError as exc:
        return _refuse('run', str(exc))
    try:
        os.execvpe(command[0], command, env)  # replaces this process with the command, looked up on PATH
    except OSError as exc:  # exec never happened: as a shell, 126 for a command that cannot run, 127 for none
        print(f'compatshim run: cannot run {command[0]!r}: {exc.strerror or exc}', file=sys.stderr)
        return _exits.NOT_FOUND if isinstance(exc, FileNotFoundError) else _exits.CANNOT_RUN


def _doctor_command(args: argparse.Namespace) -> int:
    from compatshim import doctor

    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter('always')
            report = doctor.diagnose(args.device, stage=args.stage, allow_untested=args.allow_untested or None)
    except ConfigurationError as exc:
        return _refuse('doctor', str(exc))
    for found in caught:  # a command line says it in one line (an ignored setting), not in Python's warning format
        if issubclass(found.category, CompatShimWarning):
            print(f'{found.message} (compatshim doctor)', file=sys.stderr)
        else:
            warnings.showwarning(found.message, found.category, found.filename, found.lineno)
    print(json.dumps(report, indent=2) if args.json else doctor.text(report))
    return int(report['exit_code'])


#: The pipeline bench's own options, and the reference bench's it does not take.
_PIPELINE_ONLY = ('json', 'save', 'compare', 'dir', 'quick', 'steps', 'rounds')
_REFERENCE_ONLY = ('size', 'out', 'baselines', 'plant_slowdown', 'plant_hook_us', 'plant_work', 'plant_tensor_us')


def _given(args: argparse.Namespace, names: Sequence[str]) -> list[str]:
    """The options of ``names`` given on the command line: not at the parser's own default."""
    defaults = parser().parse_args(['bench'])
    return ['--' + n.replace('_', '-') for n in names if getattr(args, n) != getattr(defaults, n)]


def _pipeline_command(args: argparse.Namespace) -> int:
    """``compatshim bench --pipeline MODULE:CALLABLE``: bad input is one line and exit 2, before anything runs."""
    wrong = _given(args, _REFERENCE_ONLY)
    if wrong:
        return _error(
            f'compatshim bench: --pipeline does not take {", ".join(wrong)} (those are for the reference workload); '
            'it takes --device, --quick, --steps, --rounds, --json, --save, --compare, --dir'
        )
    try:
        from compatshim.bench import pipeline

        own = args.quick or args.steps is not None or args.rounds is not None or not args.compare  # else baseline's
        size = pipeline.size_of('quick' if args.quick else 'default', args.steps, args.rounds) if own else None
        baselines = pipeline.Baselines(args.compare, args.save, args.dir)
        gated = pipeline.gate_pipeline(
            args.pipeline, device=args.device, size=size, baselines=baselines, progress=sys.stderr
        )
    except (ValueError, RuntimeError, ImportError) as exc:
        return _error(f'compatshim bench: {exc} (nothing was measured)')
    print(pipeline.pipeline_text(gated.result, time.perf_counter() - args.started))
    _write_json(args.json, gated.result)
    for line in gated.lines:
        print(line)
    return gated.code


def _bench_command(args: argparse.Namespace) -> int:
    if args.pipeline:
        return _pipeline_command(args)
    wrong = _given(args, _PIPELINE_ONLY)
    if wrong:
        which = f'{wrong[0]} is' if len(wrong) == 1 else f'{", ".join(wrong)} are'
        return _error(f'compatshim bench: {which} for --pipeline MODULE:CALLABLE only (none was given)')
    if args.baselines and not Path(args.baselines).is_dir():
        return _error(f'compatshim bench: --baselines {args.baselines}: no such directory (nothing measured)')
    try:
        from compatshim.bench import reference
        from compatshim.bench.workload import default_size

        if args.size is None:
            args.size = settings.bench_size() or default_size(args.device)
        result = reference.bench_reference(
            args.device,
            args.size,
            plant_slowdown=args.plant_slowdown,
            plant_hook_us=args.plant_hook_us,
            plant_work=bool(args.plant_work),
            plant_tensor_us=args.plant_tensor_us,
            progress=sys.stderr,
        )
    except (ValueError, RuntimeError, ImportError) as exc:
        return _error(f'compatshim bench: {exc}')
    _write_json(args.out, result)
    from compatshim.bench import report  # what it measured (the judging is compatshim report's)

    planted = f', {result.planted_text}' if result.planted else ''
    took = report.seconds(result, time.perf_counter() - args.started)
    head = f'{result.env} ({result.family}), size {result.fingerprint["size"]["name"]}, {took}{planted}'
    print(report.bench_text(result, head, report.reference_lines(result)))
    if not args.baselines:
        return _exits.OK
    from compatshim.bench import gate

    code, lines = gate.against_baselines(result, args.baselines)
    for line in lines:
        print(line)
    return code


def _report_inputs(args: argparse.Namespace) -> tuple[list[Any], list[str]]:
    """The results ``compatshim report`` judges, and every problem with its input, the results' first: a result that
    cannot be read, none at all, no baselines directory (unless recording), no matplotlib for the charts, a setting."""
    from compatshim.bench import results
    from compatshim.config.support import split_env

    found, problems = results.read(args.results)
    if args.envs:
        wanted = set(args.envs.split(','))
        found = [r for r in found if r.env in wanted or split_env(r.env)[0] in wanted]
    if not found and not problems:
        envs = f' of {args.envs}' if args.envs else ''
        problems.append(
            f'no bench results{envs} in {", ".join(args.results)}; measure them first (tox -m report, or compatshim '
            'bench --out DIR/ENV.json)'
        )
    if not Path(args.baselines).is_dir() and not args.record:  # --record makes it: the first baselines of a device
        problems.append(f'--baselines {args.baselines}: no such directory (--record writes the first baselines there)')
    elif not (args.record and args.replace):  # unless it replaces them: a baseline measured another way is refused
        from compatshim.bench import gate

        problems += gate.refused(found, args.baselines)
    if not args.no_png and importlib.util.find_spec('matplotlib') is None:
        problems.append('the charts need matplotlib (pip install "compatshim[bench]"); or pass --no-png')
    problems += [problem.removeprefix('compatshim: ') for problem in getattr(args, 'setting_problems', [])]
    return found, problems


def _report_command(args: argparse.Namespace) -> int:
    """``compatshim report``: every precondition checked first and every problem said in one message, the results'
    first (exit 2, nothing written); then judge (:mod:`compatshim.bench.gate`), write, record, and print."""
    found, problems = _report_inputs(args)
    if len(problems) == 1:
        return _error(f'compatshim report: {problems[0]} (nothing was judged)')
    if problems:
        return _error(
            f'compatshim report: nothing was judged; {len(problems)} problems:\n  - ' + '\n  - '.join(problems)
        )
    from compatshim.bench import gate, report

    judging = gate.judge_all(found, args.baselines, record=args.record, replace=args.replace)
    for device, entries in judging.judged.items():
        written = report.write(entries, Path(args.out) / device, device, png=not args.no_png)
        for entry in entries:
            print(f'{entry.result.env}: {entry.worst}')
        print(f'wrote {written}/report.md, report.json' + ('' if args.no_png else ', ' + ', '.join(report.CHARTS)))
    for line in gate.record_baselines(found, args.baselines, args.replace) if args.record else []:
        print(line)
    for line in judging.summary():  # the last lines of a failed run: env, metric, baseline, current, threshold
        print(line)
    return judging.code


#: What each command did not do when it refuses its input.
_NOTHING = {'run': 'run', 'doctor': 'checked', 'bench': 'measured', 'report': 'judged'}


def _refuse(command: str, message: str) -> int:
    return _error(f'{message} (compatshim {command}: nothing was {_NOTHING[command]})')


def _error(line: str) -> int:
    """Say why nothing was done, on stderr: exit 2."""
    print(line, file=sys.stderr)
    return _exits.NOT_DONE


def _write_json(path: Optional[str], result: Any) -> None:
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(result.to_json(), indent=1) + '\n')


def _standing_in(args: argparse.Namespace) -> dict[str, str]:
    """The variables for which an argument on this command line stands in, as it was written (a bad value in one of
    them is ignored, and said in one line)."""
    given = {}
    if getattr(args, 'stage', None):
        given[settings.STAGE_VAR] = f'--stage {args.stage}'
    if getattr(args, 'allow_untested', False):
        given[settings.ALLOW_UNTESTED_VAR] = '--allow-untested'
    if getattr(args, 'monitor', None):
        given[settings.MONITOR_VAR] = '--monitor' + ('=strict' if args.monitor == 'strict' else '')
    if getattr(args, 'size', None):
        given[settings.BENCH_SIZE_VAR] = f'--size {args.size}'
    return given


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of the ``compatshim`` console script and ``python -m compatshim``. Every command checks every
    ``COMPATSHIM_`` variable first, before it imports or runs anything: a value that is not allowed is one line and
    exit 2 (``compatshim report`` says it with its other preconditions, in one message)."""
    started = time.perf_counter()  # what a bench's head says the command took (importing compatshim: milliseconds)
    args = parser().parse_args(argv)
    args.started = started
    problems, ignored = settings.check_environment(os.environ, _standing_in(args))
    if args.subcommand != 'doctor':  # the doctor says an ignored variable itself, as enable() warns of it
        for line in ignored:
            print(f'{line} (compatshim {args.subcommand})', file=sys.stderr)
    if problems and args.subcommand != 'report':  # the report says them with its other preconditions
        return _refuse(args.subcommand, settings.one_message(problems))
    args.setting_problems = problems
    return int(args.func(args))


def parser() -> argparse.ArgumentParser:
    """The ``compatshim`` command's parser, every subcommand and option (the docs' CLI reference renders it)."""
    top = argparse.ArgumentParser(
        prog='compatshim', description="Composer's device_transforms on the accelerator again, and the means to see it."
    )
    from compatshim import __version__

    top.add_argument('--version', action='version', version=f'compatshim {__version__}')
    sub = top.add_subparsers(dest='subcommand', required=True)
    _run_parser(sub)
    _doctor_parser(sub)
    _bench_parser(sub)
    _report_parser(sub)
    return top


def _run_parser(sub: Any) -> None:
    command = sub.add_parser(
        'run',
        usage='compatshim run [--stage S] [--allow-untested] [--monitor[=strict]] -- COMMAND [ARGS...]',
        help='run a command with the shim enabled in every Python process that imports Composer',
        description='Run COMMAND with the shim enabled in every Python process of the run that imports Composer '
        '(launcher ranks, multiprocessing children, subprocesses), without editing any script.',
    )
    command.add_argument(
        '--stage',
        choices=STAGES,
        help='the default stage of every enable() in the run, as COMPATSHIM_STAGE (default: batch)',
    )
    command.add_argument(
        '--allow-untested',
        action='store_true',
        help='patch a Composer newer than the support table if its code has a known shape',
    )
    command.add_argument(
        '--monitor',
        nargs='?',
        const='on',
        choices=('on', 'strict'),
        help='attach a TransformMonitor to every Trainer of the run (=strict: fail a step whose device_transforms is '
        'not on the device)',
    )
    command.add_argument('command', nargs=argparse.REMAINDER, metavar='-- COMMAND [ARGS...]')
    command.set_defaults(func=_run_command)


def _doctor_parser(sub: Any) -> None:
    doctor = sub.add_parser('doctor', help='am I affected, and does the shim fix it here?')
    doctor.add_argument('--json', action='store_true', help='print the findings as JSON')
    doctor.add_argument('--device', choices=DEVICES, help='device for the self-check (default: best)')
    doctor.add_argument(
        '--stage',
        choices=STAGES,
        help="stage the self-check enables (default: this process's, else COMPATSHIM_STAGE, else batch)",
    )
    doctor.add_argument(
        '--allow-untested',
        action='store_true',
        help='check a Composer release outside the support table (as enable(allow_untested=True))',
    )
    doctor.set_defaults(func=_doctor_command)


def _bench_parser(sub: Any) -> None:
    bench = sub.add_parser(
        'bench',
        help='measure the legs on this release: the reference workload, or your own pipeline (--pipeline)',
        description='Measure with and without the shim on the installed Composer: the reference workload (placement, '
        "bytes, same-run ratios, compatshim's own cost), or, with --pipeline, your own pipeline, leg by leg, with "
        "the verdicts (the shim's factor, batch vs microbatch, input-bound) and a baseline to gate your CI on.",
    )
    bench.add_argument(
        '--device',
        choices=DEVICES,
        default='cpu',
        help='where the legs run: cpu (the fake accelerator: placement and bytes observable, no GPU needed), cuda or '
        'mps (default: cpu)',
    )
    bench.add_argument(
        '--pipeline',
        metavar='MODULE:CALLABLE',
        help='your pipeline: a callable (the current directory on the path) returning a compatshim.bench.Pipeline or '
        'a mapping of dataloader, transform[, model, microbatch_size, get_num_samples_in_batch]',
    )
    _pipeline_options(bench)
    _reference_options(bench)
    bench.set_defaults(func=_bench_command)


def _pipeline_options(bench: argparse.ArgumentParser) -> None:
    """``compatshim bench --pipeline``'s own options (:data:`_PIPELINE_ONLY`)."""
    bench.add_argument(
        '--quick',
        action='store_true',
        help='--pipeline: 3 rounds of 4 steps, which gate placement, calls, bytes and work only, no timing (12-15 s '
        "on a quiet 2-core machine, Composer's import included)",
    )
    bench.add_argument(
        '--steps', type=int, metavar='N', help='--pipeline: steps per window (default 20; a heavy model needs fewer)'
    )
    bench.add_argument(
        '--rounds', type=int, metavar='N', help='--pipeline: timed rounds (default 8; 5 at least for timings to gate)'
    )
    bench.add_argument('--json', metavar='FILE', help='--pipeline: write the result as JSON')
    bench.add_argument('--save', metavar='NAME', help='--pipeline: save the result as the baseline NAME')
    bench.add_argument(
        '--compare',
        metavar='NAME',
        help='--pipeline: judge the result against the baseline NAME (exit 1 when something worsened)',
    )
    bench.add_argument(
        '--dir', metavar='DIR', help='--pipeline: where baselines are kept (default: .compatshim/benchmarks)'
    )


def _reference_options(bench: argparse.ArgumentParser) -> None:
    """The reference bench's own options (:data:`_REFERENCE_ONLY`)."""
    bench.add_argument(
        '--size',
        choices=settings.BENCH_SIZES,
        help='workload size (default: COMPATSHIM_BENCH_SIZE, else cpu on cpu, gpu on cuda/mps)',
    )
    bench.add_argument('--out', metavar='FILE', help='write the result as JSON (compatshim report reads it)')
    bench.add_argument(
        '--baselines',
        metavar='DIR',
        help='also judge the result against its baseline in DIR (exit 1 on a regression, or when DIR holds baselines '
        'of this device but none of this env)',
    )
    bench.add_argument(
        '--plant-slowdown',
        type=float,
        default=0.0,
        metavar='FRACTION',
        help='make the transform this much slower in the shim legs (checks the gate)',
    )
    bench.add_argument(
        '--plant-work',
        type=int,
        choices=(0, 1),
        default=0,
        help="1: make both workloads' transforms one op heavier over a tenth of each batch (checks the work gate)",
    )
    bench.add_argument(
        '--plant-hook-us',
        type=float,
        default=0.0,
        metavar='MICROSECONDS',
        help="make every call of the shim's own hooks this much slower (checks the gate)",
    )
    bench.add_argument(
        '--plant-tensor-us',
        type=float,
        default=0.0,
        metavar='MICROSECONDS',
        help="make the monitor's byte counter this much slower per tensor moved (checks the gate)",
    )


def _report_parser(sub: Any) -> None:
    report = sub.add_parser(
        'report',
        help='judge bench results against the baselines and write the report (exit 1 on a regression)',
        description='Judge bench results (files, directories of them, or a report.json: judged again under this '
        "checkout's rule) against the baselines, and write OUT/<device>/report.md, report.json and the charts.",
    )
    report.add_argument('--results', nargs='+', required=True, metavar='PATH', help='result files or directories')
    report.add_argument('--baselines', required=True, metavar='DIR', help='baseline directory (e.g. matrix/baselines)')
    report.add_argument('--out', required=True, metavar='DIR', help='report directory (e.g. matrix/reports)')
    report.add_argument('--envs', help='only these envs (comma-separated, e.g. composer0.28.0 or composer0.28.0-cpu)')
    report.add_argument('--record', action='store_true', help='record each result as its baseline where none exists')
    report.add_argument('--replace', action='store_true', help='with --record: overwrite existing baselines')
    report.add_argument('--no-png', action='store_true', help='skip the charts (no matplotlib needed)')
    report.set_defaults(func=_report_command)
