"""Run the benchmark legs in one process, interleaved, and measure placement, coherence, bytes moved and throughput.

Legs (see :data:`LEGS`) are real Composer Trainers on the same workload. Two workloads run
(:data:`~compatshim.bench.workload.WORKLOADS`): ``augment``, the timed headline, and ``recipe`` (uint8 batches), which
shows what crosses to the device per leg. A micro-benchmark (:mod:`compatshim.bench.overhead`) measures the shim's own
hook path in microseconds per batch. After :data:`WARMUP` untimed rounds, the legs
take turns, in a shuffled order each round (seeded; a fixed order biased an A/A comparison by ~1% through which leg ran
after which), for ``size.windows`` timing windows; a window is one ``fit(duration='1ep')`` over
``size.steps`` batches, with the device synchronised at its edges only. Headline metrics are ratios of windows taken
in the same round, so machine-wide speed changes cancel out.

Placement and coherence are measured separately, untimed, on an *observable* device: the CPU fake accelerator on cpu
(whose tensors are tagged, and which would make timing meaningless), the real device on cuda/mps.
"""

from __future__ import annotations

import dataclasses
import datetime
import gc
import os
import platform
import random
import sys
import time
from typing import Any, Callable, Optional, TextIO

import torch

import compatshim
from compatshim._api import _installed
from compatshim._support import TESTED_RELEASES, Family, family_of
from compatshim.bench import LEGS
from compatshim.bench import overhead as _overhead
from compatshim.bench.compare import quartiles
from compatshim.bench.workload import SIZES, WORKLOADS, Size, Workload

__all__ = ['LEGS', 'Leg', 'env_name', 'fingerprint', 'plan', 'run', 'summarize']

#: Untimed rounds of every leg before the timed windows (compilation, allocator and cache warm-up).
WARMUP = 2
#: The recipe workload is timed for a quarter of the windows, at least this many (its throughput is reported; its
#: bytes and placement are what it is for).
MIN_RECIPE_WINDOWS = 5


@dataclasses.dataclass(frozen=True)
class Leg:
    """One way of running the workload.

    Attributes:
        name: One of :data:`LEGS`.
        description: How the transform is passed, for the report.
        available: Whether this release has the leg.
        reason: Why not, when unavailable.
        shim: Whether the shim is enabled while the leg runs.
        dataspec: The ``DataSpec`` keyword arguments that pass the transform (none for the no-transform leg).
    """

    name: str
    description: str
    available: bool
    reason: str = ''
    shim: bool = False
    dataspec: Callable[[Any], dict[str, Any]] = dataclasses.field(default=lambda fn: {}, repr=False)


def plan(composer_version: str, workload: Workload = WORKLOADS['augment']) -> list[Leg]:
    """The legs for a Composer release, in :data:`LEGS` order (the ``recipe`` workload has no usable no-transform
    leg: its model cannot train on raw uint8 images)."""
    family = family_of(composer_version)
    affected = family is not None
    native_mb = family in (Family.DROPPED, Family.REJECTED)  # 0.27+: microbatch_transforms exists
    if native_mb:
        unpatched = Leg(
            'unpatched',
            'batch_transforms=fn, the workaround without the shim (host)',
            True,
            dataspec=lambda fn: {'batch_transforms': fn},
        )
    else:
        where = 'host' if affected else 'device'
        unpatched = Leg(
            'unpatched', f'device_transforms=fn, no shim ({where})', True, dataspec=lambda fn: {'device_transforms': fn}
        )
    stage_kw: Callable[[str], dict[str, Any]] = (lambda s: {'data_transfer_stage': s}) if affected else (lambda s: {})
    return [
        unpatched,
        Leg(
            'shim-batch',
            'device_transforms=fn, enable(stage="batch")',
            True,
            shim=True,
            dataspec=lambda fn: {'device_transforms': fn, **stage_kw('batch')},
        ),
        Leg(
            'shim-microbatch',
            'device_transforms=fn, enable(stage="microbatch")',
            affected,
            '' if affected else 'unaffected release: the shim patches nothing, so there is no stage to choose',
            shim=True,
            dataspec=lambda fn: {'device_transforms': fn, **stage_kw('microbatch')},
        ),
        Leg(
            'native-microbatch',
            'microbatch_transforms=fn, no shim (0.27+)',
            native_mb,
            '' if native_mb else 'microbatch_transforms exists from Composer 0.27.0',
            dataspec=lambda fn: {'microbatch_transforms': fn},
        ),
        Leg(
            'no-transform',
            'no transform (the cost floor)',
            workload.raw_batch_trains,
            '' if workload.raw_batch_trains else 'the model cannot train on the raw uint8 batch',
        ),
    ]


def env_name(device: str) -> str:
    """The matrix env this process is: the support-table row of the installed Composer/torch, plus the device."""
    composer, torch_version = _installed('mosaicml') or '?', torch.__version__.split('+')[0]
    python = f'{sys.version_info.major}.{sys.version_info.minor}'
    for row in TESTED_RELEASES:
        if row.composer == composer and row.torch == torch_version and row.python == python:
            return f'{row.env}-{device}'
    return f'composer{composer}-torch{torch_version}-{device}'


def _cpu_model() -> str:
    try:
        with open('/proc/cpuinfo') as info:
            for line in info:
                if line.startswith('model name'):
                    return line.split(':', 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def fingerprint(device: str, size_name: str, size: Size) -> dict[str, Any]:
    """What must match for absolute numbers to be comparable (the load average is recorded, not matched)."""
    gpu = None
    if device == 'cuda':
        gpu = torch.cuda.get_device_name()
    elif device == 'mps':
        gpu = f'Apple MPS ({platform.machine()})'
    return {
        'cpu_model': _cpu_model(),
        'cpu_count': os.cpu_count(),
        'torch_threads': torch.get_num_threads(),
        'gpu': gpu,
        'python': platform.python_version(),
        'torch': torch.__version__,
        'composer': _installed('mosaicml'),
        'compatshim': compatshim.__version__,
        'device': device,
        'size': {'name': size_name, **dataclasses.asdict(size)},
    }


def summarize(samples: list[float]) -> dict[str, Any]:
    """Median, quartiles, IQR, min, max and count of ``samples`` (``None`` fields for an empty list)."""
    if not samples:
        return {'median': None, 'q1': None, 'q3': None, 'iqr': None, 'min': None, 'max': None, 'n': 0}
    q1, median, q3 = quartiles(samples)
    return {
        'median': median,
        'q1': q1,
        'q3': q3,
        'iqr': q3 - q1,
        'min': min(samples),
        'max': max(samples),
        'n': len(samples),
    }


def _composer_device(device: str) -> Any:
    """Composer's own Device for ``device`` (plain ``DeviceCPU`` on cpu: what the timed legs run on)."""
    from composer.devices import DeviceCPU, DeviceGPU, DeviceMPS

    return {'cpu': DeviceCPU, 'cuda': DeviceGPU, 'mps': DeviceMPS}[device]()


def _synchronize(device: str) -> None:
    if device == 'cuda':
        torch.cuda.synchronize()
    elif device == 'mps':
        torch.mps.synchronize()


class _Planted:
    """The transform, made ``fraction`` slower (sleeps that share of each call's time): a planted regression."""

    def __init__(self, fn: Any, fraction: float, device: str) -> None:
        self.fn, self.fraction, self.device = fn, fraction, device

    @property
    def calls(self) -> int:
        return int(self.fn.calls)

    def __call__(self, batch: Any) -> Any:
        start = time.perf_counter()
        out = self.fn(batch)
        _synchronize(self.device)
        time.sleep(self.fraction * (time.perf_counter() - start))
        return out


def _trainer(leg: Leg, device: Any, size: Size, fn: Any, workload: Workload) -> Any:
    from composer import Trainer
    from composer.core import DataSpec
    from composer.optim import DecoupledSGDW

    model = workload.model()
    return Trainer(
        model=model,
        train_dataloader=DataSpec(workload.loader(size), **leg.dataspec(fn)),
        optimizers=DecoupledSGDW(model.parameters(), lr=0.01),
        device=device,
        device_train_microbatch_size=size.microbatch,
        precision='fp32',
        seed=17,
        progress_bar=False,
        log_to_console=False,
    )


def _set_shim(on: bool) -> None:
    # On an unaffected release enable() patches nothing; the shim legs still call it, as a user's script would.
    if on:
        compatshim.enable()
    else:
        compatshim.disable()


def _build(legs: list[Leg], make: Callable[[Leg], Any]) -> dict[str, Any]:
    """Build one object per leg, each with the shim in the state the leg runs with (DataSpecs convert at init)."""
    built = {}
    for leg in legs:
        _set_shim(leg.shim)
        built[leg.name] = make(leg)
    compatshim.disable()
    return built


def _counting_device(device: str) -> tuple[Any, dict[str, int]]:
    """An observable device that counts the bytes, per dtype, of the host tensors it moves."""
    from compatshim.testing import is_on_device, observable_device

    dev = observable_device(device)
    moved: dict[str, int] = {}
    to_device = dev.tensor_to_device

    def counting(tensor: torch.Tensor) -> torch.Tensor:
        if not is_on_device(tensor):
            name = str(tensor.dtype).replace('torch.', '')
            moved[name] = moved.get(name, 0) + tensor.nbytes
        out: torch.Tensor = to_device(tensor)
        return out

    dev.tensor_to_device = counting  # instance attribute: this trainer's device only
    return dev, moved


def _per_step(moved: dict[str, int], steps: int) -> dict[str, int]:
    """Bytes per dtype per step, largest first."""
    return {name: n // steps for name, n in sorted(moved.items(), key=lambda kv: -kv[1]) if n}


def _check(legs: list[Leg], device: str, size: Size, workload: Workload) -> dict[str, dict[str, Any]]:
    """Placement, coherence, calls and host→device bytes per step, from 2 untimed steps on an observable device."""
    from compatshim.testing import PlacementProbe  # imports Composer: only when measuring

    results: dict[str, dict[str, Any]] = {}
    for leg in legs:
        dev, moved = _counting_device(device)
        observed = PlacementProbe(workload.transform(size))
        _set_shim(leg.shim)
        trainer = _trainer(leg, dev, size, observed, workload)
        try:
            trainer.fit(duration='2ba')
        finally:
            compatshim.disable()
            trainer.close()
        calls = len(observed.seen) / 2
        seen = sorted(set(observed.seen))
        if leg.name == 'no-transform':
            placement, coherence = '-', '-'
        elif not seen:
            placement, coherence = 'never called', 'never called'
        else:
            placement = seen[0] if len(seen) == 1 else 'mixed'
            coherence = 'coherent' if calls == 1 else f'per microbatch ({calls:g} calls/step)'
        per_dtype = _per_step(moved, 2)
        results[leg.name] = {
            'placement': placement,
            'coherence': coherence,
            'calls_per_step': calls,
            'h2d_bytes_per_step': sum(per_dtype.values()),
            'h2d_bytes_by_dtype': per_dtype,
        }
    return results


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    line = lines[0] if lines else ''
    return line if len(line) <= 160 else line[:157] + '...'


def _main_dtype(moved: dict[str, int]) -> str:
    """The dtype that carried most bytes (the images; Composer also moves a few scalars)."""
    return max(moved, key=lambda name: moved[name]) if moved else 'nothing'


def _plain(device: str, size: Size, workload: Workload) -> dict[str, Any]:
    """What plain ``DataSpec(device_transforms=fn)`` does on this release without the shim, in words (2 steps)."""
    from compatshim.testing import PlacementProbe  # imports Composer: only when measuring

    dev, moved = _counting_device(device)
    observed = PlacementProbe(workload.transform(size))
    leg = Leg('plain', 'device_transforms=fn, no shim', True, dataspec=lambda fn: {'device_transforms': fn})
    compatshim.disable()
    try:
        trainer = _trainer(leg, dev, size, observed, workload)
    except TypeError as exc:
        return {
            'outcome': 'rejected',
            'words': f'rejected: DataSpec(device_transforms=...) raises TypeError ({_first_line(exc)})',
        }
    try:
        trainer.fit(duration='2ba')
    except Exception as exc:  # noqa: BLE001 (whatever the user's run dies of is the finding)
        ran = 'the transform ran' if observed.seen else 'the transform never ran'
        return {
            'outcome': 'fails',
            'words': f'silently dropped: {ran}, the model got the raw {_main_dtype(moved)} '
            f'batch and training fails ({type(exc).__name__}: {_first_line(exc)})',
        }
    finally:
        trainer.close()
    where = sorted(set(observed.seen))
    per_step = sum(moved.values()) // 2
    if where == ['device']:
        return {
            'outcome': 'device',
            'words': f'runs on the device, after the move: {_main_dtype(moved)} images cross ({per_step} bytes/step)',
        }
    return {
        'outcome': 'host',
        'words': f'runs on the {"/".join(where) or "host"}, before the move: the transformed '
        f'{_main_dtype(moved)} images cross ({per_step} bytes/step)',
    }


def _time(
    legs: list[Leg], trainers: dict[str, Any], device: str, n_windows: int, say: Callable[[str], None], started: float
) -> tuple[dict[str, list[float]], dict[str, int]]:
    """The interleaved timing loop: seconds per window per leg, and peak device bytes per leg (cuda)."""
    windows: dict[str, list[float]] = {leg.name: [] for leg in legs}
    peak: dict[str, int] = {leg.name: 0 for leg in legs}
    # The shim stays enabled for the whole timed loop: toggling it between windows measurably skews the next window
    # (enable() checks Composer's code before patching). The legs without the shim hold DataSpecs built while it was
    # off, i.e. Composer's own objects; the placement check ran them with the shim off.
    compatshim.enable()
    try:
        for window in range(-WARMUP + 1, n_windows + 1):  # windows up to 0 are warm-up
            order = random.Random(window).sample(legs, len(legs))
            for leg in order:
                if device == 'cuda':
                    torch.cuda.reset_peak_memory_stats()
                gc.collect()
                gc.disable()  # as timeit does: no collector pauses inside a window
                try:
                    _synchronize(device)
                    start = time.perf_counter()
                    trainers[leg.name].fit(duration='1ep')
                    _synchronize(device)
                    elapsed = time.perf_counter() - start
                finally:
                    gc.enable()
                if device == 'cuda':
                    peak[leg.name] = max(peak[leg.name], torch.cuda.max_memory_allocated())
                if window > 0:
                    windows[leg.name].append(elapsed)
            say(
                f'window {window}/{n_windows}'
                + (' (warm-up)' if window <= 0 else '')
                + f' ({time.perf_counter() - started:.1f} s)'
            )
    finally:
        compatshim.disable()
        for trainer in trainers.values():
            trainer.close()
    return windows, peak


def _paired(windows: dict[str, list[float]], a: str, b: str) -> list[float]:
    """Per-round throughput ratios a/b (= time b / time a); empty when either leg did not run."""
    if a not in windows or b not in windows:
        return []
    return [tb / ta for ta, tb in zip(windows[a], windows[b])]


def _workload(
    workload: Workload,
    composer_version: str,
    device: str,
    size: Size,
    n_windows: int,
    plant_slowdown: float,
    say: Callable[[str], None],
    started: float,
) -> dict[str, Any]:
    """Check and time every available leg of one workload: the per-leg records and the timing windows."""
    planned = plan(composer_version, workload)
    legs = [leg for leg in planned if leg.available]
    checks = _check(legs, device, size, workload)
    say(f'{workload.name}: placement check done ({time.perf_counter() - started:.1f} s)')
    fns = {leg.name: workload.transform(size) for leg in legs}
    timed: dict[str, Any] = {
        name: (_Planted(fn, plant_slowdown, device) if plant_slowdown and name.startswith('shim') else fn)
        for name, fn in fns.items()
    }
    trainers = _build(legs, lambda leg: _trainer(leg, _composer_device(device), size, timed[leg.name], workload))
    windows, peak = _time(legs, trainers, device, n_windows, lambda msg: say(f'{workload.name}: {msg}'), started)
    samples = size.batch * size.steps
    out: dict[str, Any] = {}
    for leg in planned:
        if not leg.available:
            out[leg.name] = {'available': False, 'description': leg.description, 'reason': leg.reason}
            continue
        throughput = [samples / s for s in windows[leg.name]]
        out[leg.name] = {
            'available': True,
            'description': leg.description,
            **checks[leg.name],
            # Calls per step over the timed windows (the placement check counts the same on its own device).
            'timed_calls_per_step': fns[leg.name].calls / ((n_windows + WARMUP) * size.steps),
            'peak_device_bytes': peak[leg.name] if device == 'cuda' else None,
            'window_s': windows[leg.name],
            'samples_per_s': summarize(throughput),
            'samples_per_s_windows': throughput,
        }
    return {'legs': out, 'windows': windows}


def _hook_overhead(device: str, affected: bool) -> dict[str, Any]:
    """The micro-benchmark of the shim's hook path, per stage (µs per batch), or why there is none."""
    if not affected:
        return {'available': False, 'reason': 'unaffected release: the shim installs no hook'}
    out: dict[str, Any] = {'available': True, 'calls_per_sample': _overhead.CALLS}
    for stage in ('batch', 'microbatch'):
        samples = _overhead.hook_overhead(_composer_device(device), lambda: _synchronize(device), stage)
        out[stage] = {'samples': samples, **summarize(samples)}
    return out


def run(
    device: str = 'cpu',
    size_name: str = 'cpu',
    plant_slowdown: float = 0.0,
    progress: Optional[TextIO] = None,
    plant_hook_us: float = 0.0,
) -> dict[str, Any]:
    """Run every available leg of both workloads and the hook micro-benchmark; return the result record (README,
    "Benchmarks").

    Args:
        device: ``cpu``, ``cuda`` or ``mps``.
        size_name: A key of :data:`~compatshim.bench.workload.SIZES`.
        plant_slowdown: Make the transform this fraction slower in the shim legs (a planted regression, for
            checking that the comparison catches one). 0 for a real measurement.
        progress: Where to print progress lines (``None``: silent).
        plant_hook_us: Make every call of the shim's DataSpec hooks this many microseconds slower (a planted
            regression of the shim's own hook path). 0 for a real measurement.

    Returns:
        A JSON-serialisable dict: env, fingerprint, per-leg placement/coherence/bytes/throughput of the ``augment``
        workload (``legs``) and of the ``recipe`` workload (``recipe``), headline ratios, the hook overhead.
    """
    if size_name not in SIZES:
        raise ValueError(f'compatshim bench: unknown size {size_name!r}; choose one of {", ".join(SIZES)}')
    if device not in ('cpu', 'cuda', 'mps'):
        raise ValueError(f'compatshim bench: unknown device {device!r}; choose one of cpu, cuda, mps')
    if device == 'cuda' and not torch.cuda.is_available():
        raise RuntimeError('compatshim bench: --device cuda, but torch sees no CUDA device')
    if device == 'mps' and not (getattr(torch.backends, 'mps', None) and torch.backends.mps.is_available()):
        raise RuntimeError('compatshim bench: --device mps, but torch sees no MPS device')
    if not 0.0 <= plant_slowdown <= 10.0:
        raise ValueError(f'compatshim bench: plant_slowdown must be between 0 and 10, got {plant_slowdown}')
    if not 0.0 <= plant_hook_us <= 100_000:
        raise ValueError(f'compatshim bench: plant_hook_us must be between 0 and 100000 µs, got {plant_hook_us}')
    size = SIZES[size_name]
    composer_version = _installed('mosaicml')
    if composer_version is None:
        raise compatshim.ComposerNotInstalledError('compatshim bench needs Composer (pip install mosaicml)')
    if compatshim.status().patches:
        raise RuntimeError('compatshim bench: disable the shim first; the bench turns it on and off per leg')

    def say(msg: str) -> None:
        if progress is not None:
            print(msg, file=progress, flush=True)

    env = env_name(device)
    family = family_of(composer_version)
    augment, recipe = WORKLOADS['augment'], WORKLOADS['recipe']
    say(
        f'{env}: legs {", ".join(leg.name for leg in plan(composer_version) if leg.available)}; '
        f'size {size_name}: {size}'
    )

    compatshim.enable()
    patched = list(compatshim.status().patches)  # what enable() patches here (nothing on an unaffected release)
    compatshim.disable()
    started = time.perf_counter()
    try:
        with _overhead.planted_hook_delay(plant_hook_us):
            main = _workload(
                augment,
                composer_version,
                device,
                size,
                size.windows,
                plant_slowdown,
                lambda msg: say(f'{env}: {msg}'),
                started,
            )
            plain = _plain(device, size, recipe)
            recipe_run = _workload(
                recipe,
                composer_version,
                device,
                size,
                max(MIN_RECIPE_WINDOWS, size.windows // 4),
                plant_slowdown,
                lambda msg: say(f'{env}: {msg}'),
                started,
            )
            hook = _hook_overhead(device, family is not None)
            say(f'{env}: hook overhead measured ({time.perf_counter() - started:.1f} s)')
    finally:
        compatshim.disable()  # whatever failed, the bench leaves the shim off, as it found it

    windows = main['windows']
    headline = {
        'shim_vs_unpatched': _paired(windows, 'shim-batch', 'unpatched'),
        'shim_microbatch_vs_unpatched': _paired(windows, 'shim-microbatch', 'unpatched'),
        'shim_vs_no_transform': _paired(windows, 'shim-batch', 'no-transform'),
        'native_microbatch_vs_unpatched': _paired(windows, 'native-microbatch', 'unpatched'),
    }
    recipe_legs = recipe_run['legs']
    shim_bytes = recipe_legs['shim-batch']['h2d_bytes_per_step']
    unpatched_bytes = recipe_legs['unpatched']['h2d_bytes_per_step']
    return {
        'schema': 2,
        'env': env,
        'composer': composer_version,
        'torch': torch.__version__,
        'device': device,
        'family': getattr(family, 'value', 'unaffected'),
        'fingerprint': fingerprint(device, size_name, size),
        'load_average': list(os.getloadavg()) if hasattr(os, 'getloadavg') else None,
        'measured_at': datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds'),
        'planted_slowdown': plant_slowdown,
        'planted_hook_us': plant_hook_us,
        'patched_by_enable': patched,
        'legs': main['legs'],
        'headline': {name: {'windows': values, **summarize(values)} for name, values in headline.items()},
        'recipe': {
            'description': recipe.description,
            'legs': recipe_legs,
            # What plain device_transforms does here without the shim; on 0.27+ the unpatched leg is the host
            # batch_transforms workaround instead, labelled as such in its description.
            'plain_device_transforms': plain,
            'bytes_shim_vs_unpatched': shim_bytes / unpatched_bytes if unpatched_bytes else None,
            'shim_vs_unpatched': summarize(_paired(recipe_run['windows'], 'shim-batch', 'unpatched')),
        },
        'hook_overhead_us': hook,
        'elapsed_s': time.perf_counter() - started,
    }
