"""The offline GPU kit: a wheelhouse prepared where there is a registry, installed where there is a GPU and none.

A GPU machine lent for a few minutes has torch preinstalled and no package registry. This kit carries everything
else Composer 0.24.1, 0.26.1 and 0.32.1 need (the reference and one release of two patch families), with pip's own
tools only: ``pip download`` into a wheelhouse from the lock files, ``pip install --no-index --find-links`` over the
machine's torch (``--no-deps``: Composer's torch pins are thereby overridden), then the device tests, ``compatshim
bench`` and ``compatshim report``.

    python matrix/gpu_kit.py prepare --out wheelhouse --python 3.12     # here: the GPU machine's Python
    python3 matrix/gpu_kit.py run --wheelhouse wheelhouse --record-if-missing   # there (the python3 that has torch)
    git add matrix/reports/cuda matrix/baselines/cuda

``prepare`` writes ``<release>.txt`` (the lock file's pins for that Python, without torch, torchvision and their CUDA
runtime) and downloads those wheels (for another Python: binary wheels for ``--platform``) and this checkout's
compatshim wheel. ``run`` makes one venv per release on top of the interpreter that runs it (its torch and whatever
torch requires stay the base's), installs offline, and runs everything; exit 0 when every step passed, 1 otherwise,
2 on bad input (nothing run).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import re
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RELEASES = ('0.24.1', '0.26.1', '0.32.1')
DEVICE_TESTS = ('tests/release/test_placement.py', 'tests/release/test_coherence.py')
#: Never in the wheelhouse: the machine's own torch build and its CUDA runtime.
TORCH_FAMILY = re.compile(r'^(torch|torchvision|torchaudio|triton|pytorch-triton.*|nvidia-.*|cuda-.*)$')


def _norm(name: str) -> str:
    return re.sub(r'[-_.]+', '-', name).lower()


def _pins(release: str, python: str) -> list[str]:
    """``name==version`` lines of a release's lock file whose markers hold on Python ``python``, torch left out."""
    from packaging.requirements import Requirement

    pins = []
    for line in (ROOT / 'matrix' / f'composer{release}.txt').read_text().splitlines():
        if not line.strip() or line.startswith('#'):
            continue
        req = Requirement(line)
        env = {'python_version': python, 'python_full_version': f'{python}.0'}
        if (req.marker is None or req.marker.evaluate(env)) and not TORCH_FAMILY.match(_norm(req.name)):
            pins.append(f'{req.name}{req.specifier}')
    return pins


def prepare(out: Path, releases: tuple[str, ...], python: str, platform: str) -> int:
    out.mkdir(parents=True, exist_ok=True)
    started, pip = time.monotonic(), [sys.executable, '-m', 'pip']
    target = [] if python == f'{sys.version_info.major}.{sys.version_info.minor}' else [
        '--only-binary=:all:', '--python-version', python, '--platform', platform, '--implementation', 'cp',
    ]  # fmt: skip
    for release in releases:  # one pip call per release: releases pin different versions of the same package
        (out / f'{release}.txt').write_text('\n'.join(_pins(release, python)) + '\n')
        subprocess.run(
            [*pip, 'download', '--quiet', '--no-deps', *target, '-d', out, '-r', out / f'{release}.txt'], check=True
        )
    subprocess.run([*pip, 'wheel', '--quiet', '--no-deps', '-w', out, ROOT], check=True)
    size = sum(f.stat().st_size for f in out.iterdir()) / 2**20
    wheels = len(list(out.glob('*.whl')))
    print(f'gpu_kit prepare: {wheels} wheels, {size:.1f} MiB ({time.monotonic() - started:.0f} s)')
    return 0


def _torch_closure() -> set[str]:
    """torch, torchvision and everything they require, as installed in this (base) interpreter: never reinstalled."""
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
        todo += [re.split(r'[ ;<>=!~\[(]', r, maxsplit=1)[0] for r in requires if 'extra ==' not in r]
    return seen


def _step(log: list[str], env: dict[str, str], label: str, *command: str) -> bool:
    started = time.monotonic()
    print(f'gpu_kit: {label} ...', flush=True)
    code = subprocess.run(command, cwd=ROOT, env=env).returncode
    log.append(f'{label}: {"ok" if code == 0 else f"FAILED (exit {code})"} in {time.monotonic() - started:.0f} s')
    print(f'gpu_kit: {log[-1]}', flush=True)
    return code == 0


def run(args: argparse.Namespace, work: Path) -> int:
    """Per release: a venv over this interpreter, the offline install, the device tests, the bench; then the report."""
    started, log, ok, keep_base, results = time.monotonic(), [], True, _torch_closure(), work / 'results'
    results.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(('TOX_', 'COMPATSHIM_')) and k != 'VIRTUAL_ENV'}
    env.update(COMPATSHIM_TEST_DEVICE=args.device, OMP_NUM_THREADS=env.get('OMP_NUM_THREADS', '1'), PIP_NO_INDEX='1')
    for release in args.releases:
        venv, reqs = work / f'venv-{release}', work / f'{release}.txt'
        python = str(venv / 'bin' / 'python')
        pins = (args.wheelhouse / f'{release}.txt').read_text().split()
        reqs.write_text(''.join(f'{p}\n' for p in pins if _norm(re.split('[=<>!~]', p)[0]) not in keep_base))
        pip = [sys.executable, '-m', 'pip', '--python', python, 'install', '-q', '--no-index', '--no-deps']
        make = [sys.executable, '-m', 'venv', '--without-pip', '--system-site-packages', str(venv)]
        if not (
            _step(log, env, f'{release} venv', *make)
            and _see_base(python)
            and _step(log, env, f'{release} install', *pip, '-f', str(args.wheelhouse), '-r', str(reqs), 'compatshim')
        ):
            ok = False
            continue
        if args.tests:
            tests = [python, '-m', 'pytest', '-q', '-p', 'no:cacheprovider', *args.tests]
            ok &= _step(log, env, f'{release} device tests', *tests)
        out = str(results / f'{release}.json')
        size = ['--size', args.size] if args.size else []  # else compatshim bench's default for the device
        bench = ['-m', 'compatshim', 'bench', '--device', args.device, *size, '--out', out]
        ok &= _step(log, env, f'{release} bench ({args.device}, size {args.size or "default"})', python, *bench)
    if list(results.glob('*.json')):
        report = ['-m', 'compatshim', 'report', '--results', str(results), '--baselines', str(args.baselines)]
        report += ['--out', str(args.out)] + (['--record'] if args.record_if_missing else [])
        png = (
            []
            if subprocess.run([python, '-c', 'import matplotlib'], capture_output=True).returncode == 0
            else ['--no-png']
        )
        ok &= _step(log, env, 'report', python, *report, *png)
    print(f'gpu_kit: done in {time.monotonic() - started:.0f} s\n  ' + '\n  '.join(log), flush=True)
    return 0 if ok else 1


def _see_base(python: str) -> bool:
    """Let the venv see this interpreter's packages (its torch) after its own, also when this interpreter is itself a
    venv (``--system-site-packages`` reaches only the base installation's)."""
    where = [python, '-c', 'import sysconfig; print(sysconfig.get_path("purelib"))']
    purelib = subprocess.run(where, capture_output=True, text=True, check=True).stdout.strip()
    ours = {sysconfig.get_path('purelib'), sysconfig.get_path('platlib')}
    (Path(purelib) / '_gpu_kit_base.pth').write_text(''.join(f'{path}\n' for path in sorted(ours)))
    return True


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog='python matrix/gpu_kit.py', description=__doc__.split('\n\n')[0])
    sub = parser.add_subparsers(dest='command', required=True)
    prep = sub.add_parser('prepare', help='download the wheelhouse (needs a registry)')
    prep.add_argument('--out', type=Path, required=True)
    prep.add_argument(
        '--python', default=f'{sys.version_info.major}.{sys.version_info.minor}', help="the GPU machine's Python (X.Y)"
    )
    prep.add_argument('--platform', default='manylinux_2_28_x86_64', help='with another --python: the wheels platform')
    go = sub.add_parser('run', help='install offline and run the device tests, the bench and the report')
    go.add_argument('--wheelhouse', type=Path, required=True)
    go.add_argument('--device', choices=('cuda', 'mps', 'cpu'), default='cuda')
    go.add_argument(
        '--size', choices=('tiny', 'cpu', 'gpu'), help="workload size (default: compatshim bench's for the device)"
    )
    go.add_argument('--tests', default=','.join(DEVICE_TESTS), help='comma-separated test files ("" for none)')
    go.add_argument('--work', type=Path, help='where the venvs and results go (default: a temporary directory)')
    go.add_argument('--out', type=Path, default=ROOT / 'matrix' / 'reports', help='report directory (per device)')
    go.add_argument('--baselines', type=Path, default=ROOT / 'matrix' / 'baselines')
    go.add_argument('--record-if-missing', action='store_true', help='record a baseline where none exists')
    for each in (prep, go):
        each.add_argument('--releases', default=','.join(RELEASES), help='comma-separated Composer releases')
    args = parser.parse_args(argv)
    args.releases = tuple(r for r in args.releases.split(',') if r)
    unknown = [r for r in args.releases if not (ROOT / 'matrix' / f'composer{r}.txt').exists()]
    if unknown or not args.releases:
        parser.error(f'unknown release(s) {", ".join(unknown) or "(none)"}; each needs matrix/composer<release>.txt')
    if args.command == 'prepare':
        return prepare(args.out, args.releases, args.python, args.platform)
    missing = [r for r in args.releases if not (args.wheelhouse / f'{r}.txt').exists()]
    if missing:
        parser.error(f'{args.wheelhouse} has no {", ".join(missing)}.txt: run prepare for those releases first')
    args.tests = [t for t in args.tests.split(',') if t]
    args.wheelhouse, args.out, args.baselines = args.wheelhouse.resolve(), args.out.resolve(), args.baselines.resolve()
    with tempfile.TemporaryDirectory(prefix='compatshim-gpu-kit-') as tmp:
        return run(args, (args.work or Path(tmp)).resolve())


if __name__ == '__main__':
    raise SystemExit(main(sys.argv[1:]))
