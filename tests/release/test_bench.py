"""The benchmark on this release: one real tiny run, and what it measured (legs, placement, coherence, bytes).

Runs once per family (it times real Trainers; the comparison rule and the report are tested on recorded samples in
``tests/unit``). Nothing here asserts on wall time.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from conftest import COMPOSER, FAMILY, IS_AFFECTED

from compatshim.bench import LEGS, overhead, run

pytestmark = [pytest.mark.filterwarnings('ignore::UserWarning'), pytest.mark.runs_in('family')]


@pytest.fixture(scope='module')
def result() -> dict[str, Any]:
    """One real tiny bench run on this release (cpu), shared by the module."""
    return run.run('cpu', 'tiny')


def test_legs_placement_and_coherence(result: dict[str, Any]) -> None:
    legs = result['legs']
    assert list(legs) == list(LEGS)
    assert result['composer'] == COMPOSER
    # Without the shim: on the device only up to 0.24.1; the host (as the transform or the workaround) after.
    assert legs['unpatched']['placement'] == ('host' if IS_AFFECTED else 'device')
    assert legs['unpatched']['coherence'] == 'coherent'
    assert legs['shim-batch']['placement'] == 'device'
    assert legs['shim-batch']['coherence'] == 'coherent' and legs['shim-batch']['calls_per_step'] == 1
    assert legs['shim-microbatch']['available'] is IS_AFFECTED
    if IS_AFFECTED:
        assert legs['shim-microbatch']['placement'] == 'device'
        assert legs['shim-microbatch']['calls_per_step'] == 2  # tiny: batch 8, microbatch 4
    native = FAMILY in ('dropped', 'rejected')
    assert legs['native-microbatch']['available'] is native
    if native:
        assert legs['native-microbatch']['placement'] == 'device'
    assert legs['no-transform']['calls_per_step'] == 0
    # The whole batch crosses once per step (8 images of 3x16x16 fp32 + labels; Composer moves a few scalars too).
    batch_bytes = 8 * 3 * 16 * 16 * 4 + 8 * 10 * 4
    for leg in ('unpatched', 'shim-batch', 'no-transform'):
        assert batch_bytes <= legs[leg]['h2d_bytes_per_step'] < batch_bytes + 1024, leg


def test_windows_and_headline_shapes(result: dict[str, Any]) -> None:
    size = result['fingerprint']['size']
    for data in result['legs'].values():
        if data['available']:
            assert len(data['window_s']) == size['windows'] and all(s > 0 for s in data['window_s'])
            assert data['timed_calls_per_step'] == data['calls_per_step']
    head = result['headline']
    assert head['shim_vs_unpatched']['n'] == size['windows']
    assert head['shim_microbatch_vs_unpatched']['n'] == (size['windows'] if IS_AFFECTED else 0)
    hook = result['hook_overhead_us']
    assert hook['available'] is IS_AFFECTED
    if IS_AFFECTED:
        for stage in ('batch', 'microbatch'):
            assert hook[stage]['n'] == overhead.SAMPLES == len(hook[stage]['samples'])
    json.dumps(result)  # serialisable as is


#: What plain ``device_transforms`` does without the shim, per family (measured by the bench in words).
PLAIN_OUTCOME = {None: 'device', 'host': 'host', 'dropped': 'fails', 'rejected': 'rejected'}


def test_recipe_bytes_and_what_plain_device_transforms_does(result: dict[str, Any]) -> None:
    """uint8 crosses with the shim; float32 (4x the bytes) without it; 0.27+ say in words why there is no plain leg."""
    recipe = result['recipe']
    plain = recipe['plain_device_transforms']
    assert plain['outcome'] == PLAIN_OUTCOME[FAMILY], plain
    if FAMILY == 'dropped':
        assert 'silently dropped' in plain['words'] and 'never ran' in plain['words'] and 'uint8' in plain['words']
    if FAMILY == 'rejected':
        assert 'TypeError' in plain['words']
    legs = recipe['legs']
    assert 'no-transform' in legs and not legs['no-transform']['available']
    pixels = 8 * 3 * 16 * 16  # tiny: batch 8 of 3x16x16
    shim = legs['shim-batch']
    assert shim['placement'] == 'device' and shim['coherence'] == 'coherent'
    assert shim['h2d_bytes_by_dtype']['uint8'] == pixels
    assert shim['h2d_bytes_by_dtype'].get('float32', 0) < 64  # Composer moves a few float scalars
    unpatched = legs['unpatched']
    if IS_AFFECTED:
        assert unpatched['placement'] == 'host'
        assert unpatched['h2d_bytes_by_dtype']['float32'] >= 4 * pixels
        assert 0.24 < recipe['bytes_shim_vs_unpatched'] < 0.27
        if FAMILY in ('dropped', 'rejected'):
            assert unpatched['description'].startswith('batch_transforms'), 'the workaround, labelled as such'
        assert legs['shim-microbatch']['placement'] == 'device'
    else:
        assert unpatched['placement'] == 'device' and recipe['bytes_shim_vs_unpatched'] == 1.0


def test_planted_hook_delay_restores_the_hooks_exactly() -> None:
    from compatshim._transforms import BatchHook, MicrobatchHook

    before = (BatchHook.__dict__['__call__'], MicrobatchHook.__dict__['__call__'])
    with overhead.planted_hook_delay(50):
        assert BatchHook.__dict__['__call__'] is not before[0]
    assert (BatchHook.__dict__['__call__'], MicrobatchHook.__dict__['__call__']) == before


def test_bad_input_is_refused_clearly() -> None:
    with pytest.raises(ValueError, match="unknown size 'huge'; choose one of tiny, cpu, gpu"):
        run.run('cpu', 'huge')
    with pytest.raises(ValueError, match='plant_slowdown must be between 0 and 10'):
        run.run('cpu', 'tiny', plant_slowdown=-1)
    with pytest.raises(ValueError, match='plant_hook_us must be between 0 and 100000'):
        run.run('cpu', 'tiny', plant_hook_us=-5)
