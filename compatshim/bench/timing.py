"""What the bench times with, by device kind (``cpu``, ``cuda``, ``mps``): Composer's own device for the timed legs and
the probes, the clock, and the wait for the device at the edges of what is timed. Imports torch (and Composer, for a
device)."""

from __future__ import annotations

import contextlib
import ctypes
import sys
import time
from collections.abc import Iterator
from typing import Any, Callable

import torch

__all__ = ['THREADS', 'clock', 'composer_device', 'pin_allocator', 'pinned_threads', 'present', 'synchronize']


def present(device_kind: str) -> bool:
    """Whether torch sees a ``device_kind`` device (``cpu`` always: the fake accelerator runs on it)."""
    seen: dict[str, Callable[[], bool]] = {
        'cuda': torch.cuda.is_available,
        'mps': lambda: bool(getattr(torch.backends, 'mps', None) and torch.backends.mps.is_available()),
    }
    return bool(seen.get(device_kind, lambda: True)())


def composer_device(device_kind: str) -> Any:
    """Composer's own Device for ``device_kind`` (plain ``DeviceCPU`` on cpu: what the timed legs run on)."""
    from composer.devices import DeviceCPU, DeviceGPU, DeviceMPS

    return {'cpu': DeviceCPU, 'cuda': DeviceGPU, 'mps': DeviceMPS}[device_kind]()


def synchronize(device_kind: str) -> None:
    """Wait for the device (nothing to wait for on cpu)."""
    waits: dict[str, Callable[[], None]] = {'cuda': torch.cuda.synchronize, 'mps': lambda: torch.mps.synchronize()}
    waits.get(device_kind, lambda: None)()


def clock(device_kind: str) -> Callable[[], float]:
    """What a window (and a probe's sample) is timed with. On cpu the CPU time of this process: the legs run on the
    host, one torch thread, so that is their whole cost, and time the machine gives to other processes does not count
    (wall-clock windows on the shared 2-core machine moved a same-work ratio by 14% under load). On cuda/mps the wall
    clock, the device synchronised at the edges."""
    return {'cpu': time.process_time}.get(device_kind, time.perf_counter)


def pin_allocator() -> str:
    """Fix glibc's malloc thresholds for this process; say what was done (recorded in the fingerprint).

    glibc raises its mmap threshold as a process frees large blocks, and trims the heap top when enough is free, so the
    same code allocates a 1.5 MiB image batch from the heap in one window and page-faults a fresh mapping in the next:
    the whole-batch legs ran at ~1,850 or ~2,300 samples/s from window to window (Composer 0.29+ envs, 2-core
    machine), their ratio spread 7-13%. With both thresholds fixed every leg runs at one speed (spread ~1%). Both
    benches pin them before they build anything.
    """
    if not sys.platform.startswith('linux'):
        return 'default'
    try:
        libc = ctypes.CDLL('libc.so.6')
    except OSError:
        return 'default'
    m_trim_threshold, m_mmap_threshold = -1, -3  # glibc's mallopt parameters
    if libc.mallopt(m_mmap_threshold, 32 << 20) and libc.mallopt(m_trim_threshold, 128 << 20):
        return 'glibc: mmap threshold 32 MiB, trim threshold 128 MiB'
    return 'default'


#: torch's intra-op threads while a bench runs on the CPU fake accelerator.
THREADS = 1


@contextlib.contextmanager
def pinned_threads(device_kind: str) -> Iterator[int]:
    """On cpu, torch's intra-op threads fixed at :data:`THREADS` for the block, then put back; elsewhere unchanged.
    Yields the count in force (what the result's header states).

    torch.utils.benchmark's ``Timer`` runs with one thread unless told otherwise, for the reason measured here: with
    ``OMP_NUM_THREADS`` unset, torch's pool has a thread per core, and its threads spin (OpenMP busy-waits) while the
    core they wait for runs another process — on a shared 2-core machine one leg's rounds ran at 658, 81 and 660
    samples/s, and the same transform cost 0.98 ms on one leg and 94.5 on another. Fixed, the environment's
    ``OMP_NUM_THREADS`` no longer matters to the figures.
    """
    if device_kind != 'cpu':
        yield torch.get_num_threads()
        return
    before = torch.get_num_threads()
    torch.set_num_threads(THREADS)
    try:
        yield THREADS
    finally:
        torch.set_num_threads(before)
