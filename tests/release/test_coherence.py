"""Batch coherence with stage ``batch`` (see the design notes): one call per optimizer step on the rank's whole
batch, *on the device*, and every microbatch fed to forward a slice of that one result.

Checked parts: C1 one shared draw per step; C2 the batch statistic comes from the whole batch; C3 one RNG
consumption per step, so results do not depend on the microbatch size (``'auto'`` and its out-of-memory retry
included); C4 one shape per step. Every test asserts the transform ran on the device, so the control leg fails on
0.25–0.26 (host), 0.27–0.28 (never called) and 0.29+ (TypeError), and passes on 0.24.1.
"""

from __future__ import annotations

import math

import pytest
import torch
from conftest import DEVICE, LEGS, make_device
from workload import OOMRecorder, Probe, loader, steps, trainer

pytestmark = pytest.mark.device

BATCH = 8
N = 32


def _fit(microbatch: int | str, recorder=None, device=None) -> tuple[Probe, list[torch.Tensor]]:
    from composer.core import DataSpec

    probe = Probe()
    t, rec = trainer(
        device or make_device(),
        recorder=recorder,
        train_dataloader=DataSpec(loader(N, BATCH), device_transforms=probe),
        max_duration='1ep',
        device_train_microbatch_size=microbatch,
    )
    t.fit()
    per_step = 1 if microbatch == 'auto' else math.ceil(BATCH / microbatch)
    return probe, steps(rec, per_step) if microbatch != 'auto' else [x for _, x in rec.seen]


def _assert_coherent(probe: Probe, per_step_inputs: list[torch.Tensor]) -> None:
    assert len(probe.calls) == N // BATCH, f'{len(probe.calls)} transform calls for {N // BATCH} steps'
    assert {c.placement for c in probe.calls} == {'device'}, 'the transform did not run on the device'
    for call, x in zip(probe.calls, per_step_inputs):
        assert x.shape[0] == call.size == BATCH  # C4: one shape, the whole batch
        assert torch.all(x[:, 0] == call.draw), 'C1: microbatches of one step carry different draws'
        assert torch.unique(x[:, 1]).numel() == 1, 'C2: the batch statistic differs between microbatches'
        assert [int(i) for i in x[:, 2]] == call.ids, 'microbatches are not slices of the transformed batch'


@pytest.mark.parametrize('leg', LEGS, indirect=True)
@pytest.mark.parametrize('microbatch', [1, 2, 8])
def test_one_call_per_step_every_microbatch_a_slice(leg: str, microbatch: int) -> None:
    probe, per_step = _fit(microbatch)
    _assert_coherent(probe, per_step)


@pytest.mark.parametrize('leg', LEGS, indirect=True)
def test_result_independent_of_microbatch_size(leg: str) -> None:
    """C3: the same seed gives the same transformed batches with microbatches of 1, 2 and 4."""
    runs = {mb: _fit(mb) for mb in (1, 2, 4)}
    for probe, per_step in runs.values():
        _assert_coherent(probe, per_step)
    reference = runs[1][1]
    for mb, (_, per_step) in runs.items():
        for a, b in zip(reference, per_step):
            assert torch.equal(a, b), f'microbatch size {mb} changed the transformed batch'


@pytest.mark.skipif(DEVICE == 'mps', reason="Composer allows device_train_microbatch_size='auto' on GPU devices only")
@pytest.mark.parametrize('leg', LEGS, indirect=True)
def test_auto_microbatching_with_oom_retry(leg: str) -> None:
    """``'auto'``: the first step fails twice with out-of-memory (8 → 4 → 2); the transform still ran once per step."""
    recorder = OOMRecorder(oom_above=2)
    probe, seen = _fit('auto', recorder=recorder, device=make_device(auto_microbatching=True))
    assert recorder.ooms == 2, f'expected 2 simulated out-of-memory retries, got {recorder.ooms}'
    per_step = [torch.cat(seen[i : i + 4]) for i in range(0, len(seen), 4)]
    _assert_coherent(probe, per_step)
    _, fixed = _fit(2)
    assert all(torch.equal(a, b) for a, b in zip(per_step, fixed)), "'auto' changed the transformed batches"
