"""A transform's work, counted rather than timed: the torch operations it dispatches, the bytes they write (by dtype)
and the FLOPs of those torch counts (matmuls, convolutions). Counts do not depend on the machine's speed or load, so a
heavier transform shows on every runner, every time (docs/pipeline.md, "Work").

:class:`WorkCounter` wraps a transform: each call runs under a ``TorchDispatchMode`` (and torch's
``FlopCounterMode``) on a plain copy of the batch, with the random generators put back, before the real call:
nothing is timed, and the work is done twice, so it is used only in untimed steps. A view writes nothing; an
in-place op writes its output; a new tensor is written once. :class:`Work` (the record) imports nothing heavy;
counting imports torch.
"""

from __future__ import annotations

import collections
import collections.abc
import contextlib
import copy
import dataclasses
import functools
import random
import sys
import types
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Callable, Optional

if TYPE_CHECKING:
    import torch

__all__ = ['Work', 'WorkCounter', 'generators_kept']


@dataclasses.dataclass(frozen=True)
class Work:
    """What a transform did per call, on average over the calls counted (a transform whose work depends on its random
    draws averages over the draws of seeded steps: the same code gives the same figures).

    Attributes:
        calls: The calls counted.
        ops: Torch operations dispatched per call.
        bytes_by_dtype: Bytes written per call, by dtype (``uint8``, ``float32``, ...).
        flops: FLOPs per call, where torch counts them (matmuls, convolutions; 0 for elementwise work).
    """

    calls: int
    ops: float
    bytes_by_dtype: Mapping[str, float]
    flops: float

    @property
    def bytes(self) -> float:
        """Bytes written per call, every dtype."""
        return float(sum(self.bytes_by_dtype.values()))

    def to_json(self) -> dict[str, Any]:
        return {'calls': self.calls, 'ops': self.ops, 'bytes_by_dtype': dict(self.bytes_by_dtype), 'flops': self.flops}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Work:
        return cls(int(data['calls']), float(data['ops']), dict(data['bytes_by_dtype']), float(data['flops']))

    def text(self) -> str:
        """``12 ops, 3,465,424 B (float32 3,145,728, uint8 319,696), 0 FLOPs per call``."""
        dtypes = ', '.join(f'{dtype} {n:,.0f}' for dtype, n in sorted(self.bytes_by_dtype.items(), key=lambda i: -i[1]))
        return f'{self.ops:,.4g} ops, {self.bytes:,.0f} B ({dtypes or "none"}), {self.flops:,.0f} FLOPs per call'


def _own_generators(transform: Any, depth: int = 3) -> list[tuple[Any, Any]]:
    """The generators a transform holds (``torch.Generator``, ``random.Random``, numpy's), with their states: among its
    attributes, and theirs (a wrapper, a ``Compose`` of transforms, a ``functools.partial``), ``depth`` levels deep. A
    transform that draws from its own generator then draws the same in the real call too."""
    import torch

    held: list[tuple[Any, Any]] = []
    seen: set[int] = set()

    def visit(value: Any, left: int) -> None:
        if id(value) in seen or len(seen) > 256 or isinstance(value, (type, types.ModuleType, torch.Tensor)):
            return
        seen.add(id(value))
        if isinstance(value, torch.Generator):
            held.append((value, value.get_state()))
        elif isinstance(value, random.Random):
            held.append((value, value.getstate()))
        elif hasattr(value, 'bit_generator'):  # numpy.random.Generator
            held.append((value.bit_generator, value.bit_generator.state))
        elif hasattr(value, 'get_state') and hasattr(value, 'set_state') and hasattr(value, 'randint'):
            held.append((value, value.get_state()))  # numpy.random.RandomState
        elif left > 0:
            for item in _inside(value):
                visit(item, left - 1)

    visit(transform, depth)
    return held


def _inside(value: Any) -> list[Any]:
    """What a transform's attribute holds that may hold a generator: a list's or a dict's items, an object's
    attributes, a ``functools.partial``'s function and arguments."""
    if isinstance(value, (list, tuple)):
        return list(value)
    if isinstance(value, dict):
        return list(value.values())
    if isinstance(value, functools.partial):
        return [value.func, *value.args, *value.keywords.values()]
    cells = [cell.cell_contents for cell in getattr(value, '__closure__', None) or () if _filled(cell)]
    return cells + (list(vars(value).values()) if hasattr(value, '__dict__') else [])


def _filled(cell: Any) -> bool:
    try:
        cell.cell_contents  # noqa: B018 - an empty cell raises
    except ValueError:
        return False
    return True


def _plain_copy(leaf: Any) -> Any:
    """A leaf of the batch the counted call may change freely: a plain tensor's copy, a deep copy of an object that may
    hold tensors (a batch class of its own, a ``UserDict``), anything else as it is."""
    import torch

    if isinstance(leaf, torch.Tensor):
        return leaf.as_subclass(torch.Tensor).clone()
    if hasattr(leaf, '__dict__') or isinstance(leaf, collections.abc.Mapping):
        return copy.deepcopy(leaf)
    return leaf


def _put_back(generator: Any, state: Any) -> None:
    import torch

    if isinstance(generator, torch.Generator):
        generator.set_state(state)
    elif isinstance(generator, random.Random):
        generator.setstate(state)
    elif hasattr(generator, 'set_state'):  # numpy.random.RandomState
        generator.set_state(state)
    else:
        generator.state = state


@contextlib.contextmanager
def generators_kept(devices: Sequence[int] = (), held: Sequence[tuple[Any, Any]] = ()) -> Iterator[None]:
    """Python's and numpy's (if imported) random generators, torch's on the host and on the cuda ``devices``, and the
    ``(generator, state)`` pairs of ``held``, as they were before the block, whatever it drew."""
    import torch

    numpy = sys.modules.get('numpy')
    python_state, numpy_state = random.getstate(), numpy.random.get_state() if numpy is not None else None
    try:
        with torch.random.fork_rng(devices=list(devices)):
            yield
    finally:
        random.setstate(python_state)
        if numpy is not None:
            numpy.random.set_state(numpy_state)
        for generator, state in held:
            _put_back(generator, state)


def _generators_kept(batch: Any, transform: Any) -> contextlib.AbstractContextManager[None]:
    """Every random generator a transform may draw from (Python's, numpy's, torch's on the host and on the batch's
    accelerator, and those the transform object holds) as it was before the block."""
    import torch
    from torch.utils._pytree import tree_flatten

    leaves = tree_flatten(batch)[0]
    devices = sorted({t.device.index or 0 for t in leaves if isinstance(t, torch.Tensor) and t.is_cuda})
    return generators_kept(devices, _own_generators(transform))


def _storage(tensor: torch.Tensor) -> Optional[int]:
    try:
        return int(tensor.untyped_storage().data_ptr())
    except (RuntimeError, NotImplementedError):  # a tensor with no storage of its own (sparse, nested, ...)
        return None


@functools.cache
def _dispatch_counter() -> type:
    """A ``TorchDispatchMode`` that counts every op and the bytes its outputs write (made once, when first asked:
    importing this module imports no torch)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    class Dispatches(TorchDispatchMode):  # type: ignore[no-untyped-call]  # an untyped base
        def __init__(self) -> None:
            super().__init__()  # type: ignore[no-untyped-call]
            self.ops = 0
            self.bytes: collections.Counter[str] = collections.Counter()

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            out = func(*args, **(kwargs or {}))
            self.ops += 1
            inputs = {_storage(t) for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)}
            returns = func._schema.returns
            for index, tensor in enumerate(t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)):
                alias = returns[index].alias_info if index < len(returns) else None
                written = alias.is_write if alias is not None else _storage(tensor) not in inputs
                if written:
                    self.bytes[str(tensor.dtype).removeprefix('torch.')] += tensor.numel() * tensor.element_size()
            return out

    return Dispatches


class WorkCounter:
    """A transform wrapper that counts the work of every call (:meth:`work` gives it per call).

    Args:
        transform: The transform to wrap (called with the batch; its result is returned).
    """

    def __init__(self, transform: Callable[[Any], Any]) -> None:
        self.transform = transform
        #: Why counting stopped (``None``: it did not): a transform torch cannot count is reported, never fatal.
        self.failed: Optional[str] = None
        self.calls = 0
        self.ops = 0
        self.flops = 0
        self.bytes: collections.Counter[str] = collections.Counter()

    def __call__(self, batch: Any) -> Any:
        if self.failed is None:
            try:
                self._count(batch)
            except Exception as exc:  # noqa: BLE001 - a transform torch cannot count is reported, never fatal
                self.failed = f'{type(exc).__name__}: {exc}'.splitlines()[0]
        return self.transform(batch)

    def _count(self, batch: Any) -> None:
        """One counted call, on a plain copy of ``batch`` (tensor subclasses such as the fake accelerator's do not mix
        with a dispatch mode; an in-place transform must not touch the real batch), with every random generator put
        back after it, so that the real call draws what the counted one drew: the counts are of the real call."""
        from torch.utils._pytree import tree_map
        from torch.utils.flop_counter import FlopCounterMode

        dispatches, flops = _dispatch_counter()(), FlopCounterMode(display=False)
        plain = tree_map(_plain_copy, batch)
        with _generators_kept(plain, self.transform), flops, dispatches:
            self.transform(plain)
        self.calls += 1
        self.ops += dispatches.ops
        self.bytes.update(dispatches.bytes)
        self.flops += int(flops.get_total_flops())

    def work(self) -> Optional[Work]:
        """The work per call so far (``None``: never called)."""
        if not self.calls:
            return None
        per_call = {dtype: n / self.calls for dtype, n in self.bytes.items() if n}
        return Work(self.calls, self.ops / self.calls, per_call, self.flops / self.calls)
