"""The offline GPU kit: a small wheelhouse prepared where there is a registry, run where there is a GPU and none.

A GPU machine lent for a few minutes often has torch preinstalled and no package registry. This kit brings everything
else Composer 0.25.0, 0.28.0 and 0.32.1 (one release per affected family) need, as wheels, and runs the cuda test legs
and ``compatshim bench`` (both workloads) on top of the machine's own torch.

    # where there is a registry (a few MB of pure-Python wheels; never torch):
    python matrix/gpu_kit.py prepare --out wheelhouse
    # copy the checkout and wheelhouse/ over, then on the GPU machine (no registry needed):
    python matrix/gpu_kit.py run --wheelhouse wheelhouse            # cuda, workload size gpu
    git add matrix/reports/cuda matrix/baselines/cuda

``prepare`` downloads, with ``--no-deps``, every package pinned in ``matrix/composer<release>.txt`` except torch,
torchvision and their CUDA runtime, plus this checkout's compatshim wheel; it keeps the pure-Python wheels and, with
``--binary``, also the compiled ones for this interpreter (for a base that lacks numpy & co).

``run`` makes, per release, a venv on top of the interpreter that runs it (``--system-site-packages``: the machine's
torch), installs the wheelhouse's wheels into it with ``--no-index --no-deps`` (Composer's torch pins are thereby
overridden), and never touches torch or anything torch itself requires (those stay the base's). Then, in that venv:
the device test legs (``COMPATSHIM_TEST_DEVICE``), ``compatshim bench`` against ``matrix/baselines`` (recording a
baseline where none exists, never overwriting one), and finally ``compatshim report`` into
``matrix/reports/<device>/``. Exit 0 when every step passed, 1 otherwise, 2 on bad input (nothing run).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RELEASES = ('0.25.0', '0.28.0', '0.32.1')
#: The device test legs: placement, coherence, microbatch stage and batch shapes on the device under test.
DEVICE_TESTS = (
    'tests/test_placement.py',
    'tests/test_coherence.py',
    'tests/test_microbatch_stage.py',
    'tests/test_batch_shapes.py',
)
#: Never in the wheelhouse: the machine's own torch build and its CUDA runtime.
TORCH_FAMILY = re.compile(r'^(torch|torchvision|torchaudio|triton|pytorch-triton.*|nvidia-.*|cuda-.*)$')
MANIFEST = 'manifest.json'


def _norm(name: str) -> str:
    return re.sub(r'[-_.]+', '-', name).lower()


def _this_python() -> str:
    return f'{sys.version_info.major}.{sys.version_info.minor}'


def _marker_holds(marker: str, python: str) -> bool:
    """Whether an environment marker of a lock line holds on Python ``python`` (this platform otherwise)."""
    try:
        from packaging.markers import Marker
    except ImportError:  # a bare base environment: pip's own copy
        from pip._vendor.packaging.markers import Marker
    return bool(Marker(marker).evaluate({'python_version': python, 'python_full_version': f'{python}.0'}))


def _pins(release: str, python: str) -> dict[str, str]:
    """``{normalised name: version}`` of a release's lock file on Python ``python``, without the torch family."""
    pins = {}
    for line in (ROOT / 'matrix' / f'composer{release}.txt').read_text().splitlines():
        line = line.strip()
        if not line or line.startswith('#'):
            continue
        requirement, _, marker = line.partition(';')
        if marker.strip() and not _marker_holds(marker.strip(), python):
            continue
        name, _, version = requirement.strip().partition('==')
        if not TORCH_FAMILY.match(_norm(name)):
            pins[_norm(name)] = version.strip()
    return pins


def _wheel_name(filename: str) -> tuple[str, str, bool]:
    """(normalised name, version, pure) of a wheel file name."""
    parts = filename[: -len('.whl')].split('-')
    return _norm(parts[0]), parts[1], parts[-2:] == ['none', 'any'] or parts[-1] == 'any'


def _fetch_for_other_python(out: Path, pins: dict[str, str], python: str) -> None:
    """Pure-Python wheels of ``pins`` for Python ``python``, one package at a time (a compiled-only one is skipped
    here and left to the target's base environment; a pure sdist is built into a wheel)."""
    pip = [sys.executable, '-m', 'pip']
    for name, version in pins.items():
        pure = subprocess.run(
            [
                *pip,
                'download',
                '--quiet',
                '--no-deps',
                '--only-binary=:all:',
                '--python-version',
                python,
                '--implementation',
                'py',
                '--abi',
                'none',
                '--platform',
                'any',
                '-d',
                str(out),
                f'{name}=={version}',
            ],
            capture_output=True,
        )
        if pure.returncode != 0:  # no pure wheel: a pure sdist builds one; a compiled package gives a binary, dropped
            subprocess.run(
                [
                    *pip,
                    'wheel',
                    '--quiet',
                    '--no-deps',
                    '--ignore-requires-python',
                    '-w',
                    str(out),
                    f'{name}=={version}',
                ],
                capture_output=True,
            )


def prepare(out: Path, releases: tuple[str, ...], binary: bool, python: str) -> int:
    """Download the wheels (``--no-deps``) for Python ``python`` and write the manifest."""
    if binary and python != _this_python():
        print(
            f'gpu_kit prepare: --binary needs --python {_this_python()} (compiled wheels are for this interpreter)',
            file=sys.stderr,
        )
        return 2
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    pip = [sys.executable, '-m', 'pip', 'wheel', '--quiet', '--no-deps', '--find-links', str(out), '-w', str(out)]
    with tempfile.TemporaryDirectory() as tmp:
        for release in releases:  # one pip call per release: releases pin different versions of the same package
            if python != _this_python():
                _fetch_for_other_python(out, _pins(release, python), python)
                continue
            reqs = Path(tmp) / f'{release}.txt'
            reqs.write_text(''.join(f'{name}=={version}\n' for name, version in _pins(release, python).items()))
            subprocess.run([*pip, '-r', str(reqs)], check=True)
        subprocess.run([*pip, str(ROOT)], check=True)
    kept, dropped = [], []
    for wheel in sorted(out.glob('*.whl')):
        name, _, pure = _wheel_name(wheel.name)
        if pure or (binary and python == _this_python()):
            kept.append(wheel.name)
        else:
            dropped.append(name)
            wheel.unlink()
    manifest = {
        'releases': {r: _pins(r, python) for r in releases},
        'wheels': kept,
        'binary_left_to_the_base': dropped,
        'python': python,
    }
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1) + '\n')
    size = sum(f.stat().st_size for f in out.glob('*.whl'))
    print(
        f'gpu_kit prepare: {len(kept)} wheels, {size / 2**20:.1f} MiB in {out} ({time.monotonic() - started:.0f} s)'
        + (f'; compiled, left to the base environment: {", ".join(dropped)}' if dropped else '')
    )
    return 0


def _torch_closure() -> set[str]:
    """torch, torchvision and everything they require, as installed in this (base) interpreter."""
    seen: set[str] = set()
    todo = ['torch', 'torchvision']
    while todo:
        name = _norm(todo.pop())
        if name in seen:
            continue
        try:
            requires = importlib.metadata.requires(name) or []
        except importlib.metadata.PackageNotFoundError:
            continue
        seen.add(name)
        todo += [re.match(r'[A-Za-z0-9._-]+', r).group(0) for r in requires if 'extra ==' not in r]
    return seen


def _plan(wheelhouse: Path, release: str) -> tuple[list[Path], list[str], list[str]]:
    """(wheels to install, packages left to the base, packages missing everywhere) for one release."""
    manifest = json.loads((wheelhouse / MANIFEST).read_text())
    pins = manifest['releases'].get(release)
    if pins is None:
        raise ValueError(f'the wheelhouse has no release {release}; it has {", ".join(manifest["releases"])}')
    by_name = {}
    for wheel in wheelhouse.glob('*.whl'):
        name, version, _ = _wheel_name(wheel.name)
        by_name[(name, version)] = wheel
    torch_needs = _torch_closure()
    wheels, from_base, missing = [], [], []
    for name, version in sorted(pins.items()):
        if name in torch_needs:
            from_base.append(name)
        elif (name, version) in by_name:
            wheels.append(by_name[(name, version)])
        else:
            try:
                importlib.metadata.version(name)
                from_base.append(name)
            except importlib.metadata.PackageNotFoundError:
                missing.append(f'{name}=={version}')
    own = sorted(wheelhouse.glob('compatshim-*.whl'))
    if not own:
        raise ValueError('the wheelhouse has no compatshim wheel (run prepare from this checkout)')
    return wheels + own[-1:], from_base, missing


def _step(label: str, command: list[str], env: dict[str, str], log: list[str]) -> bool:
    started = time.monotonic()
    print(f'gpu_kit: {label} ...', flush=True)
    code = subprocess.run(command, cwd=ROOT, env=env).returncode
    line = f'{label}: {"ok" if code == 0 else f"FAILED (exit {code})"} in {time.monotonic() - started:.0f} s'
    print(f'gpu_kit: {line}', flush=True)
    log.append(line)
    return code == 0


def run(
    wheelhouse: Path,
    releases: tuple[str, ...],
    device: str,
    size: str,
    tests: tuple[str, ...],
    work: Path,
    out: Path,
    baselines: Path,
) -> int:
    """Per release: venv on this interpreter's site-packages, install offline, device tests, bench; then the report."""
    made_for = json.loads((wheelhouse / MANIFEST).read_text()).get('python')
    if made_for != _this_python():
        print(
            f'gpu_kit: WARNING: the wheelhouse was prepared for Python {made_for}, this is {_this_python()} '
            f'(prepare --python {_this_python()})',
            file=sys.stderr,
        )
    plans = {}
    for release in releases:
        try:
            wheels, from_base, missing = _plan(wheelhouse, release)
        except ValueError as exc:
            print(f'gpu_kit: {exc}; nothing was run', file=sys.stderr)
            return 2
        if missing:  # compiled packages this interpreter lacks: Composer may not import them; the tests will tell
            print(
                f'gpu_kit: WARNING: {release}: neither the wheelhouse nor this environment has {", ".join(missing)} '
                '(prepare with --binary on an interpreter like this one to carry them)',
                file=sys.stderr,
            )
        plans[release] = (wheels, from_base)
    started = time.monotonic()
    log: list[str] = []
    ok = True
    results = work / 'results'
    results.mkdir(parents=True, exist_ok=True)
    for release in releases:
        wheels, from_base = plans[release]
        venv = work / f'venv-{release}'
        shutil.rmtree(venv, ignore_errors=True)
        print(
            f'gpu_kit: Composer {release}: {len(wheels)} wheels; from the base environment: {", ".join(from_base)}',
            flush=True,
        )
        python = str(venv / 'bin' / 'python')
        env = {k: v for k, v in os.environ.items() if not k.startswith(('TOX_', 'COMPATSHIM_')) and k != 'VIRTUAL_ENV'}
        env.update(
            {
                'COMPATSHIM_TEST_DEVICE': device,
                'OMP_NUM_THREADS': env.get('OMP_NUM_THREADS', '1'),
                'PYTHONHASHSEED': '0',
                'PIP_NO_INDEX': '1',
                'PIP_DISABLE_PIP_VERSION_CHECK': '1',
            }
        )
        # No pip inside the venv (a base without ensurepip still works): this interpreter's pip installs into it.
        if not (
            _step(
                f'{release} venv',
                [sys.executable, '-m', 'venv', '--without-pip', '--system-site-packages', str(venv)],
                env,
                log,
            )
            and _see_base(venv)
            and _step(
                f'{release} install',
                [
                    sys.executable,
                    '-m',
                    'pip',
                    '--python',
                    python,
                    'install',
                    '--quiet',
                    '--no-index',
                    '--no-deps',
                    *map(str, wheels),
                ],
                env,
                log,
            )
        ):
            ok = False
            continue
        if tests:
            ok &= _step(
                f'{release} device tests ({device})',
                [python, '-m', 'pytest', '-q', '-p', 'no:cacheprovider', *tests],
                env,
                log,
            )
        bench = [
            python,
            '-m',
            'compatshim',
            'bench',
            '--device',
            device,
            '--size',
            size,
            '--baselines',
            str(baselines),
            '--out',
            str(results / f'{release}.json'),
        ]
        probe = subprocess.run(
            [
                python,
                '-c',
                'from compatshim.bench import run, compare; import sys; '
                f'sys.exit(compare.baseline_path({str(baselines)!r}, "{device}", '
                f'run.env_name("{device}")).exists())',
            ],
            cwd=ROOT,
            env=env,
        )
        if probe.returncode == 0:  # no baseline yet for this env: record one (never overwrites)
            bench.append('--record')
        ok &= _step(f'{release} bench ({device}, size {size})', bench, env, log)
    found = sorted(map(str, results.glob('*.json')))
    if found:
        report_python = str(work / f'venv-{releases[-1]}' / 'bin' / 'python')
        ok &= _step(
            'report',
            [report_python, '-m', 'compatshim', 'report', '--out', str(out), *found]
            + ([] if _has_matplotlib(report_python) else ['--no-png']),
            os.environ.copy(),
            log,
        )
    print(f'gpu_kit: done in {time.monotonic() - started:.0f} s\n  ' + '\n  '.join(log), flush=True)
    return 0 if ok and found else 1


def _see_base(venv: Path) -> bool:
    """Let the venv see this interpreter's packages (its torch) after its own, also when this interpreter is itself a
    venv (``--system-site-packages`` only reaches the base installation's)."""
    purelib = subprocess.run(
        [str(venv / 'bin' / 'python'), '-c', 'import sysconfig; print(sysconfig.get_path("purelib"))'],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    ours = {sysconfig.get_path('purelib'), sysconfig.get_path('platlib')}
    (Path(purelib) / '_compatshim_gpu_kit_base.pth').write_text(''.join(f'{path}\n' for path in sorted(ours)))
    return True


def _has_matplotlib(python: str) -> bool:
    return subprocess.run([python, '-c', 'import matplotlib'], capture_output=True).returncode == 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog='python matrix/gpu_kit.py', description=__doc__.split('\n\n')[0])
    sub = parser.add_subparsers(dest='command', required=True)
    prep = sub.add_parser('prepare', help='download the wheelhouse (needs a registry)')
    prep.add_argument('--out', type=Path, required=True)
    prep.add_argument('--releases', default=','.join(RELEASES))
    prep.add_argument('--binary', action='store_true', help='also keep compiled wheels for this interpreter')
    prep.add_argument(
        '--python',
        default=_this_python(),
        metavar='X.Y',
        help="the GPU machine's Python (default: this one); pure-Python wheels only when it differs",
    )
    go = sub.add_parser('run', help='install offline and run the device tests, the bench and the report')
    go.add_argument('--wheelhouse', type=Path, required=True)
    go.add_argument('--releases', default=','.join(RELEASES))
    go.add_argument('--device', choices=('cuda', 'mps', 'cpu'), default='cuda')
    go.add_argument('--size', choices=('tiny', 'cpu', 'gpu'), help='workload size (default: gpu, cpu on cpu)')
    go.add_argument('--tests', default=','.join(DEVICE_TESTS), help='comma-separated test files ("" for none)')
    go.add_argument('--work', type=Path, help='where the venvs and results go (default: a temporary directory)')
    go.add_argument('--out', type=Path, help='report directory (default: matrix/reports/<device>)')
    go.add_argument(
        '--baselines',
        type=Path,
        default=Path('matrix/baselines'),
        help='baseline directory; a baseline is recorded where none exists (default: matrix/baselines)',
    )
    args = parser.parse_args(argv)
    releases = tuple(r.strip() for r in args.releases.split(',') if r.strip())
    unknown = [r for r in releases if not (ROOT / 'matrix' / f'composer{r}.txt').exists()]
    if unknown or not releases:
        parser.error(f'unknown release(s) {", ".join(unknown) or "(none given)"}; each needs matrix/composer<r>.txt')
    if args.command == 'prepare':
        if not re.fullmatch(r'3\.\d+', args.python):
            parser.error(f'--python takes a version like 3.12, got {args.python!r}')
        return prepare(args.out, releases, args.binary, args.python)
    if not (args.wheelhouse / MANIFEST).exists():
        parser.error(f'{args.wheelhouse} is not a wheelhouse from `prepare` (no {MANIFEST})')
    size = args.size or ('cpu' if args.device == 'cpu' else 'gpu')
    tests = tuple(t for t in args.tests.split(',') if t)
    out = args.out or ROOT / 'matrix' / 'reports' / args.device
    with tempfile.TemporaryDirectory(prefix='compatshim-gpu-kit-') as tmp:
        work = args.work.resolve() if args.work else Path(tmp)
        return run(
            args.wheelhouse.resolve(), releases, args.device, size, tests, work, out.resolve(), args.baselines.resolve()
        )


if __name__ == '__main__':
    raise SystemExit(main(sys.argv[1:]))
