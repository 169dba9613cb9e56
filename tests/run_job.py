"""A training script that never calls ``compatshim.enable()`` (unless ``--enable``), for ``compatshim run`` tests.

``python run_job.py OUT.json [--enable] [--child spawn|forkserver] [--workers]``

Records what this process had imported before it imported Composer, trains one step (batch 8, microbatches of 4)
with a probe ``device_transforms`` — here, or in a ``multiprocessing`` child started by ``--child`` — and writes what
the probe and the model saw, the shim's status and the warnings given to OUT.json.
"""

from __future__ import annotations

import json
import multiprocessing
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

HEAVY = ('torch', 'composer', 'compatshim')
SEEN: list[str] = []  # the shim's warnings, also printed to stderr as usual


def _show(message, category, filename, lineno, file=None, line=None):
    if 'compatshim' in str(message):
        SEEN.append(f'{category.__name__}: {message}')
    sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))


warnings.showwarning = _show
warnings.simplefilter('always')


def heavy_modules() -> list[str]:
    return sorted({name.split('.')[0] for name in sys.modules} & set(HEAVY))


def worker_modules(worker_id: int) -> None:
    """A dataloader worker's init: record what the worker process imported (it should not be Composer)."""
    out = Path(sys.argv[1]).with_suffix(f'.worker{worker_id}.json')
    out.write_text(json.dumps({'modules': heavy_modules()}))


def train(enable: bool, workers: bool) -> dict:
    if enable:
        import compatshim

        compatshim.enable()
    from composer.core import DataSpec
    from conftest_device import make_device
    from workload import Probe, loader, steps, trainer

    import compatshim

    probe = Probe()
    kwargs = {'num_workers': 1, 'multiprocessing_context': 'spawn', 'worker_init_fn': worker_modules} if workers else {}
    t, recorder = trainer(
        make_device(),
        train_dataloader=DataSpec(loader(8, **kwargs), device_transforms=probe),
        max_duration='1ba',
        device_train_microbatch_size=4,
    )
    t.fit()
    status = compatshim.status()
    draws = steps(recorder, 2)[0][:, 0].tolist()
    return {
        'placements': [c.placement for c in probe.calls],
        'coherent': len(probe.calls) == 1 and set(draws) == {probe.calls[0].draw},
        'verdict': status.verdict.value,
        'stage': status.stage,
        'patches': list(status.patches),
        'warnings': SEEN,
    }


def child(out: str, queue: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    start = heavy_modules()
    try:
        queue.put({'child_start_modules': start, **train(enable=False, workers=False)})
    except Exception as exc:  # noqa: BLE001 - reported to the parent (0.29+ without the shim: TypeError)
        queue.put({'child_start_modules': start, 'placements': [f'error: {type(exc).__name__}: {exc}']})


def main() -> None:
    out = Path(sys.argv[1])
    args = sys.argv[2:]
    hook = any(type(f).__name__ == 'ComposerImportHook' for f in sys.meta_path)
    result = {
        'start_modules': heavy_modules(),
        'hook_armed': hook,
        'chained': bool(getattr(sys.modules.get('sitecustomize'), 'CHAINED', False)),
    }
    if '--child' in args:
        context = multiprocessing.get_context(args[args.index('--child') + 1])
        queue = context.Queue()
        process = context.Process(target=child, args=(str(out), queue))
        process.start()
        result.update(queue.get(timeout=300))
        process.join(timeout=60)
        result['parent_end_modules'] = heavy_modules()
    else:
        result.update(train(enable='--enable' in args, workers='--workers' in args))
    out.write_text(json.dumps(result))


if __name__ == '__main__':
    main()
