"""The one recorder of everything in compatshim that observes a run (the monitor, the pytest plugin's probe, the
bench, the doctor): where a transform saw its batch, how often and for how long (:class:`Tap`, reading tensor metadata
only), what crossed to the device (:class:`MoveCounter`), and the clocks. Imports torch; never Composer.
"""

from __future__ import annotations

import collections
import dataclasses
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Callable, Optional

import torch

from compatshim.devices.accelerator import on_accelerator_memory
from compatshim.observe.placement import Placement
from compatshim.shim import notes, patching

if TYPE_CHECKING:
    from compatshim.devices.accelerator import Accelerator

__all__ = ['MoveCounter', 'Tap', 'Window', 'clock_for', 'is_on_device', 'placement', 'summarize_places', 'tensors']


#: Class attribute marking a tensor subclass that stands for device memory (the CPU fake accelerator's tensors).
ON_ACCELERATOR = '_compatshim_on_accelerator'


def is_on_device(tensor: torch.Tensor) -> bool:
    """Whether ``tensor`` is on an accelerator: any device but the host (cuda, mps, xla, ...), or the CPU fake one."""
    return getattr(type(tensor), ON_ACCELERATOR, False) or on_accelerator_memory(tensor)


def tensors(batch: Any) -> list[torch.Tensor]:
    """Every tensor in ``batch``: nested mappings, lists and tuples are searched, other leaves ignored."""
    if isinstance(batch, torch.Tensor):
        return [batch]
    if isinstance(batch, Mapping):  # as Composer moves them: any mapping (Hugging Face's BatchEncoding is a UserDict)
        return [t for v in batch.values() for t in tensors(v)]
    if isinstance(batch, (list, tuple)):
        return [t for v in batch for t in tensors(v)]
    return []


def placement(batch: Any) -> Placement:
    """``device`` if every tensor in ``batch`` (:func:`tensors`) is on an accelerator, ``host`` if none is, else
    ``mixed``; ``empty`` if it holds none."""
    found = tensors(batch)
    if not found:
        return Placement.EMPTY
    on = [is_on_device(t) for t in found]
    return Placement.DEVICE if all(on) else Placement.HOST if not any(on) else Placement.MIXED


def summarize_places(places: collections.Counter[Placement]) -> Placement:
    """The placements of a window's calls as one: the one seen, ``mixed``, or ``never called``."""
    seen = [p for p in places if places[p]]
    return Placement.NEVER_CALLED if not seen else Placement(seen[0]) if len(seen) == 1 else Placement.MIXED


class _HostClock:
    """Host work: this process's CPU time (all its threads), read around each call."""

    def start(self) -> float:
        return time.process_time()

    def stop(self, started: Any, window: Window) -> None:
        window.seconds += time.process_time() - started

    def collect(self, final: bool = False) -> list[tuple[int, float]]:
        return []


class _EventClock:
    """Device work: a pair of timing events around each call, read once both have completed, so that the host never
    waits for the device; only ``collect(final=True)`` (at the end of a fit, eval or predict) waits for the last."""

    def __init__(self, event: Callable[[], Any]) -> None:
        self.event = event
        self.pending: collections.deque[tuple[int, Any, Any]] = collections.deque()

    def start(self) -> Any:
        begin = self.event()
        begin.record()
        return begin

    def stop(self, started: Any, window: Window) -> None:
        end = self.event()
        end.record()
        self.pending.append((window.id, started, end))
        window.timed_later += 1

    def collect(self, final: bool = False) -> list[tuple[int, float]]:
        """``(window id, seconds)`` of every pair that has completed, oldest first."""
        done = []
        while self.pending:
            window_id, begin, end = self.pending[0]
            if final:
                end.synchronize()
            elif not end.query():
                break
            self.pending.popleft()
            done.append((window_id, begin.elapsed_time(end) / 1e3))
        return done


def clock_for(accelerator: Optional[Accelerator] = None) -> Any:
    """The clock for a transform running on ``accelerator``: its timing events where torch has them here (cuda, mps),
    else the host's CPU time."""
    event = None if accelerator is None else accelerator.event()
    return _HostClock() if event is None else _EventClock(event)


@dataclasses.dataclass
class Window:
    """What one tap saw in one window: calls, their placements, and the time measured so far."""

    id: int = 0
    calls: int = 0
    places: collections.Counter[Placement] = dataclasses.field(default_factory=collections.Counter)
    seconds: float = 0.0
    #: Calls whose time is still on the device (event clock): added when their events have completed.
    timed_later: int = 0
    #: Host wall-clock seconds spent inside the calls, whatever the clock times them with.
    wall: float = 0.0

    @property
    def where(self) -> Placement:
        return summarize_places(self.places)


class Tap:
    """Counts a transform's calls, each call's input placement, and the time the calls took, per window.

    The monitor's taps are called through :meth:`call`; given a ``transform``, the tap is also a callable standing for
    it. ``clock``: :func:`clock_for` (default: the host's CPU time); ``keep``: also keep every call's placement, in
    order, in :attr:`seen`.
    """

    def __init__(self, transform: Optional[Callable[[Any], Any]] = None, clock: Any = None, keep: bool = False) -> None:
        self.transform = transform
        if transform is not None:
            self.__wrapped__ = transform
            self.__qualname__ = notes.transform_name(transform)
        self.clock = clock if clock is not None else _HostClock()
        self.window = Window()
        self.seen: Optional[list[Placement]] = [] if keep else None

    def __call__(self, batch: Any) -> Any:
        assert self.transform is not None, 'a Tap made without a transform is called through call()'
        return self.call(self.transform, batch)

    def call(self, transform: Callable[[Any], Any], batch: Any) -> Any:
        """``transform(batch)``, counted and timed in the current window."""
        window, where = self.window, placement(batch)
        window.calls += 1
        window.places[where] += 1
        if self.seen is not None:
            self.seen.append(where)
        entered, started = time.perf_counter(), self.clock.start()
        out = transform(batch)
        self.clock.stop(started, window)
        window.wall += time.perf_counter() - entered
        return out

    def take(self, next_id: int = 0) -> Window:
        """The current window, and a fresh one (``next_id``) in its place."""
        window, self.window = self.window, Window(next_id)
        return window

    def __repr__(self) -> str:
        return f'Tap({self.transform!r})'


class MoveCounter:
    """Counts the bytes, by dtype, of the host tensors a Composer ``Device`` moves (``tensor_to_device``), once
    :meth:`install` has put the counting move on that device *instance* (the class is untouched)."""

    def __init__(self) -> None:
        self.bytes: dict[str, int] = {}
        #: Host wall-clock seconds spent moving tensors since the last take (``time.perf_counter``).
        self.wall = 0.0
        self._installed: Optional[patching.Swap] = None

    def __call__(self, tensor: torch.Tensor) -> torch.Tensor:
        if not is_on_device(tensor):
            name = str(tensor.dtype).replace('torch.', '')
            self.bytes[name] = self.bytes.get(name, 0) + tensor.nbytes
        assert self._installed is not None
        entered = time.perf_counter()
        moved: torch.Tensor = self._installed.original(tensor)
        self.wall += time.perf_counter() - entered
        return moved

    def install(self, device: Any) -> MoveCounter:
        self._installed = patching.swap(device, 'tensor_to_device', lambda move: self)
        return self

    def remove(self) -> None:
        if self._installed is not None:
            self._installed.undo()

    def take(self) -> dict[str, int]:
        """The bytes counted since the last take, by dtype (largest first), and a fresh count."""
        counted, self.bytes, self.wall = self.bytes, {}, 0.0
        return dict(sorted(counted.items(), key=lambda kv: -kv[1]))
