"""A transform's work, counted rather than timed (docs/pipeline.md, "Work per call"): :class:`WorkCounter` runs each
call once more under a ``TorchDispatchMode``, on a plain copy of the batch, every random generator put back.
:class:`Work` imports nothing heavy.
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
from typing import TYPE_CHECKING, Any, Callable, Optional, TypeVar

if TYPE_CHECKING:
    import torch

__all__ = [
    'COUNTING', 'Generators', 'Work', 'WorkCounter', 'amount', 'compiled', 'generators_kept', 'held_by', 'seed_all'
]  # fmt: skip

#: How work is counted: counts compare only with counts made alike. 3: every leg from one random state, seeded
#: right before the counted steps (whatever an import drew before), the generators a transform holds put back, the
#: elements that leave torch counted.
COUNTING = 3


def amount(value: float) -> str:
    """A count, or a mean of counts over calls or steps: whole as a whole number (``393,508``), a mean that is not
    whole to the decimal that makes it exact where one does (``280,198.5``), else to two: the one way a count is
    shown."""
    if float(value).is_integer():
        return f'{value:,.0f}'
    return f'{value:,.1f}' if float(value * 10).is_integer() else f'{value:,.2f}'


@dataclasses.dataclass(frozen=True)
class Work:
    """What a transform did per call over the ``calls`` counted: torch ops, bytes written by dtype, FLOPs,
    ``outside``, the elements that left torch or came in by route (``Tensor.tolist``...; empty: fully counted), and
    ``by_op``, each op's calls and bytes written (``aten.add.Tensor``; ``None``: a result counted before it was kept),
    which tell how torch dispatched the same code on another release."""

    calls: int
    ops: float
    bytes_by_dtype: Mapping[str, float]
    flops: float
    outside: Mapping[str, float] = dataclasses.field(default_factory=dict)
    by_op: Optional[Mapping[str, tuple[float, float]]] = None

    @property
    def fully_counted(self) -> bool:
        return not self.outside

    def outside_text(self) -> str:
        """``Tensor.numpy 30,720 elements per call`` (``''``: fully counted)."""
        routes = ', '.join(f'{route} {amount(n)}' for route, n in sorted(self.outside.items(), key=lambda i: -i[1]))
        return f'{routes} elements per call' if routes else ''

    def counts(self) -> dict[str, float]:
        routes = {f'{route} elements': n for route, n in sorted(self.outside.items())}
        return {'ops': self.ops, 'bytes': self.bytes, 'flops': self.flops, **routes}

    def writes(self) -> dict[str, tuple[float, float]]:
        """The ops that wrote bytes, with their calls and bytes per call: what torch cannot dispatch otherwise without
        changing the work (a view writes nothing, and torch 2.15 dispatches fewer of them for the same code)."""
        return {op: (calls, written) for op, (calls, written) in (self.by_op or {}).items() if written}

    def across_torch(self) -> dict[str, float]:
        """The counts judged across torch releases (:meth:`writes`): bytes, FLOPs, the ops that write, the routes."""
        counted = self.counts()
        del counted['ops']
        return {'ops that write': sum(calls for calls, _ in self.writes().values()), **counted}

    @property
    def bytes(self) -> float:
        return float(sum(self.bytes_by_dtype.values()))

    def to_json(self) -> dict[str, Any]:
        counted = {'calls': self.calls, 'ops': self.ops, 'bytes_by_dtype': dict(self.bytes_by_dtype)}
        counted['flops'] = self.flops
        counted = {**counted, 'outside': dict(self.outside)} if self.outside else counted
        return counted if self.by_op is None else {**counted, 'by_op': {op: list(n) for op, n in self.by_op.items()}}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Work:
        outside = {route: float(n) for route, n in dict(data.get('outside') or {}).items()}
        kept = data.get('by_op')
        by_op = None if kept is None else {op: (float(calls), float(written)) for op, (calls, written) in kept.items()}
        bytes_by_dtype, flops = dict(data['bytes_by_dtype']), float(data['flops'])
        return cls(int(data['calls']), float(data['ops']), bytes_by_dtype, flops, outside, by_op)

    def text(self) -> str:
        """``12 ops, 3,465,424 B (float32 3,145,728, uint8 319,696), 0 FLOPs per call``, each a mean over the calls
        counted (``per call, the mean of 4``), and where the work left torch (``; not fully counted: work left torch
        through Tensor.numpy 30,720 elements per call``)."""
        dtypes = ', '.join(
            f'{dtype} {amount(n)}' for dtype, n in sorted(self.bytes_by_dtype.items(), key=lambda i: -i[1])
        )
        per_call = 'per call' if self.calls == 1 else f'per call (the mean of {self.calls})'
        counted = f'{amount(self.ops)} ops, {amount(self.bytes)} B ({dtypes or "none"}), {amount(self.flops)} FLOPs'
        counted = f'{counted} {per_call}'
        return counted + (f'; not fully counted: work left torch through {self.outside_text()}' if self.outside else '')


#: A generator held by a transform, and what puts its state of now back.
Held = tuple[Any, Callable[[], Any]]
Found = TypeVar('Found')


def _generator(value: Any) -> Optional[Held]:
    import torch

    numpy = sys.modules.get('numpy')
    if isinstance(value, torch.Generator) or (numpy is not None and isinstance(value, numpy.random.RandomState)):
        return value, functools.partial(value.set_state, value.get_state())
    if isinstance(value, random.Random):
        return value, functools.partial(value.setstate, value.getstate())
    if numpy is not None and isinstance(value, numpy.random.Generator):
        bits = value.bit_generator
        return bits, functools.partial(setattr, bits, 'state', bits.state)
    return None


def held_by(transform: Any) -> list[Held]:
    """The generators ``transform`` holds with their states (:func:`reached`): the real call draws what the counted one
    did."""
    return reached(transform, _generator)


def _compiled(value: Any) -> Optional[Any]:
    try:  # a function torch.compile made (not one that torch.compiler.disable marked), or a module it compiled
        wrapped = hasattr(value, '_torchdynamo_orig_callable') and not hasattr(value, '_torchdynamo_disable')
        wrapped = wrapped or type(value).__name__ == 'OptimizedModule'
    except Exception:  # noqa: BLE001 - an object's own __getattr__ may raise anything
        return None
    return value if wrapped else None


def compiled(transform: Any) -> bool:
    """Whether ``transform`` reaches a ``torch.compile``d function or module (:func:`reached`; at the top of a module,
    only one its code names: a ``model = torch.compile(...)`` beside it is not its own)."""
    return bool(reached(transform, _compiled, named=True))


def _names(code: Any) -> set[str]:
    """The global names ``code`` (a code object) and the code nested in it read."""
    names = set(code.co_names)
    for const in code.co_consts:
        names |= _names(const) if isinstance(const, types.CodeType) else set()
    return names


def reached(transform: Any, pick: Callable[[Any], Optional[Found]], depth: int = 3, named: bool = False) -> list[Found]:
    """What ``pick`` finds in what ``transform`` reaches ``depth`` levels deep, and at the top of the modules defining
    it (``RNG = numpy.random.default_rng(0)``; ``named``: only a name the code reached reads)."""
    import torch

    found: list[Found] = []
    seen: set[int] = set()
    modules: dict[str, Mapping[str, Any]] = {}
    read: set[str] = set()

    def visit(value: Any, left: int) -> None:
        if id(value) in seen or len(seen) > 256 or isinstance(value, (type, types.ModuleType, torch.Tensor)):
            return
        seen.add(id(value))
        picked = pick(value)
        if picked is not None:
            found.append(picked)
            return
        defined_in = getattr(value, '__globals__', None)  # a function: its module's namespace
        called = vars(type(value)).get('__call__')  # an object of a class: what its call reads
        for code in (getattr(value, '__code__', None), getattr(called, '__code__', None)):
            read.update(_names(code) if isinstance(code, types.CodeType) else ())
        if isinstance(defined_in, dict) and not str(defined_in.get('__name__')).startswith('torch.'):
            modules.setdefault(str(defined_in.get('__name__')), defined_in)
        elif hasattr(value, '__dict__') and not callable(getattr(value, '__func__', None)):
            module = sys.modules.get(type(value).__module__)  # an object of a class: the class's module
            if module is not None and type(value).__module__ not in ('builtins', 'functools'):
                modules.setdefault(module.__name__, vars(module))
        if left > 0:
            for item in _inside(value):
                visit(item, left - 1)

    visit(transform, depth)
    for namespace in list(modules.values()):
        for name, value in list(namespace.items()):  # not a dunder: Dynamo keeps its compiled frames there
            skip = name.startswith('__') or id(value) in seen or isinstance(value, (type, types.ModuleType))
            skip = skip or (named and name not in read)
            picked = None if skip else pick(value)
            if picked is not None:
                seen.add(id(value))
                found.append(picked)
    return found


def _inside(value: Any) -> list[Any]:
    """What may hold a generator in ``value``: items, attributes, a partial's parts, a method's object and function,
    what a decorator wraps, a closure's cells."""
    if isinstance(value, (list, tuple, set, frozenset)):
        return list(value)
    if isinstance(value, dict):
        return list(value.values())
    if isinstance(value, functools.partial):
        return [value.func, *value.args, *value.keywords.values()]
    found = []
    for name in ('__self__', '__func__', '__wrapped__'):  # a bound method, a decorated function
        try:
            inner = getattr(value, name, None)
        except Exception:  # noqa: BLE001 - an object's own __getattr__ may raise anything
            inner = None
        if inner is not None and not isinstance(inner, types.ModuleType):  # a builtin's __self__ is its module
            found.append(inner)
    for cell in getattr(value, '__closure__', None) or ():
        with contextlib.suppress(ValueError):  # an empty cell
            found.append(cell.cell_contents)
    if not isinstance(value, (types.MethodType, types.BuiltinMethodType)):  # a method's __dict__ is its function's
        try:
            found += list(vars(value).values())
        except TypeError:  # no __dict__
            pass
    return found


def _plain_copy(leaf: Any) -> Any:
    """A leaf of the batch the counted call may change: a plain tensor's copy, an object's deep copy."""
    import torch

    if isinstance(leaf, torch.Tensor):
        return leaf.as_subclass(torch.Tensor).clone()
    if hasattr(leaf, '__dict__') or isinstance(leaf, collections.abc.Mapping):
        return copy.deepcopy(leaf)
    return leaf


class Generators:
    """Every random generator's state now (Python's, numpy's, torch's on every device: ``devices``, and ``held``), to
    put back as often as asked."""

    def __init__(self, held: Sequence[Held] = ()) -> None:
        import torch

        numpy, mps, cuda = sys.modules.get('numpy'), getattr(torch.backends, 'mps', None), torch.cuda
        puts: list[tuple[str, Callable[[Any], Any], Any]] = [('', random.setstate, random.getstate())]
        puts += [('', numpy.random.set_state, numpy.random.get_state())] if numpy is not None else []
        puts += [('cpu', torch.set_rng_state, torch.get_rng_state())]
        puts += [('cuda', cuda.set_rng_state_all, cuda.get_rng_state_all())] if cuda.is_available() else []
        puts += [('mps', torch.mps.set_rng_state, torch.mps.get_rng_state())] if mps and mps.is_available() else []
        self.devices = [device for device, _, _ in puts if device]
        self.puts = [functools.partial(put, state) for _, put, state in puts] + [put for _, put in held]

    def put_back(self) -> None:
        for put in self.puts:
            put()


def seed_all(seed: int = 0) -> None:
    """Python's, numpy's (where imported) and torch's generators (every device's) seeded with ``seed``."""
    import torch

    random.seed(seed)
    numpy = sys.modules.get('numpy')
    if numpy is not None:
        numpy.random.seed(seed)
    torch.manual_seed(seed)


@contextlib.contextmanager
def generators_kept(held: Sequence[Held] = ()) -> Iterator[None]:
    """Every random generator as it was before the block, whatever it drew."""
    kept = Generators(held)
    try:
        yield
    finally:
        kept.put_back()


def _storage(tensor: torch.Tensor) -> Optional[int]:
    try:
        return int(tensor.untyped_storage().data_ptr())
    except (RuntimeError, NotImplementedError):  # a tensor with no storage of its own (sparse, nested, ...)
        return None


@functools.cache
def _dispatch_counter() -> type:
    """A ``TorchDispatchMode`` counting every op and the bytes its outputs write (a view: none)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    class Dispatches(TorchDispatchMode):  # type: ignore[no-untyped-call]  # an untyped base
        def __init__(self, crossings: Any) -> None:
            super().__init__()  # type: ignore[no-untyped-call]
            self.bytes: collections.Counter[str] = collections.Counter()
            self.by_op: collections.Counter[str] = collections.Counter()
            self.op_bytes: collections.Counter[str] = collections.Counter()
            self.crossings = crossings

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            out = func(*args, **(kwargs or {}))
            op = str(func)
            self.by_op[op] += 1
            if func is torch.ops.aten.lift_fresh.default and not self.crossings.depth and out.numel() > 1:
                # a tensor made from outside data by no torch function the crossings saw: torch.from_numpy
                self.crossings.elements['torch.from_numpy'] += out.numel()
            inputs = {_storage(t) for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)}
            returns = func._schema.returns
            for index, tensor in enumerate(t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)):
                alias = returns[index].alias_info if index < len(returns) else None
                written = alias.is_write if alias is not None else _storage(tensor) not in inputs
                if written:
                    size = tensor.numel() * tensor.element_size()
                    self.bytes[str(tensor.dtype).removeprefix('torch.')] += size
                    self.op_bytes[op] += size
            return out

    return Dispatches


#: Tensor methods that hand a tensor's data out of torch (to numpy, to Python lists).
EXPORTS = ('numpy', 'tolist', '__array__')


@functools.cache
def _crossing_watch() -> type:
    """A ``TorchFunctionMode`` counting by route the elements that leave torch (:data:`EXPORTS`) or come in as numpy
    arrays, single ones excepted; ``depth``: non-zero inside a torch function."""
    import torch
    from torch.overrides import TorchFunctionMode

    class Crossings(TorchFunctionMode):
        def __init__(self) -> None:
            super().__init__()
            self.elements: collections.Counter[str] = collections.Counter()
            self.depth = 0

        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            kwargs = kwargs or {}
            name = getattr(func, '__name__', '')
            owner = 'Tensor' if getattr(func, '__qualname__', '').startswith(('Tensor', '_TensorBase')) else 'torch'
            if name in EXPORTS and args and isinstance(args[0], torch.Tensor) and args[0].numel() > 1:
                self.elements[f'Tensor.{name}'] += args[0].numel()
            numpy = sys.modules.get('numpy')
            if numpy is not None:
                for value in (*args, *kwargs.values()):
                    for item in value if isinstance(value, (list, tuple)) else (value,):
                        if isinstance(item, numpy.ndarray) and item.size > 1:
                            self.elements[f'numpy array into {owner}.{name}'] += int(item.size)
            self.depth += 1
            try:
                return func(*args, **kwargs)
            finally:
                self.depth -= 1

    return Crossings


class WorkCounter:
    """A transform wrapper counting the work of every call; one torch cannot count is reported (``failed``)."""

    def __init__(self, transform: Callable[[Any], Any]) -> None:
        self.transform = transform
        self.failed: Optional[str] = None  # why counting stopped
        self.calls = 0
        self.flops = 0
        self.bytes: collections.Counter[str] = collections.Counter()
        self.outside: collections.Counter[str] = collections.Counter()
        self.by_op: collections.Counter[str] = collections.Counter()
        self.op_bytes: collections.Counter[str] = collections.Counter()

    def __call__(self, batch: Any) -> Any:
        if self.failed is None:
            try:
                self._count(batch)
            except Exception as exc:  # noqa: BLE001 - a transform torch cannot count is reported, never fatal
                self.failed = f'{type(exc).__name__}: {exc}'.splitlines()[0]
        return self.transform(batch)

    def _count(self, batch: Any) -> None:
        """One counted call on a plain copy of ``batch`` (a subclass does not mix with a dispatch mode; an in-place
        transform must not touch the real batch), every generator put back after it."""
        from torch.utils._pytree import tree_map
        from torch.utils.flop_counter import FlopCounterMode

        crossings = _crossing_watch()()
        dispatches, flops = _dispatch_counter()(crossings), FlopCounterMode(display=False)
        plain = tree_map(_plain_copy, batch)
        dynamo = sys.modules.get('torch._dynamo')  # off: a torch.compile'd transform counted as written, never traced
        eager = dynamo.config.patch(disable=True) if dynamo is not None else contextlib.nullcontext()
        with generators_kept(held_by(self.transform)), eager, flops, dispatches, crossings:
            self.transform(plain)
        self.calls += 1
        self.bytes.update(dispatches.bytes)
        self.flops += int(flops.get_total_flops())
        self.outside.update(crossings.elements)
        self.by_op.update(dispatches.by_op)
        self.op_bytes.update(dispatches.op_bytes)

    def work(self) -> Optional[Work]:
        if not self.calls:
            return None
        per_call = {dtype: n / self.calls for dtype, n in self.bytes.items() if n}
        outside = {route: n / self.calls for route, n in self.outside.items() if n}
        by_op = {op: (n / self.calls, self.op_bytes[op] / self.calls) for op, n in sorted(self.by_op.items())}
        ops = sum(self.by_op.values()) / self.calls
        return Work(self.calls, ops, per_call, self.flops / self.calls, outside, by_op)
