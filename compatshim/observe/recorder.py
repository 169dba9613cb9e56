"""The one recorder of everything in compatshim that observes a run (the monitor, the pytest plugin's probe, the
bench, the doctor): where a transform saw its batch, how often and for how long (:class:`Tap`, reading tensor metadata
only), what crossed to the device (:class:`MoveCounter`), and the clocks. Imports torch; never Composer.
"""

from __future__ import annotations

import collections
import dataclasses
import operator
import sys
import time
from collections.abc import Mapping, Sequence
from itertools import compress, repeat
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
        items: Any = batch
    elif kind is dict:
        items = batch.values()
    elif isinstance(batch, torch.Tensor):
        found.append(batch)
        return
    elif isinstance(batch, Mapping):  # as Composer moves them: any mapping (Hugging Face's BatchEncoding is a UserDict)
        items = batch.values()
    elif isinstance(batch, Sequence) and not isinstance(batch, _TEXT):
        items = batch
    else:
        return
    tensor, append = torch.Tensor, found.append
    for item in items:
        if type(item) is tensor:  # the common leaf, taken without a call
            append(item)
        else:
            _collect(item, found)


#: Sequences that are text: each item is text again, so they are leaves.
_TEXT = (str, bytes, bytearray, collections.UserString)


def placement(batch: Any) -> Placement:
    """``device`` if every tensor in ``batch`` (:func:`tensors`) is on an accelerator, ``host`` if none is, else
    ``mixed``; ``empty`` if it holds none."""
    found = tensors(batch)
    with _untraced():
        return _placed(*_on_off(found))


_is_cpu, _dtype, _nbytes = operator.attrgetter('is_cpu'), operator.attrgetter('dtype'), operator.attrgetter('nbytes')
#: While it is entered, reading ``is_cpu``, ``dtype`` or ``nbytes`` of a tensor subclass with a ``__torch_function__``
#: (torchvision's tv_tensors, the fake accelerator's) skips that function: 0.1 µs a read instead of 4-6 µs, same value.
_untraced = torch._C.DisableTorchFunctionSubclass


def _on_off(found: list[Any]) -> tuple[int, int]:
    """How many tensors of ``found`` are on an accelerator (:func:`is_on_device`) and how many on the host, read in C,
    a pass per attribute, not a Python call per tensor: by ``is_cpu``, or by its class where a class marks its tensors
    as on the fake accelerator. Anything but a tensor (what a Device of the user's may return) is neither. Called
    inside :data:`_untraced`."""
    kinds = set(map(type, found))
    if not all(issubclass(kind, torch.Tensor) for kind in kinds):
        found = [t for t in found if isinstance(t, torch.Tensor)]
        kinds = set(map(type, found))
    if not kinds or kinds == {torch.Tensor}:
        off = sum(map(_is_cpu, found))
        return len(found) - off, off
    marked = {kind: kind is not torch.Tensor and bool(getattr(kind, ON_ACCELERATOR, False)) for kind in kinds}
    if all(marked.values()):
        return len(found), 0
    on = sum(map(operator.or_, map(marked.__getitem__, map(type, found)), map(operator.not_, map(_is_cpu, found))))
    return on, len(found) - on


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
    of each host tensor it moves; ``batch_to_device`` times the move and keeps the batch it returned with its
    placement, so that a tap handed that very batch reads where it is from the move (:meth:`placement`) instead of
    walking its tensors again. Inside a batch's move ``tensor_to_device`` only lists each tensor and what it returned
    (two appends); the move's end reads their bytes, dtypes and places in C, a pass per attribute
    (:meth:`_landed`), not in Python per tensor."""

    def __init__(self) -> None:
        self._bytes: dict[torch.dtype, int] = {}
        #: Host wall-clock seconds spent in ``batch_to_device`` since the last take (``time.perf_counter``).
        self.wall = 0.0
        #: The batch the last move returned, and its placement (``None``: that move was not Composer's own walk).
        self._last: Any = None
        self._where: Optional[Placement] = None
        self._swaps: list[patching.Swap] = []

    def install(self, device: Any) -> MoveCounter:
        counts, perf_counter = self._bytes, time.perf_counter
        host_tensor = torch.Tensor
        given: list[torch.Tensor] = []  # inside a batch's move: each tensor given to tensor_to_device, and what it gave
        gave: list[Any] = []
        listed, listing = given.append, gave.append
        walking = False

        def count(move: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[torch.Tensor], torch.Tensor]:
            def tensor_to_device(tensor: torch.Tensor) -> torch.Tensor:
                if walking:  # a batch's move: read at its end
                    listed(tensor)
                    moved = move(tensor)
                    listing(moved)
                    return moved
                # a tensor moved on its own (Composer's loss and counts): is_on_device, inlined
                kind = type(tensor)
                if not ((kind is not host_tensor and getattr(kind, ON_ACCELERATOR, False)) or not tensor.is_cpu):
                    dtype = tensor.dtype
                    counts[dtype] = counts.get(dtype, 0) + tensor.nbytes
                return move(tensor)

            return tensor_to_device

        walks = _composers_walk(device)

        def time_it(move: Callable[[Any], Any]) -> Callable[[Any], Any]:
            def batch_to_device(batch: Any) -> Any:
                nonlocal walking
                outer, walking = walking, True
                entered = perf_counter()
                try:
                    moved = move(batch)
                finally:
                    walking = outer
                    where = self._landed(given, gave) if not outer else None
                self.wall += perf_counter() - entered
                if self._swaps and not outer:  # not after remove(), where it stays only beneath another's wrapper
                    self._last, self._where = moved, where if walks else None
                return moved

            return batch_to_device

        self._swaps = [
            patching.swap(device, 'tensor_to_device', count),
            patching.swap(device, 'batch_to_device', time_it),
        ]
        return self

    def _landed(self, given: list[torch.Tensor], gave: list[Any]) -> Placement:
        """The bytes, by dtype, of the host tensors of ``given`` (added to the count, each dtype where it first
        appears), and the placement of what the move gave back (``gave``); both lists emptied."""
        try:
            with _untraced():
                return self._read(given, gave)
        finally:
            given.clear()
            gave.clear()

    def _read(self, given: list[torch.Tensor], gave: list[Any]) -> Placement:
        """:meth:`_landed`'s reading, inside :data:`_untraced`: a pass in C per attribute read."""
        on, off = _on_off(gave)
        same = len(given) == len(gave) and all(map(operator.is_, given, gave))  # the move left them where they were
        given_on = on if same else _on_off(given)[0]
        host = given if not given_on else [] if given_on == len(given) else [t for t in given if not is_on_device(t)]
        counts, dtypes, sizes = self._bytes, list(map(_dtype, host)), list(map(_nbytes, host))
        kinds = dict.fromkeys(dtypes)
        for dtype in kinds:
            n = sum(sizes) if len(kinds) == 1 else sum(compress(sizes, map(operator.is_, dtypes, repeat(dtype))))
            counts[dtype] = counts.get(dtype, 0) + n
        return _placed(on, off)

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
