"""Batch coherence with stage ``batch`` (see the design notes): one call per optimizer step on the rank's whole
batch, *on the device*, and every microbatch fed to forward a slice of that one result.

Checked parts: C1 one shared draw per step; C2 the batch statistic comes from the whole batch; C3 one RNG
consumption per step, so results do not depend on the microbatch size (``'auto'`` and its out-of-memory retry
included); C4 one shape per step. Every test asserts the transform ran on the device, so the control leg fails on
0.25–0.26 (host), 0.27–0.28 (never called) and 0.29+ (TypeError), and passes on 0.24.1.
"""

from __future__ import annotations

import pytest
import torch
from conftest import DEVICE, LEGS, make_device
from workload import OOMRecorder, assert_coherent, fit_probe

pytestmark = pytest.mark.device


@pytest.mark.parametrize('leg', LEGS, indirect=True)
@pytest.mark.parametrize('microbatch', [1, 2, 8])
def test_one_call_per_step_every_microbatch_a_slice(leg: str, microbatch: int) -> None:
    probe, per_step = fit_probe(microbatch)
    assert_coherent(probe, per_step)


@pytest.mark.parametrize('leg', LEGS, indirect=True)
def test_result_independent_of_microbatch_size(leg: str) -> None:
    """C3: the same seed gives the same transformed batches with microbatches of 1, 2 and 4."""
    runs = {mb: fit_probe(mb) for mb in (1, 2, 4)}
    for probe, per_step in runs.values():
        assert_coherent(probe, per_step)
    reference = runs[1][1]
    for mb, (_, per_step) in runs.items():
        for a, b in zip(reference, per_step):
            assert torch.equal(a, b), f'microbatch size {mb} changed the transformed batch'


@pytest.mark.skipif(DEVICE == 'mps', reason="Composer allows device_train_microbatch_size='auto' on GPU devices only")
@pytest.mark.parametrize('leg', LEGS, indirect=True)
def test_auto_microbatching_with_oom_retry(leg: str) -> None:
    """``'auto'``: the first step fails twice with out-of-memory (8 → 4 → 2); the transform still ran once per step."""
    recorder = OOMRecorder(oom_above=2)
    probe, seen = fit_probe('auto', recorder=recorder, device=make_device(auto_microbatching=True))
    assert recorder.ooms == 2, f'expected 2 simulated out-of-memory retries, got {recorder.ooms}'
    per_step = [torch.cat(seen[i : i + 4]) for i in range(0, len(seen), 4)]
    assert_coherent(probe, per_step)
    _, fixed = fit_probe(2)
    assert all(torch.equal(a, b) for a, b in zip(per_step, fixed)), "'auto' changed the transformed batches"
