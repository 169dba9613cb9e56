"""A training script that never calls ``compatshim.enable()`` (unless ``--enable``), for the ``compatshim run`` tests.

    python run_job.py OUT.json [--enable | --auto] [--workers] [--children spawn,forkserver]

One process checks everything it can, and reports it all in OUT.json: what it had imported at start (before it
imports Composer), whether the import hook is armed and an existing ``sitecustomize`` still ran, then one training
step (batch 8, microbatches of 4) with a probe ``device_transforms`` here — with dataloader workers started by
``spawn`` if ``--workers`` — and then the same step in each ``multiprocessing`` child asked for. Per process: where the
probe saw its batches, coherence, the shim's status and warnings, whether Composer was imported from source, and what
an in-run monitor attached without a code edit (``compatshim run --monitor``, ``COMPATSHIM_MONITOR``) said.
"""

from __future__ import annotations

import json
import multiprocessing
import sys
import warnings
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

HEAVY = ('torch', 'composer', 'compatshim')
SEEN: list[str] = []  # the shim's warnings, also printed to stderr as usual


def _show(message: Any, category: Any, filename: str, lineno: int, file: Any = None, line: Any = None) -> None:
    if 'compatshim' in str(message):
        SEEN.append(f'{category.__name__}: {message}')
    sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))


warnings.showwarning = _show
warnings.simplefilter('always')


def heavy_modules() -> list[str]:
    return sorted({name.split('.')[0] for name in sys.modules} & set(HEAVY))


def worker_modules(worker_id: int) -> None:
    """A dataloader worker's init: record what the worker process imported (it should not be Composer)."""
    Path(sys.argv[1]).with_suffix(f'.worker{worker_id}.json').write_text(json.dumps(heavy_modules()))


def train(enable: bool, workers: bool, auto: bool = False) -> dict[str, Any]:
    """One step with a probe; what it saw. Errors (0.29+ without the shim: TypeError) are reported, not raised."""
    try:
        if enable:
            import compatshim

            compatshim.enable()
        if auto:
            import compatshim.auto  # enables the shim by being imported
        import inspect

        import composer
        from composer.core import DataSpec
        from composer.trainer.trainer import Trainer
        from device import make_device
        from workload import Probe, loader, steps, trainer

        import compatshim

        try:
            inspect.getsource(Trainer._train_loop)
            has_source = True
        except (OSError, TypeError):
            has_source = False
        probe = Probe()
        kwargs = dict(num_workers=1, multiprocessing_context='spawn', worker_init_fn=worker_modules) if workers else {}
        t, recorder = trainer(
            make_device(),
            train_dataloader=DataSpec(loader(8, **kwargs), device_transforms=probe),
            max_duration='1ba',
            device_train_microbatch_size=4,
        )
        t.fit()
    except Exception as exc:  # noqa: BLE001 - the finding
        return {'error': f'{type(exc).__name__}: {exc}', 'placements': [], 'warnings': SEEN}
    status = compatshim.status()
    draws = steps(recorder, 2)[0][:, 0].tolist()
    return {
        'placements': [c.placement for c in probe.calls],
        'coherent': len(probe.calls) == 1 and set(draws) == {probe.calls[0].draw},
        'verdict': status.verdict.value,
        'stage': status.stage,
        'patches': list(status.patches),
        'warnings': SEEN,
        'composer_file': composer.__file__,
        'has_source': has_source,
        # what a TransformMonitor attached by compatshim run --monitor (or COMPATSHIM_MONITOR) said, if there is one
        'monitor': [
            {'line': s.line, 'where': {n: t.where for n, t in s.transforms.items()}}
            for cb in t.state.callbacks
            if type(cb).__name__ == 'TransformMonitor'
            for s in cb.summaries
        ],
    }


def child(queue: Any) -> None:
    start = heavy_modules()
    queue.put({'start_modules': start, **train(enable=False, workers=False)})


def main() -> None:
    out = Path(sys.argv[1])
    args = sys.argv[2:]
    result: dict[str, Any] = {
        'start_modules': heavy_modules(),
        'hook_armed': any(type(f).__name__ == 'ComposerImportHook' for f in sys.meta_path),
        'chained': bool(getattr(sys.modules.get('sitecustomize'), 'CHAINED', False)),
    }
    result['main'] = train(enable='--enable' in args, workers='--workers' in args, auto='--auto' in args)
    if '--workers' in args:
        result['worker_modules'] = json.loads(out.with_suffix('.worker0.json').read_text())
    children = args[args.index('--children') + 1].split(',') if '--children' in args else []
    for method in children:
        context = multiprocessing.get_context(method)
        queue = context.Queue()
        process = context.Process(target=child, args=(queue,))
        process.start()
        result[method] = queue.get(timeout=300)
        process.join(timeout=60)
    out.write_text(json.dumps(result))


if __name__ == '__main__':
    main()
