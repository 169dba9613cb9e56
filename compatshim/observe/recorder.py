"""The one recorder of everything in compatshim that observes a run (the monitor, the pytest plugin's probe, the
bench, the doctor): where a transform saw its batch, how often and for how long (:class:`Tap`, reading tensor metadata
only), what crossed to the device (:class:`MoveCounter`), and the clocks. Imports torch; never Composer.
"""

from __future__ import annotations

import collections
import dataclasses
import sys
import time
from collections.abc import Mapping, Sequence
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
    kind = type(tensor)
    if kind is not torch.Tensor and getattr(kind, ON_ACCELERATOR, False):
        return True
    return on_accelerator_memory(tensor)


def tensors(batch: Any) -> list[torch.Tensor]:
    """Every tensor in ``batch``, in order, where Composer's ``Device.batch_to_device`` finds them: nested mappings and
    sequences (not strings or bytes) are searched, other leaves ignored."""
    found: list[torch.Tensor] = []
    _collect(batch, found)
    return found


def _collect(batch: Any, found: list[torch.Tensor]) -> None:
    kind = type(batch)
    if kind is list or kind is tuple:  # the common containers first: an ABC check costs more than the rest
        for item in batch:
            _collect(item, found)
    elif kind is dict:
        for item in batch.values():
            _collect(item, found)
    elif isinstance(batch, torch.Tensor):
        found.append(batch)
    elif isinstance(batch, Mapping):  # as Composer moves them: any mapping (Hugging Face's BatchEncoding is a UserDict)
        for item in batch.values():
            _collect(item, found)
    elif isinstance(batch, Sequence) and not isinstance(batch, _TEXT):
        for item in batch:
            _collect(item, found)


#: Sequences that are text: each item is text again, so they are leaves.
_TEXT = (str, bytes, bytearray, collections.UserString)


def placement(batch: Any) -> Placement:
    """``device`` if every tensor in ``batch`` (:func:`tensors`) is on an accelerator, ``host`` if none is, else
    ``mixed``; ``empty`` if it holds none."""
    found = tensors(batch)
    on = sum(1 for t in found if is_on_device(t))
    return _placed(on, len(found) - on)


def _placed(on: int, off: int) -> Placement:
    """The placement of a batch with ``on`` tensors on an accelerator and ``off`` on the host."""
    if not on:
        return Placement.HOST if off else Placement.EMPTY
    return Placement.MIXED if off else Placement.DEVICE


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
    order, in :attr:`seen`; ``placed``: how it reads where a batch is (the monitor's: from the device's last move,
    :meth:`MoveCounter.placement`).
    """

    def __init__(
        self,
        transform: Optional[Callable[[Any], Any]] = None,
        clock: Any = None,
        keep: bool = False,
        placed: Callable[[Any], Placement] = placement,
    ) -> None:
        self.transform, self.placed = transform, placed
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
        window, where = self.window, self.placed(batch)
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
    """What a Composer ``Device`` moves, counted where its own move walks the batch, once :meth:`install` has put the
    counting moves on that device *instance* (the class is untouched): ``tensor_to_device`` counts the bytes, by dtype,
    of each host tensor it moves and notes where the moved one is; ``batch_to_device`` times the move and keeps the
    batch it returned with its placement, so that a tap handed that very batch reads where it is from the move
    (:meth:`placement`) instead of walking its tensors again."""

    def __init__(self) -> None:
        self._bytes: dict[torch.dtype, int] = {}
        #: Host wall-clock seconds spent in ``batch_to_device`` since the last take (``time.perf_counter``).
        self.wall = 0.0
        #: Tensors the move being made left on the host, and put on an accelerator.
        self._landed = [0, 0]
        #: The batch the last move returned, and its placement (``None``: that move was not Composer's own walk).
        self._last: Any = None
        self._where: Optional[Placement] = None
        self._swaps: list[patching.Swap] = []

    def install(self, device: Any) -> MoveCounter:
        counts, landed, perf_counter = self._bytes, self._landed, time.perf_counter
        host_tensor = torch.Tensor

        def count(move: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[torch.Tensor], torch.Tensor]:
            def tensor_to_device(tensor: torch.Tensor) -> torch.Tensor:
                # is_on_device, inlined (this runs once per tensor moved), and asked again only of a new tensor
                kind = type(tensor)
                on = (kind is not host_tensor and getattr(kind, ON_ACCELERATOR, False)) or not tensor.is_cpu
                if not on:
                    dtype = tensor.dtype
                    counts[dtype] = counts.get(dtype, 0) + tensor.nbytes
                moved = move(tensor)
                if moved is not tensor:
                    kind = type(moved)
                    on = (kind is not host_tensor and getattr(kind, ON_ACCELERATOR, False)) or not moved.is_cpu
                landed[on] += 1
                return moved

            return tensor_to_device

        walks = _composers_walk(device)

        def time_it(move: Callable[[Any], Any]) -> Callable[[Any], Any]:
            def batch_to_device(batch: Any) -> Any:
                landed[0] = landed[1] = 0
                entered = perf_counter()
                moved = move(batch)
                self.wall += perf_counter() - entered
                if self._swaps:  # not after remove(), where it stays only beneath another's wrapper
                    self._last, self._where = moved, _placed(landed[1], landed[0]) if walks else None
                return moved

            return batch_to_device

        self._swaps = [
            patching.swap(device, 'tensor_to_device', count),
            patching.swap(device, 'batch_to_device', time_it),
        ]
        return self

    def remove(self) -> None:
        for done in reversed(self._swaps):
            done.undo()
        self._swaps, self._last = [], None

    def placement(self, batch: Any) -> Placement:
        """Where ``batch``'s tensors are: read from the last move where ``batch`` is what it returned, else
        :func:`placement`."""
        if batch is self._last and self._where is not None:
            self._last = None  # once: a transform after it may change that batch in place
            return self._where
        return placement(batch)

    def take(self) -> dict[str, int]:
        """The bytes counted since the last take, by dtype (largest first), and a fresh count."""
        counted = sorted(self._bytes.items(), key=lambda kv: -kv[1])
        self._bytes.clear()
        self.wall, self._last = 0.0, None
        return {str(dtype).replace('torch.', ''): n for dtype, n in counted}


def _composers_walk(device: Any) -> bool:
    """Whether ``device`` moves a batch with Composer's own ``Device.batch_to_device``, which sends every tensor it
    finds through ``tensor_to_device``: then the moved batch's placement is that of the tensors that method returned."""
    if 'batch_to_device' in getattr(device, '__dict__', {}):
        return False
    move = getattr(type(device), 'batch_to_device', None)  # the function, through a loop frame's interposer too
    composers = getattr(sys.modules.get('composer.devices.device'), 'Device', None)
    return composers is not None and move is vars(composers).get('batch_to_device')
