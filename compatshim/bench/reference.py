"""``compatshim bench``: one release measured on the built-in reference pipelines by the engine, with the probes.

The ``augment`` pipeline (:mod:`~compatshim.bench.workload`) is checked and timed; the ``recipe`` pipeline (uint8
images) is checked: what crosses to the device per leg, and what plain ``device_transforms`` does here (its
``unpatched`` leg). The legs of each gated same-run ratio (:data:`~compatshim.bench.metrics.METRICS`) run back to
back; after each round's windows every overhead probe (:mod:`~compatshim.bench.overhead`) takes :data:`PROBE_SAMPLES`
samples on the same clock, so that what each costs is set against the step of the same round.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Optional, TextIO

import torch

import compatshim
from compatshim._accelerator import Accelerator, accelerator
from compatshim._support import TESTED_RELEASES, UNAFFECTED_FAMILY, family_of, installed
from compatshim.bench import engine, overhead, workload
from compatshim.bench.engine import CHECK_STEPS, SIZES, Source, Windows
from compatshim.bench.metrics import METRICS, PROBES, REFERENCE_LEGS, pairs
from compatshim.bench.results import BenchResult, Overheads, now

__all__ = ['PROBE_SAMPLES', 'SIZE_NAMES', 'env_name', 'measure']

#: Samples each overhead probe takes per round (after the round's windows).
PROBE_SAMPLES = 3
#: The sizes of the reference workload (:data:`compatshim.bench.engine.SIZES`).
SIZE_NAMES = ('tiny', 'cpu', 'gpu')


def env_name(device: str) -> str:
    """The matrix env this process is: the support-table row of the installed Composer/torch/Python, plus the device."""
    composer, torch_version = installed('mosaicml') or '?', torch.__version__.split('+')[0]
    import sys

    python = f'{sys.version_info.major}.{sys.version_info.minor}'
    for row in TESTED_RELEASES:
        if (row.composer, row.torch, row.python) == (composer, torch_version, python):
            return row.on(device)
    return f'composer{composer}-torch{torch_version}-{device}'


class _Planted:
    """The transform, made ``fraction`` slower: after each call it spins for that share of the call's time, on the
    clock the windows are timed with (a planted regression)."""

    def __init__(self, fn: Any, fraction: float, on: Accelerator) -> None:
        self.fn, self.fraction, self.on, self.clock = fn, fraction, on, on.clock()

    def __call__(self, batch: Any) -> Any:
        start = self.clock()
        out = self.fn(batch)
        self.on.synchronize()
        end = self.clock() + self.fraction * (self.clock() - start)
        while self.clock() < end:
            pass
        return out


def measure(
    device: str = 'cpu',
    size_name: str = 'cpu',
    *,
    plant_slowdown: float = 0.0,
    plant_hook_us: float = 0.0,
    progress: Optional[TextIO] = None,
) -> BenchResult:
    """Measure every leg of this release (the reference harness, docs/harness.md).

    Args:
        device: ``cpu`` (the fake accelerator), ``cuda`` or ``mps``.
        size_name: One of :data:`SIZE_NAMES`.
        plant_slowdown: Make the transform this fraction slower in the shim legs (a planted regression). 0 to measure.
        plant_hook_us: Make every call of the shim's hooks this many µs slower (a planted regression). 0 to measure.
        progress: Where to print progress lines (``None``: silent).
    """
    if size_name not in SIZE_NAMES:
        raise ValueError(f'compatshim bench: unknown size {size_name!r}; choose one of {", ".join(SIZE_NAMES)}')
    try:
        on = accelerator(device)
    except ValueError as exc:
        raise ValueError(f'compatshim bench: {exc}') from None
    if on.absent():
        raise RuntimeError(f'compatshim bench: --device {device}, but {on.absent()}')
    if not 0.0 <= plant_slowdown <= 10.0:
        raise ValueError(f'compatshim bench: plant_slowdown must be between 0 and 10, got {plant_slowdown}')
    if not 0.0 <= plant_hook_us <= 100_000:
        raise ValueError(f'compatshim bench: plant_hook_us must be between 0 and 100000 µs, got {plant_hook_us}')
    composer = installed('mosaicml')
    if composer is None:
        raise compatshim.ComposerNotInstalledError('compatshim bench needs Composer (pip install mosaicml)')
    if compatshim.status().patches:
        raise RuntimeError('compatshim bench: disable the shim first; the bench turns it on and off per leg')
    with engine.pinned(on) as fixed:
        return _measure(on, size_name, composer, fixed, plant_slowdown, plant_hook_us, progress)


def _measure(
    on: Accelerator,
    size_name: str,
    composer: str,
    fixed: dict[str, Any],
    plant_slowdown: float,
    plant_hook_us: float,
    progress: Optional[TextIO],
) -> BenchResult:
    size, env, started = SIZES[size_name], env_name(on.name), time.perf_counter()

    def say(message: str) -> None:
        if progress is not None:
            print(f'{env}: {message} ({time.perf_counter() - started:.0f} s)', file=progress, flush=True)

    augment, recipe = workload.pipeline('augment', size), workload.pipeline('recipe', size)
    compatshim.enable()
    patched = list(compatshim.status().patches)  # what enable() patches here (nothing on an unaffected release)
    compatshim.disable()
    names, affected = list(REFERENCE_LEGS), family_of(composer) is not None
    overheads = {name: Overheads(overhead.CALLS[name.partition('-')[0]]) for name in PROBES}
    try:
        with overhead.planted_hook_delay(plant_hook_us):
            timed_source, recipe_source = Source(augment.dataloader), Source(recipe.dataloader)
            checked = engine.check(augment, names, on, lambda leg: Windows(timed_source, CHECK_STEPS), size.batch)
            recipe_legs = engine.check(recipe, names, on, lambda leg: Windows(recipe_source, CHECK_STEPS), size.batch)
            say('placement and bytes checked')
            timed = [n for n in names if checked[n].available and checked[n].calls_per_step]
            transform: Callable[[Any], Any] = augment.transform
            planted = _Planted(transform, plant_slowdown, on) if plant_slowdown else transform
            made = engine.runs(
                augment,
                timed,
                on,
                lambda leg: Windows(timed_source, size.steps),
                size.batch,
                transform=lambda leg: planted if leg.stage else transform,
            )
            probes = _probes(on, affected)

            def sample(round_: int) -> None:
                for _ in range(PROBE_SAMPLES):
                    for probe in probes:
                        path_s, direct_s = probe.sample()
                        if round_:
                            found = overheads[probe.name]
                            found.path_s.append(path_s), found.direct_s.append(direct_s), found.rounds.append(round_)

            try:
                engine.time(made, pairs(METRICS), on, size.rounds, say, sample)
            finally:
                for probe in probes:
                    probe.close()
    finally:
        compatshim.disable()  # whatever failed, the bench leaves the shim off, as it found it
    return BenchResult(
        composer=composer,
        torch=torch.__version__,
        device=on.name,
        family=getattr(family_of(composer), 'value', UNAFFECTED_FAMILY),
        fingerprint=engine.fingerprint(on, size, fixed),
        measured_at=now(),
        legs={n: made[n].timings(checked[n]) if n in made else checked[n] for n in names},
        elapsed_s=time.perf_counter() - started,
        env=env,
        recipe=recipe_legs,
        overheads={name: found for name, found in overheads.items() if found.path_s},
        patched_by_enable=patched,
        planted_slowdown=plant_slowdown,
        planted_hook_us=plant_hook_us,
    )


def _probes(on: Accelerator, affected: bool) -> list[overhead.Probe]:
    """The overhead probes of this release (no hook probe where the shim patches nothing): the hook probes built with
    the shim on, the monitor's with it off (its DataSpec is Composer's own), as the legs are."""
    probes: list[overhead.Probe] = []
    try:
        for name in (name for name in PROBES if affected or not name.startswith('hook')):
            (compatshim.enable if name.startswith('hook') else compatshim.disable)()
            probes.append(overhead.make_probe(name, on))
    except BaseException:
        for probe in probes:
            probe.close()
        raise
    finally:
        compatshim.disable()
    return probes
