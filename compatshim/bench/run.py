"""Run the benchmark legs in one process, interleaved, and measure placement, coherence and throughput.

Legs (see :data:`LEGS`) are real Composer Trainers on the same workload. After :data:`WARMUP` untimed rounds, the legs
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
import time
from typing import Any, Callable, Optional, TextIO

import torch

import compatshim
from compatshim._api import _installed
from compatshim._support import TESTED_RELEASES, Family, family_of
from compatshim.bench import LEGS
from compatshim.bench.compare import quartiles
from compatshim.bench.workload import SIZES, Augment, Size, bench_loader, bench_model

__all__ = ['LEGS', 'Leg', 'env_name', 'fingerprint', 'plan', 'run', 'summarize']

#: Untimed rounds of every leg before the timed windows (compilation, allocator and cache warm-up).
WARMUP = 2


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


def plan(composer_version: str) -> list[Leg]:
    """The legs for a Composer release, in :data:`LEGS` order."""
    family = family_of(composer_version)
    affected = family is not None
    native_mb = family in (Family.DROPPED, Family.REJECTED)  # 0.27+: microbatch_transforms exists
    if native_mb:
        unpatched = Leg('unpatched', 'batch_transforms=fn, the workaround without the shim (host)', True,
                        dataspec=lambda fn: {'batch_transforms': fn})
    else:
        where = 'host' if affected else 'device'
        unpatched = Leg('unpatched', f'device_transforms=fn, no shim ({where})', True,
                        dataspec=lambda fn: {'device_transforms': fn})
    stage_kw: Callable[[str], dict[str, Any]] = (lambda s: {'data_transfer_stage': s}) if affected else (lambda s: {})
    return [
        unpatched,
        Leg('shim-batch', 'device_transforms=fn, enable(stage="batch")', True, shim=True,
            dataspec=lambda fn: {'device_transforms': fn, **stage_kw('batch')}),
        Leg('shim-microbatch', 'device_transforms=fn, enable(stage="microbatch")', affected,
            '' if affected else 'unaffected release: the shim patches nothing, so there is no stage to choose',
            shim=True, dataspec=lambda fn: {'device_transforms': fn, **stage_kw('microbatch')}),
        Leg('native-microbatch', 'microbatch_transforms=fn, no shim (0.27+)', native_mb,
            '' if native_mb else 'microbatch_transforms exists from Composer 0.27.0', dataspec=lambda fn: {
                'microbatch_transforms': fn}),
        Leg('no-transform', 'no transform (the cost floor)', True),
    ]


def env_name(device: str) -> str:
    """The matrix env this process is: the support-table row of the installed Composer/torch, plus the device."""
    composer, torch_version = _installed('mosaicml') or '?', torch.__version__.split('+')[0]
    for row in TESTED_RELEASES:
        if row.composer == composer and row.torch == torch_version:
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
    return {'median': median, 'q1': q1, 'q3': q3, 'iqr': q3 - q1, 'min': min(samples), 'max': max(samples),
            'n': len(samples)}


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

    def __init__(self, fn: Augment, fraction: float, device: str) -> None:
        self.fn, self.fraction, self.device = fn, fraction, device

    @property
    def calls(self) -> int:
        return self.fn.calls

    def __call__(self, batch: Any) -> Any:
        start = time.perf_counter()
        out = self.fn(batch)
        _synchronize(self.device)
        time.sleep(self.fraction * (time.perf_counter() - start))
        return out


class _Observed:
    """Wraps the transform for the placement check: records where each call saw the batch."""

    def __init__(self, fn: Augment) -> None:
        from compatshim.testing import placement

        self.fn = fn
        self.placement = placement
        self.placements: list[str] = []

    def __call__(self, batch: Any) -> Any:
        self.placements.append(self.placement(batch))
        return self.fn(batch)


def _trainer(leg: Leg, device: Any, size: Size, fn: Any) -> Any:
    from composer import Trainer
    from composer.core import DataSpec
    from composer.optim import DecoupledSGDW

    model = bench_model()
    kwargs = leg.dataspec(fn)
    return Trainer(
        model=model,
        train_dataloader=DataSpec(bench_loader(size), **kwargs),
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


def _check(legs: list[Leg], device: str, size: Size) -> dict[str, dict[str, Any]]:
    """Placement, coherence, calls and host→device bytes per step, from 2 untimed steps on an observable device."""
    from compatshim.testing import is_on_device, observable_device

    results: dict[str, dict[str, Any]] = {}
    for leg in legs:
        dev = observable_device(device)
        moved = [0]
        to_device = dev.tensor_to_device

        def counting(tensor: torch.Tensor, _to: Any = to_device, _moved: list = moved) -> torch.Tensor:
            if not is_on_device(tensor):
                _moved[0] += tensor.nbytes
            return _to(tensor)

        dev.tensor_to_device = counting  # instance attribute: this trainer's device only
        observed = _Observed(Augment(size.blur))
        _set_shim(leg.shim)
        trainer = _trainer(leg, dev, size, observed)
        try:
            trainer.fit(duration='2ba')
        finally:
            compatshim.disable()
            trainer.close()
        calls = len(observed.placements) / 2
        seen = sorted(set(observed.placements))
        if leg.name == 'no-transform':
            placement, coherence = '-', '-'
        elif not seen:
            placement, coherence = 'never called', 'never called'
        else:
            placement = seen[0] if len(seen) == 1 else 'mixed'
            coherence = 'coherent' if calls == 1 else f'per microbatch ({calls:g} calls/step)'
        results[leg.name] = {'placement': placement, 'coherence': coherence, 'calls_per_step': calls,
                             'h2d_bytes_per_step': moved[0] // 2}
    return results


def _time(legs: list[Leg], trainers: dict[str, Any], device: str, size: Size, say: Callable[[str], None],
          started: float) -> tuple[dict[str, list[float]], list[float], dict[str, int]]:
    """The interleaved timing loop: seconds per window per leg, seconds per direct transform call, peak bytes."""
    windows: dict[str, list[float]] = {leg.name: [] for leg in legs}
    direct: list[float] = []
    peak: dict[str, int] = {leg.name: 0 for leg in legs}
    direct_fn = Augment(size.blur)
    direct_batch = _composer_device(device).batch_to_device(list(next(iter(bench_loader(size)))))
    # The shim stays enabled for the whole timed loop: toggling it between windows measurably skews the next window
    # (enable() checks Composer's code before patching). The legs without the shim hold DataSpecs built while it was
    # off, i.e. Composer's own objects; the placement check ran them with the shim off.
    compatshim.enable()
    try:
        for window in range(-WARMUP + 1, size.windows + 1):  # windows up to 0 are warm-up
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
            _synchronize(device)
            start = time.perf_counter()
            for _ in range(size.steps):
                direct_fn(direct_batch)
            _synchronize(device)
            if window > 0:
                direct.append((time.perf_counter() - start) / size.steps)
            say(f'window {window}/{size.windows}' + (' (warm-up)' if window <= 0 else '') +
                f' ({time.perf_counter() - started:.1f} s)')
    finally:
        compatshim.disable()
        for trainer in trainers.values():
            trainer.close()
    return windows, direct, peak


def run(
    device: str = 'cpu',
    size_name: str = 'cpu',
    plant_slowdown: float = 0.0,
    progress: Optional[TextIO] = None,
) -> dict[str, Any]:
    """Run every available leg and return the result record (see the README's "Benchmarks" section).

    Args:
        device: ``cpu``, ``cuda`` or ``mps``.
        size_name: A key of :data:`~compatshim.bench.workload.SIZES`.
        plant_slowdown: Make the transform this fraction slower in the shim legs (a planted regression, for
            checking that the comparison catches one). 0 for a real measurement.
        progress: Where to print progress lines (``None``: silent).

    Returns:
        A JSON-serialisable dict: env, fingerprint, per-leg placement/coherence/throughput, headline ratios.
    """
    if size_name not in SIZES:
        raise ValueError(f'compatshim bench: unknown size {size_name!r}; choose one of {", ".join(SIZES)}')
    if device == 'cuda' and not torch.cuda.is_available():
        raise RuntimeError('compatshim bench: --device cuda, but torch sees no CUDA device')
    if device == 'mps' and not (getattr(torch.backends, 'mps', None) and torch.backends.mps.is_available()):
        raise RuntimeError('compatshim bench: --device mps, but torch sees no MPS device')
    if device not in ('cpu', 'cuda', 'mps'):
        raise ValueError(f'compatshim bench: unknown device {device!r}; choose one of cpu, cuda, mps')
    if not 0.0 <= plant_slowdown <= 10.0:
        raise ValueError(f'compatshim bench: plant_slowdown must be between 0 and 10, got {plant_slowdown}')
    size = SIZES[size_name]
    composer_version = _installed('mosaicml')
    if composer_version is None:
        raise compatshim.ComposerNotInstalledError('compatshim bench needs Composer (pip install mosaicml)')
    if compatshim.status().patches:
        raise RuntimeError('compatshim bench: disable the shim first; the bench turns it on and off per leg')
    say = (lambda msg: print(msg, file=progress, flush=True)) if progress else (lambda msg: None)
    env = env_name(device)
    planned = plan(composer_version)
    legs = [leg for leg in planned if leg.available]
    say(f'{env}: legs {", ".join(leg.name for leg in legs)}; size {size_name}: {size}')

    started = time.perf_counter()
    try:
        checks = _check(legs, device, size)
        say(f'{env}: placement check done ({time.perf_counter() - started:.1f} s)')

        fns = {leg.name: Augment(size.blur) for leg in legs}
        timed: dict[str, Any] = {
            name: (_Planted(fn, plant_slowdown, device) if plant_slowdown and name.startswith('shim') else fn)
            for name, fn in fns.items()
        }
        trainers = _build(legs, lambda leg: _trainer(leg, _composer_device(device), size, timed[leg.name]))
        windows, direct, peak = _time(legs, trainers, device, size, lambda msg: say(f'{env}: {msg}'), started)
    finally:
        compatshim.disable()  # whatever failed, the bench leaves the shim off, as it found it

    samples = size.batch * size.steps
    leg_results: dict[str, Any] = {}
    for leg in planned:
        if not leg.available:
            leg_results[leg.name] = {'available': False, 'description': leg.description, 'reason': leg.reason}
            continue
        throughput = [samples / s for s in windows[leg.name]]
        leg_results[leg.name] = {
            'available': True,
            'description': leg.description,
            **checks[leg.name],
            # Calls per step over the timed windows (the placement check counts the same on its own device).
            'timed_calls_per_step': fns[leg.name].calls / ((size.windows + WARMUP) * size.steps),
            'peak_device_bytes': peak[leg.name] if device == 'cuda' else None,
            'window_s': windows[leg.name],
            'samples_per_s': summarize(throughput),
            'samples_per_s_windows': throughput,
        }

    def paired(a: str, b: str) -> list[float]:
        if a not in windows or b not in windows:
            return []
        return [tb / ta for ta, tb in zip(windows[a], windows[b])]  # throughput ratio a/b = time b / time a

    def overhead(leg: str) -> list[float]:
        """µs per step that ``leg`` spends beyond the no-transform leg plus one direct call of the transform."""
        return [((t - tn) / size.steps - d) * 1e6 for t, tn, d in zip(windows[leg], windows['no-transform'], direct)]

    shim_overhead, unpatched_overhead = overhead('shim-batch'), overhead('unpatched')
    headline = {
        'shim_vs_unpatched': paired('shim-batch', 'unpatched'),
        'shim_microbatch_vs_unpatched': paired('shim-microbatch', 'unpatched'),
        'shim_vs_no_transform': paired('shim-batch', 'no-transform'),
        'native_microbatch_vs_unpatched': paired('native-microbatch', 'unpatched'),
    }
    return {
        'schema': 1,
        'env': env,
        'composer': composer_version,
        'torch': torch.__version__,
        'device': device,
        'family': getattr(family_of(composer_version), 'value', 'unaffected'),
        'fingerprint': fingerprint(device, size_name, size),
        'load_average': list(os.getloadavg()) if hasattr(os, 'getloadavg') else None,
        'measured_at': datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds'),
        'planted_slowdown': plant_slowdown,
        'legs': leg_results,
        'direct_transform_s': direct,
        'headline': {
            **{name: {'windows': values, **summarize(values)} for name, values in headline.items()},
            # The shim's cost per batch beyond calling the transform directly on a batch already on the device; the
            # unpatched leg's figure is the same measure without the shim (cache and allocator effects of running
            # inside a trainer), so the shim's own share is the difference.
            'overhead_us': {'windows': shim_overhead, **summarize(shim_overhead)},
            'unpatched_overhead_us': {'windows': unpatched_overhead, **summarize(unpatched_overhead)},
        },
        'elapsed_s': time.perf_counter() - started,
    }
