"""``compatshim bench``: one release measured on the built-in reference pipelines by the engine, with the probes.

The ``augment`` pipeline (:mod:`~compatshim.bench.workload`) is checked and timed; the ``recipe`` pipeline (uint8
images) is checked: what crosses to the device per leg, and what plain ``device_transforms`` does here (its
``unpatched`` leg). The legs of each gated same-run ratio (:data:`~compatshim.bench.metrics.METRICS`) run back to
back; after each round's windows every overhead probe (:mod:`~compatshim.bench.overhead`) takes :data:`PROBE_SAMPLES`
samples on the same clock, so that what each costs is set against the step of the same round.
"""

from __future__ import annotations

import time
from typing import Any, Optional, TextIO

import torch

import compatshim
from compatshim._accelerator import Accelerator
from compatshim._support import TESTED_RELEASES, family_of, installed
from compatshim.bench import engine, overhead, workload
from compatshim.bench.engine import CHECK_STEPS, SIZES, Source, Windows
from compatshim.bench.metrics import METRICS, PROBES, REFERENCE_LEGS, pairs
from compatshim.bench.results import BenchResult, Overheads

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
    """Measure every leg of this release (the reference harness, docs/harness.md) on ``device`` at ``size_name`` (one
    of :data:`SIZE_NAMES`). ``plant_slowdown``: the shim legs' transform made this fraction slower; ``plant_hook_us``:
    every call of the shim's hooks this many µs slower (planted regressions, to check the gate; 0 to measure).
    ``progress``: where to print progress lines."""
    if size_name not in SIZE_NAMES:
        raise ValueError(f'unknown size {size_name!r}; choose one of {", ".join(SIZE_NAMES)}')
    if not 0.0 <= plant_slowdown <= 10.0:
        raise ValueError(f'plant_slowdown must be between 0 and 10, got {plant_slowdown}')
    if not 0.0 <= plant_hook_us <= 100_000:
        raise ValueError(f'plant_hook_us must be between 0 and 100000 µs, got {plant_hook_us}')
    on, composer = engine.ready(device)
    size, env, started = SIZES[size_name], env_name(on.name), time.perf_counter()
    say = engine.progress(env, progress)
    compatshim.enable()
    patched = list(compatshim.status().patches)  # what enable() patches here (nothing on an unaffected release)
    compatshim.disable()
    names, overheads = (
        list(REFERENCE_LEGS),
        {name: Overheads(overhead.CALLS[name.partition('-')[0]]) for name in PROBES},
    )
    with engine.pinned(on) as fixed, overhead.planted_hook_delay(plant_hook_us):
        augment, recipe = workload.pipeline('augment', size), workload.pipeline('recipe', size)
        timed_source, recipe_source = Source(augment.dataloader), Source(recipe.dataloader)
        recipe_legs = engine.check(recipe, names, on, lambda leg: Windows(recipe_source, CHECK_STEPS), size.batch)
        planted = _Planted(augment.transform, plant_slowdown, on) if plant_slowdown else augment.transform
        probes = _probes(on, family_of(composer) is not None)

        def sample(round_: int) -> None:
            for _ in range(PROBE_SAMPLES):
                for probe in probes:
                    path_s, direct_s = probe.sample()
                    if round_:
                        found = overheads[probe.name]
                        found.path_s += [path_s]
                        found.direct_s += [direct_s]
                        found.rounds += [round_]

        try:
            legs = engine.measure(
                augment,
                names,
                on,
                size,
                size.batch,
                lambda leg, steps, observed: Windows(timed_source, steps),
                pairs(METRICS),
                lambda leg: leg.calls_per_step > 0,  # a leg that never calls the transform does other work
                say,
                lambda leg: planted if leg.stage else augment.transform,
                sample,
            )
        finally:
            compatshim.disable()  # whatever failed, the bench leaves the shim off, as it found it
            for probe in probes:
                probe.close()
    return BenchResult(
        **engine.common(on, composer, size, fixed),
        legs=legs,
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
