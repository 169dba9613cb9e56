"""Measure one release: where each leg's transform runs, what crosses to the device, and how fast — one process.

Legs (:data:`~compatshim.bench.metrics.LEGS`) are real Composer Trainers on the same workload, differing only in how the
transform is passed and whether the shim is on. Two workloads (:mod:`~compatshim.bench.workload`): ``augment`` is
timed; ``recipe`` (uint8 images) shows what crosses to the device. Placement, coherence and bytes come from two
untimed steps per leg on an *observable* device (the CPU fake accelerator on cpu, the real device on cuda/mps). Then
the augment legs are timed in rounds, after one warm-up round: a window is one ``fit(duration='1ep')``; the two legs
of each gated ratio run back to back, A B B A, in every round (:func:`_schedule`); windows are timed in this process's
CPU time on cpu and in wall-clock time, the device synchronised at their edges, on cuda/mps
(:mod:`~compatshim.bench.timing`). After
the windows of a round, every overhead probe (:mod:`~compatshim.bench.overhead`: the shim's hook path, the monitor's)
takes :data:`PROBE_SAMPLES` samples on the same clock, so that what each costs is set against the step of the same
round. The result keeps the raw numbers; each metric's kind reads its samples from them.
"""

from __future__ import annotations

import dataclasses
import gc
import os
import platform
import random
import sys
import time
from typing import Any, Callable, Optional, TextIO

import torch

import compatshim
from compatshim._support import DEVICES, TESTED_RELEASES, UNAFFECTED_FAMILY, Family, family_of, installed
from compatshim.bench import overhead, timing
from compatshim.bench.metrics import METRICS, PROBES
from compatshim.bench.results import BenchResult, LegResult, Overheads, Recipe, now
from compatshim.bench.workload import SIZES, VERSION, WORKLOADS, Size, Workload

__all__ = ['PROBE_SAMPLES', 'LegPlan', 'env_name', 'fingerprint', 'measure', 'plan']

#: Samples each overhead probe takes per round (after the round's windows).
PROBE_SAMPLES = 3
#: The legs whose ratio is gated run back to back in every round: the registry's paired metrics.
PAIRS = [m.source for m in METRICS if m.paired]


@dataclasses.dataclass(frozen=True)
class LegPlan:
    """How one leg passes the transform: as the DataSpec argument ``argument`` (with ``stage`` as its
    ``data_transfer_stage``, where the shim patches); ``shim``: enabled."""

    name: str
    description: str
    available: bool
    reason: str = ''
    shim: bool = False
    argument: str = 'device_transforms'
    stage: Optional[str] = None

    def dataspec(self, fn: Any) -> dict[str, Any]:
        """The leg's ``DataSpec`` keywords for the transform ``fn``."""
        return {self.argument: fn, **({'data_transfer_stage': self.stage} if self.stage else {})}


def plan(composer_version: str) -> list[LegPlan]:
    """The legs on a Composer release, in :data:`~compatshim.bench.metrics.LEGS` order."""
    family = family_of(composer_version)
    affected = family is not None
    native = family in (Family.DROPPED, Family.REJECTED)  # 0.27+: microbatch_transforms exists
    if native:  # plain device_transforms is dropped or rejected here: the unpatched leg is the workaround
        unpatched = LegPlan(
            'unpatched',
            'batch_transforms=fn, the workaround without the shim (host)',
            True,
            argument='batch_transforms',
        )
    else:
        unpatched = LegPlan('unpatched', f'device_transforms=fn, no shim ({"host" if affected else "device"})', True)

    def shim_leg(stage: str) -> LegPlan:
        reason = '' if affected or stage == 'batch' else 'unaffected release: the shim patches nothing, no stage'
        description = f'device_transforms=fn, enable(stage="{stage}")'
        return LegPlan(
            f'shim-{stage}', description, affected or stage == 'batch', reason, True, stage=stage if affected else None
        )

    return [
        unpatched,
        shim_leg('batch'),
        shim_leg('microbatch'),
        LegPlan(
            'native-microbatch',
            'microbatch_transforms=fn, no shim (0.27+)',
            native,
            '' if native else 'microbatch_transforms exists from Composer 0.27.0',
            argument='microbatch_transforms',
        ),
    ]


def env_name(device_kind: str) -> str:
    """The matrix env this process is: the support-table row of the installed Composer/torch/Python, plus the device."""
    composer, torch_version = installed('mosaicml') or '?', torch.__version__.split('+')[0]
    python = f'{sys.version_info.major}.{sys.version_info.minor}'
    for row in TESTED_RELEASES:
        if (row.composer, row.torch, row.python) == (composer, torch_version, python):
            return row.on(device_kind)
    return f'composer{composer}-torch{torch_version}-{device_kind}'


def _cpu_model() -> str:
    try:
        with open('/proc/cpuinfo') as info:
            for line in info:
                if line.startswith('model name'):
                    return line.split(':', 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def fingerprint(device_kind: str, size_name: str, size: Size) -> dict[str, Any]:
    """The machine and software a result was measured on: reported (a CPU model string is no identity: machines that
    share one differ by 1.7x), except the size and workload version, which must match for two results to compare."""
    gpu = {
        'cuda': lambda: torch.cuda.get_device_name(),
        'mps': lambda: f'Apple MPS ({platform.machine()})',
    }.get(device_kind, lambda: None)()
    return {
        'cpu_model': _cpu_model(),
        'cpu_count': os.cpu_count(),
        'torch_threads': torch.get_num_threads(),
        'gpu': gpu,
        'device': device_kind,
        'python': platform.python_version(),
        'torch': torch.__version__,
        'composer': installed('mosaicml'),
        'compatshim': compatshim.__version__,
        'size': {'name': size_name, **dataclasses.asdict(size)},
        'workload_version': VERSION,
    }


class _Planted:
    """The transform, made ``fraction`` slower: after each call it spins for that share of the call's time, on the
    clock the windows are timed with (a planted regression)."""

    def __init__(self, fn: Any, fraction: float, device_kind: str) -> None:
        self.fn, self.fraction, self.device_kind, self.clock = fn, fraction, device_kind, timing.clock(device_kind)

    def __call__(self, batch: Any) -> Any:
        start = self.clock()
        out = self.fn(batch)
        timing.synchronize(self.device_kind)
        end = self.clock() + self.fraction * (self.clock() - start)
        while self.clock() < end:
            pass
        return out


def _trainer(leg: LegPlan, device: Any, size: Size, fn: Any, workload: Workload, monitor: Any = None) -> Any:
    """A Trainer for ``leg`` on the Composer ``device``, built with the shim in the leg's state (DataSpecs convert when
    they are built), with ``monitor`` among its callbacks."""
    from composer import Trainer
    from composer.core import DataSpec
    from composer.optim import DecoupledSGDW

    (compatshim.enable if leg.shim else compatshim.disable)()
    model = workload.model()
    return Trainer(
        model=model,
        train_dataloader=DataSpec(workload.loader(size), **leg.dataspec(fn)),
        optimizers=DecoupledSGDW(model.parameters(), lr=0.01),
        callbacks=[] if monitor is None else [monitor],
        device=device,
        device_train_microbatch_size=size.microbatch,
        precision='fp32',
        seed=17,
        progress_bar=False,
        log_to_console=False,
    )


def _check(leg: LegPlan, device_kind: str, size: Size, workload: Workload) -> LegResult:
    """Placement, coherence, calls and host→device bytes per step, from 2 untimed steps on an observable device: what
    the in-run monitor saw of them (its summary)."""
    from compatshim.monitor import TransformMonitor
    from compatshim.testing import observable_device  # imports Composer: only when measuring

    if not leg.available:
        return LegResult(leg.description, available=False, reason=leg.reason)
    monitor = TransformMonitor()
    trainer = _trainer(leg, observable_device(device_kind), size, workload.transform(size), workload, monitor)
    try:
        trainer.fit(duration='2ba')
    finally:
        compatshim.disable()
        trainer.close()
    summary = monitor.summaries[-1]
    seen = summary.transforms[leg.argument]
    calls = seen.calls_per_step
    coherence = 'coherent' if calls == 1 else f'per microbatch ({calls:g} calls/step)' if calls else 'never called'
    return LegResult(
        leg.description,
        placement=seen.where,
        coherence=coherence,
        calls_per_step=calls,
        h2d_bytes_per_step=int(summary.bytes_per_step),
        h2d_bytes_by_dtype=summary.bytes_by_dtype,
        monitor=summary.text,
    )


def _first_line(exc: BaseException) -> str:
    line = (str(exc).strip().splitlines() or [''])[0]
    return line if len(line) <= 160 else line[:157] + '...'


def _plain(device_kind: str, size: Size, workload: Workload) -> dict[str, str]:
    """What plain ``DataSpec(device_transforms=fn)`` does on this release without the shim, in words (2 steps; no
    monitor: where the run dies is the finding)."""
    from compatshim._recorder import MoveCounter, Tap, summarize_places
    from compatshim.testing import observable_device

    device = observable_device(device_kind)
    counter, tap = MoveCounter().install(device), Tap(workload.transform(size))
    leg = LegPlan('plain', 'device_transforms=fn, no shim', True)
    try:
        trainer = _trainer(leg, device, size, tap, workload)
    except TypeError as exc:
        return {
            'outcome': 'rejected',
            'words': f'rejected: DataSpec(device_transforms=...) raises TypeError ({_first_line(exc)})',
        }
    try:
        trainer.fit(duration='2ba')
    except Exception as exc:  # noqa: BLE001 (whatever the user's run dies of is the finding)
        moved = counter.take()
        ran = 'the transform ran' if tap.window.calls else 'the transform never ran'
        words = (
            f'silently dropped: {ran}, the model got the raw {next(iter(moved), "nothing")} batch and training fails'
        )
        return {'outcome': 'fails', 'words': f'{words} ({type(exc).__name__}: {_first_line(exc)})'}
    finally:
        trainer.close()
    moved = counter.take()
    main, per_step = next(iter(moved)), sum(moved.values()) // 2
    if summarize_places(tap.window.places) == 'device':
        return {
            'outcome': 'device',
            'words': f'runs on the device, after the move: {main} images cross ({per_step} bytes/step)',
        }
    words = f'runs on the host, before the move: the transformed {main} images cross ({per_step} bytes/step)'
    return {'outcome': 'host', 'words': words}


def _schedule(names: list[str], round_: int) -> list[str]:
    """One round's windows, in order: each gated pair of legs back to back as A B B A (or B A A B), so that whatever
    else the machine does in that second, and any drift, touches both legs of a ratio alike; pairs and the remaining
    leg in a shuffled order (seeded by the round)."""
    rng = random.Random(round_)
    pairs = [[b, a] for a, b in PAIRS if {a, b} <= set(names)]
    groups = [[*pair, *reversed(pair)] if rng.random() < 0.5 else [*reversed(pair), *pair] for pair in pairs]
    groups += [[name] for name in names if not any(name in pair for pair in pairs)]
    return [name for group in rng.sample(groups, len(groups)) for name in group]


def _time(
    legs: list[LegPlan],
    trainers: dict[str, Any],
    probes: list[overhead.Probe],
    device_kind: str,
    rounds: int,
    say: Callable[[str], None],
) -> tuple[dict[str, list[float]], dict[str, list[float]], dict[str, Overheads]]:
    """The timing loop (one warm-up round first, not kept): seconds per window per leg, per round (the mean of a leg's
    windows in that round, what its ratios pair), and every probe's samples, taken after each round's windows."""
    windows: dict[str, list[float]] = {leg.name: [] for leg in legs}
    per_round: dict[str, list[float]] = {leg.name: [] for leg in legs}
    sampled = {probe.name: Overheads(probe.calls) for probe in probes}
    clock = timing.clock(device_kind)
    # The shim stays on for the whole loop (toggling it between windows skews the next window); the legs without the
    # shim hold DataSpecs built while it was off, i.e. Composer's own objects. What exists now (Composer, torch, the
    # trainers) lives to the end: frozen out of the collector, the collection before each window takes a millisecond
    # instead of 0.2 s (a quarter of a bench, 2-core machine), and collects the same garbage.
    compatshim.enable()
    gc.collect()
    gc.freeze()
    try:
        for round_ in range(rounds + 1):  # round 0 is the warm-up
            spent: dict[str, list[float]] = {name: [] for name in windows}
            for name in _schedule(list(windows), round_):
                gc.collect()
                gc.disable()  # as timeit does: no collector pauses inside a window
                try:
                    timing.synchronize(device_kind)
                    start = clock()
                    trainers[name].fit(duration='1ep')
                    timing.synchronize(device_kind)
                    elapsed = clock() - start
                finally:
                    gc.enable()
                spent[name].append(elapsed)
            for _ in range(PROBE_SAMPLES):
                for probe in probes:
                    path_s, direct_s = probe.sample()
                    if round_:
                        found = sampled[probe.name]
                        found.path_s.append(path_s)
                        found.direct_s.append(direct_s)
                        found.rounds.append(round_)
            if round_:
                for name, times in spent.items():
                    windows[name] += times
                    per_round[name].append(sum(times) / len(times))
            say(f'round {round_}/{rounds}' + (' (warm-up)' if not round_ else ''))
    finally:
        gc.unfreeze()
        compatshim.disable()
        for trainer in trainers.values():
            trainer.close()
        for probe in probes:
            probe.close()
    return windows, per_round, sampled


def _probes(device_kind: str, affected: bool) -> list[overhead.Probe]:
    """The overhead probes of this release (no hook probe where the shim patches nothing): the hook probes built with
    the shim on, the monitor's with it off (its DataSpec is Composer's own), as the legs are."""
    probes = []
    try:
        for name in (name for name in PROBES if affected or not name.startswith('hook')):
            (compatshim.enable if name.startswith('hook') else compatshim.disable)()
            probes.append(overhead.make_probe(name, device_kind))
    except BaseException:
        for probe in probes:
            probe.close()
        raise
    finally:
        compatshim.disable()
    return probes


def measure(
    device_kind: str = 'cpu',
    size_name: str = 'cpu',
    *,
    plant_slowdown: float = 0.0,
    plant_hook_us: float = 0.0,
    progress: Optional[TextIO] = None,
) -> BenchResult:
    """Measure every leg of this release (the reference harness, docs/harness.md).

    Args:
        device_kind: ``cpu``, ``cuda`` or ``mps``.
        size_name: A key of :data:`~compatshim.bench.workload.SIZES`.
        plant_slowdown: Make the transform this fraction slower in the shim legs (a planted regression). 0 to measure.
        plant_hook_us: Make every call of the shim's hooks this many µs slower (a planted regression). 0 to measure.
        progress: Where to print progress lines (``None``: silent).
    """
    if size_name not in SIZES:
        raise ValueError(f'compatshim bench: unknown size {size_name!r}; choose one of {", ".join(SIZES)}')
    if device_kind not in DEVICES:
        raise ValueError(f'compatshim bench: unknown device {device_kind!r}; choose one of {", ".join(DEVICES)}')
    if not timing.present(device_kind):
        raise RuntimeError(f'compatshim bench: --device {device_kind}, but torch sees no {device_kind} device')
    if not 0.0 <= plant_slowdown <= 10.0:
        raise ValueError(f'compatshim bench: plant_slowdown must be between 0 and 10, got {plant_slowdown}')
    if not 0.0 <= plant_hook_us <= 100_000:
        raise ValueError(f'compatshim bench: plant_hook_us must be between 0 and 100000 µs, got {plant_hook_us}')
    composer = installed('mosaicml')
    if composer is None:
        raise compatshim.ComposerNotInstalledError('compatshim bench needs Composer (pip install mosaicml)')
    if compatshim.status().patches:
        raise RuntimeError('compatshim bench: disable the shim first; the bench turns it on and off per leg')
    size, env, started = SIZES[size_name], env_name(device_kind), time.perf_counter()
    allocator = timing.pin_allocator()

    def say(message: str) -> None:
        if progress is not None:
            print(f'{env}: {message} ({time.perf_counter() - started:.0f} s)', file=progress, flush=True)

    legs = plan(composer)
    augment, recipe = WORKLOADS['augment'], WORKLOADS['recipe']
    compatshim.enable()
    patched = list(compatshim.status().patches)  # what enable() patches here (nothing on an unaffected release)
    compatshim.disable()
    try:
        with overhead.planted_hook_delay(plant_hook_us):
            checked = {leg.name: _check(leg, device_kind, size, augment) for leg in legs}
            recipe_legs = {leg.name: _check(leg, device_kind, size, recipe) for leg in legs}
            plain = _plain(device_kind, size, recipe)
            say('placement and bytes checked')
            timed = [leg for leg in legs if leg.available]
            fns = {leg.name: augment.transform(size) for leg in timed}
            if plant_slowdown:
                fns.update(
                    {n: _Planted(fn, plant_slowdown, device_kind) for n, fn in fns.items() if n.startswith('shim')}
                )
            trainers = {
                leg.name: _trainer(leg, timing.composer_device(device_kind), size, fns[leg.name], augment)
                for leg in timed
            }
            probes = _probes(device_kind, family_of(composer) is not None)
            windows, per_round, overheads = _time(timed, trainers, probes, device_kind, size.rounds, say)
    finally:
        compatshim.disable()  # whatever failed, the bench leaves the shim off, as it found it
    samples = size.batch * size.steps
    for name, values in windows.items():
        checked[name].samples_per_s = [samples / s for s in values]
        checked[name].round_s = per_round[name]
    return BenchResult(
        env=env,
        composer=composer,
        torch=torch.__version__,
        device=device_kind,
        family=getattr(family_of(composer), 'value', UNAFFECTED_FAMILY),
        fingerprint={**fingerprint(device_kind, size_name, size), 'allocator': allocator},
        measured_at=now(),
        legs=checked,
        recipe=Recipe(recipe_legs, plain),
        overheads=overheads,
        patched_by_enable=patched,
        planted_slowdown=plant_slowdown,
        planted_hook_us=plant_hook_us,
        elapsed_s=time.perf_counter() - started,
    )
