"""Which Composer loop is running on this thread: its DataSpec, device and state, and what the shim did in its step.

The trainer calls a ``DataSpec``'s batch-level transform with the batch alone; to move that batch the shim needs the
trainer's own ``Device`` and ``State``. The patches of the Trainer's train, eval and predict loops (the shim's, and the
monitor's watch while the shim is off) push a frame for each loop (eval inside ``fit`` nests) naming the DataSpec it
runs; the hooks and the monitor read it. With the shim on, the loop is decided once, when its frame opens: the trainer's
own binding of that DataSpec (``trainer._train_data_spec``, the evaluator's ``dataloader``, ``predict``'s argument)
is, for the loop, the DataSpec's *view* (:func:`compatshim.shim.data_spec.view_of`), which shares its ``__dict__`` and
serves the hook names; so the trainer's reads are told from the user's by what they read through, never by walking
frames. While a frame needs it, ``batch_to_device`` is interposed on the class of the trainer's device, above anything
set on the instance (a profiler's wrapper, set before the fit or in the middle of it): after the shim moved a step's
batch at stage batch, a move of ``state.batch`` in that step (the loop's per-microbatch move, an algorithm's) leaves it
as the transform returned it, without reaching the user's ``Device`` (0.24.1 moved each batch once, then split it); on
0.25–0.26 at stage microbatch, each move of a microbatch is followed by the transform.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import sys
import threading
import warnings
from collections.abc import Iterator
from types import FrameType
from typing import Any, Callable, Optional

from compatshim.config.support import WITHOUT_SHIM, installed
from compatshim.errors import CompatShimWarning
from compatshim.shim import patching
from compatshim.shim.notes import TRAINER_MODULE, call, kind, spec_name, transform_name
from compatshim.shim.registry import STATE, warn_once

__all__ = ['LOOPS', 'TARGETS', 'LoopFrame', 'current_frame', 'instrument', 'loop_frame', 'warn_if_running']

Batch = Any

_local = threading.local()


@dataclasses.dataclass(eq=False)
class LoopFrame:
    """One running loop: the trainer's device and state, the mode, the DataSpec it runs, the view the trainer reads it
    through, and what the shim did in the current step."""

    device: Any
    mode: str  # 'train' | 'eval' | 'predict'
    state: Any = None
    #: The DataSpec this loop runs (``None``: predict over a plain dataloader, whose DataSpec Composer builds bare).
    spec: Any = None
    #: What the trainer reads ``spec`` through in this loop (``None``: it reads ``spec``, as the release does).
    view: Any = None
    #: The view was made with the shim on: its hook names give the shim's hooks for the whole loop (else what Python
    #: gives, through the monitor's taps: a loop the shim was enabled in the middle of runs as the release does).
    shim: bool = False
    #: 0.25–0.26, stage microbatch: the transform run after each move of one of the step's microbatches by this
    #: frame's device, its DataSpec, and the microbatches the step's split returned (kept: their ids stay theirs).
    armed: Optional[Callable[[Batch], Batch]] = None
    armed_by: Any = None
    microbatches: Any = ()
    split_ids: frozenset[int] = frozenset()
    #: The hooks this loop's reads of its DataSpec's hook names were served, by name, with what each was made from
    #: (the value the read resolved to, the stage): made once, not at every read (``data_spec.for_trainer``).
    hooks: dict[str, tuple[Any, Optional[str], Any]] = dataclasses.field(default_factory=dict)
    #: Stage batch: the shim moved this step's batch; a move of ``state.batch`` later in the step leaves it as it is.
    passed: bool = False
    #: Stage batch: the transform that changed its batch's structure in this step, its DataSpec, and both structures
    #: (class, length), noted on an error of Composer's readers of the batch in this step.
    reshaped: Optional[tuple[Any, Any, type, Optional[int], type, Optional[int]]] = None
    #: The loop ended: its hooks, called again, leave a batch as the release would.
    closed: bool = False
    #: Armed: a move of :meth:`later` is under way (what it calls moves, and only moves).
    moving: bool = False
    #: The loop this frame is for has begun (a loop of the same mode inside it opens a frame of its own).
    entered: bool = False
    #: The interposer this frame uses on its device (shared by every frame of that device, on any thread).
    _interposer: Optional[_Interposer] = None

    def note_error(self, exc: BaseException) -> None:
        """A note on ``exc`` where Composer's reader of a batch raised it in a step whose transform, at stage batch,
        returned another structure (the exception's type and message are never changed)."""
        reader = _reader(exc) if self.reshaped is not None else None
        if reader is None:
            return
        transform, spec, *structures = self.reshaped  # type: ignore[misc]
        before, after = kind(*structures[:2]), kind(*structures[2:])
        returned = 'None (is a `return` missing?)' if after == 'None' else f'a {after}'
        text = (
            f'compatshim: {reader} got what device_transforms {transform_name(transform)!r} of {spec_name(spec)} '
            f'returned: {returned} for a batch that was a {before} (0.24.1 could not take it either). Return a '
            f'structure it takes, or give the DataSpec a {reader} of your own.'
        )
        if hasattr(exc, 'add_note'):
            exc.add_note(text)
        else:  # Python < 3.11, where tracebacks do not show them: ``__notes__`` alone
            exc.__notes__ = [*getattr(exc, '__notes__', ()), text]  # type: ignore[attr-defined]

    def later(self, move: Callable[[Batch], Batch], batch: Batch) -> Batch:
        """A move by this frame's device in a step the shim moved (or armed), ``move`` being what the read would have
        given: of ``state.batch`` (the loop's per-microbatch move, an algorithm's), it leaves the batch as the shim's
        move and transform left it; armed, a microbatch's move is followed by the transform. Anything else (a
        tensor of the user's own, a move in another loop, or one made inside this move: a wrapper on the device
        instance that holds what its own read of the move gave) is ``move``."""
        stack = _local.__dict__.get('stack')
        state = self.state
        if not stack or stack[-1] is not self or state is None or batch is not state.batch or self.moving:
            return move(batch)
        if self.passed:
            return batch
        self.moving = True
        try:
            moved = move(batch)
        finally:
            self.moving = False
        if self.armed is None or id(batch) not in self.split_ids:
            return moved  # an algorithm's move of the whole batch, before the split; a callback's of a moved one
        return call(self.armed_by, 'device_transforms', self.armed, moved)

    def split(self, split: Callable[..., Any], batch: Batch, *args: Any, **kwargs: Any) -> Any:
        """Armed: the step's split, whose microbatches this frame's moves of are followed by the transform."""
        microbatches = split(batch, *args, **kwargs)
        self.microbatches, self.split_ids = microbatches, frozenset(map(id, microbatches))
        return microbatches

    def interpose(self) -> None:
        """Put the interposer on this frame's device's class (once per frame; one per class, shared)."""
        if self._interposer is not None:
            return
        cls = type(self.device)
        with STATE.lock:
            interposer = vars(cls).get('batch_to_device')
            if not hasattr(self.device, '__dict__') or hasattr(type(cls.batch_to_device), '__set__'):
                return  # nothing can be set on the instance: nothing to stand above
            if not isinstance(interposer, _Interposer):
                swapped = patching.swap(cls, 'batch_to_device', lambda _: _Interposer(cls))
                interposer = swapped.replacement
                interposer.swapped = swapped
            interposer.users += 1
            self._interposer = interposer

    def close(self) -> None:
        """The loop ended: its device's interposer goes once no frame (of any thread) uses it."""
        self.closed = True
        interposer, self._interposer = self._interposer, None
        if interposer is not None:
            with STATE.lock:
                interposer.users -= 1
                if interposer.users == 0 and interposer.swapped is not None:
                    interposer.swapped.undo()


#: Composer's own readers of a batch (functions of ``composer.core.data_spec``), by a part of their code's name.
_READERS = (
    ('split', 'split_batch'),
    ('num_samples', 'get_num_samples_in_batch'),
    ('tokens', 'get_num_tokens_in_batch'),
)


def _reader(exc: BaseException) -> Optional[str]:
    """Which of Composer's readers of a batch the trainer called when ``exc`` was raised (``None``: not one)."""
    called, tb = None, exc.__traceback__
    while tb is not None:
        module = tb.tb_frame.f_globals.get('__name__', '')
        if module == TRAINER_MODULE:
            called = ''
        elif called == '':
            name = tb.tb_frame.f_code.co_name
            found = next((reader for part, reader in _READERS if part in name), None)
            called = found if module == 'composer.core.data_spec' and found else None
        tb = tb.tb_next
    return called or None


class _Interposer:
    """``batch_to_device`` on the class of a trainer's ``Device`` while its frames need it: a data descriptor, so it is
    asked at every read, above whatever the instance holds (a wrapper set on it before the fit, or by a callback in
    the middle of one), as 0.24.1's single move was. A read of the innermost frame's device, in a step the shim moved
    or armed, gets that frame's :meth:`LoopFrame.later` in front of what the read would have given; every other read
    gets exactly that (an instance's own value, else the class's method), and assignments and deletions go to the
    instance, as without it."""

    def __init__(self, owner: type) -> None:
        self.owner = owner
        #: The class's own entry (a function, or another non-data descriptor); ``None``: it inherits one, looked up
        #: at every read (a base's may be patched meanwhile).
        self.own = vars(owner).get('batch_to_device')
        self.bases = owner.__mro__[1:]
        self.users = 0
        self.swapped: Optional[patching.Swap] = None

    @property
    def __wrapped__(self) -> Any:
        """What the class's own lookup finds beneath this descriptor."""
        found, bases = self.own, iter(self.bases)
        while found is None:  # the nearest base's (one always has it: Composer's Device)
            found = next(bases).__dict__.get('batch_to_device')
        return found

    def __get__(self, device: Any, owner: Optional[type] = None) -> Any:
        own, cls = getattr(device, '__dict__', None) or {}, type(device)
        # The instance's own, unless a subclass defines its own method and this read is its super()
        if 'batch_to_device' in own and (cls is self.owner or patching.definer(cls, 'batch_to_device') is self.owner):
            move = own['batch_to_device']
        else:
            raw = self.own
            if raw is None:  # the nearest base's (one always has it: Composer's Device)
                for base in self.bases:
                    raw = base.__dict__.get('batch_to_device')
                    if raw is not None:
                        break
            get = getattr(type(raw), '__get__', None)
            move = raw if get is None else get(raw, device, owner)
        stack = _local.__dict__.get('stack')
        frame = stack[-1] if stack else None
        if frame is None or frame.device is not device or not (frame.passed or frame.armed is not None):
            return move
        if STATE.stage is None:  # disable() in the middle of the loop: Composer's own moves from now on
            return move
        return functools.partial(frame.later, move)

    def __set__(self, device: Any, value: Any) -> None:
        vars(device)['batch_to_device'] = value

    def __delete__(self, device: Any) -> None:
        try:
            del vars(device)['batch_to_device']
        except KeyError:
            raise AttributeError('batch_to_device') from None


def _stack() -> list[LoopFrame]:
    stack = _local.__dict__.get('stack')  # not getattr's default: a missing name raises inside it (1 µs)
    if stack is None:
        stack = _local.stack = []
    return stack


def current_frame() -> Optional[LoopFrame]:
    """The innermost running loop on this thread, or ``None`` outside any trainer loop."""
    stack = _local.__dict__.get('stack')
    return stack[-1] if stack else None


#: What makes the view of a DataSpec a loop reads it through (the shim's :func:`compatshim.shim.data_spec.view_of`).
View = Callable[[Any, LoopFrame], Any]


@contextlib.contextmanager
def loop_frame(
    device: Any, mode: str, state: Any = None, spec: Any = None, view: Optional[View] = None
) -> Iterator[LoopFrame]:
    """Open a frame for one loop over ``spec``; it closes (and restores its device) however the loop ends. ``view``
    makes the view of ``spec`` the loop's reads go through (:attr:`LoopFrame.view`: the shim's patches and the
    monitor's watch both give one)."""
    frame = LoopFrame(device, mode, state, spec)
    _view(frame, view)
    stack = _stack()
    stack.append(frame)
    try:
        yield frame
    finally:
        stack.remove(frame)
        frame.close()


#: Trainer method → the mode its frame records.
LOOPS: dict[str, str] = {'_train_loop': 'train', '_eval_loop': 'eval', 'predict': 'predict'}
#: What the shim patches here.
TARGETS = tuple(f'composer.trainer.trainer.Trainer.{name}' for name in LOOPS)
#: Where each loop finds its DataSpec: the trainer's attribute (train), the parameter holding the evaluator (eval) or
#: the DataSpec (predict), and its place among the positional arguments.
_BINDINGS = {'train': ('_train_data_spec', -1), 'eval': ('evaluator', 0), 'predict': ('dataloader', 0)}


def _spec_of(trainer: Any, mode: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The DataSpec a loop runs: the trainer's train DataSpec, the evaluator's, or the one ``predict()`` was given."""
    if mode == 'train':
        return getattr(trainer, '_train_data_spec', None)
    name, at = _BINDINGS[mode]
    given = args[at] if len(args) > at else kwargs.get(name)
    spec = getattr(given, 'dataloader', None) if mode == 'eval' else given
    data_spec = getattr(sys.modules.get('composer.core.data_spec'), 'DataSpec', None)
    return spec if data_spec is not None and isinstance(spec, data_spec) else None


def _bound(
    trainer: Any, frame: LoopFrame, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any], Callable[[], None]]:
    """The loop's arguments with its binding of the DataSpec made the frame's view, and how to undo that."""
    view, mode = frame.view, frame.mode
    if mode == 'train':
        trainer._train_data_spec = view

        def undo() -> None:
            if vars(trainer).get('_train_data_spec') is view:
                trainer._train_data_spec = frame.spec

        return args, kwargs, undo
    name, at = _BINDINGS[mode]
    given = args[at] if len(args) > at else kwargs[name]
    bound = (
        patching.sharing(given, {'dataloader': _Dataloader()}, _compatshim_dataloader=view) if mode == 'eval' else view
    )
    if len(args) > at:
        return (*args[:at], bound, *args[at + 1 :]), kwargs, lambda: None
    return args, {**kwargs, name: bound}, lambda: None


def _view(frame: LoopFrame, view: Optional[View]) -> None:
    """Give ``frame`` its view of its DataSpec, made by ``view`` (once), and decide for the loop whether the shim
    serves it."""
    if view is None or frame.view is not None or frame.spec is None:
        return
    shim = STATE.stage is not None
    try:
        frame.view, frame.shim = view(frame.spec, frame), shim
    except Exception as exc:  # noqa: BLE001  (a class that refuses a subclass: its __init_subclass__, its metaclass)
        what = (
            f'runs as Composer {installed("mosaicml")} does ({WITHOUT_SHIM[STATE.family]})'
            if shim
            else ("reads it directly: a TransformMonitor does not see its transforms' calls")
        )
        warn_once(
            f'no-view:{type(frame.spec).__qualname__}',
            f'compatshim: {type(frame.spec).__qualname__} refuses the subclass compatshim reads it through '
            f'({type(exc).__name__}: {exc}): the trainer of its loops {what}.',
            CompatShimWarning,
            stacklevel=4,
        )


class _Dataloader:
    """``dataloader`` on the evaluator the eval loop is given: the loop's view of its DataSpec (what is set there is
    the evaluator's, whose ``__dict__`` it shares)."""

    def __get__(self, evaluator: Any, owner: Optional[type] = None) -> Any:
        return self if evaluator is None else evaluator._compatshim_dataloader

    def __set__(self, evaluator: Any, value: Any) -> None:
        object.__getattribute__(evaluator, '__dict__')['dataloader'] = value
        object.__setattr__(evaluator, '_compatshim_dataloader', value)


def _make_loop(
    original: Callable[..., Any], record: patching.Patch, mode: str, view: Optional[View]
) -> Callable[..., Any]:
    @functools.wraps(original)
    def loop(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not record.active:
            return record.original(self, *args, **kwargs)
        state = self.state
        running = current_frame()
        entering = not getattr(record.original, '_compatshim_loop', False)  # not: the other patch set's wrapper
        if running is not None and running.state is state and running.mode == mode and not running.entered:
            frame = running  # the other patch set's wrapper's frame, opened around this one
            opened: contextlib.AbstractContextManager[LoopFrame] = contextlib.nullcontext(running)
            if frame.view is not None or view is None:
                frame.entered = entering
                return record.original(self, *args, **kwargs)
            _view(frame, view)
        else:
            opened = loop_frame(state.device, mode, state, _spec_of(self, mode, args, kwargs), view=view)
        with opened as frame:
            undo: Callable[[], None] = lambda: None  # noqa: E731
            if frame.view is not None:
                args, kwargs, undo = _bound(self, frame, args, kwargs)
            frame.entered = entering
            try:
                return record.original(self, *args, **kwargs)
            except Exception as exc:
                frame.note_error(exc)
                raise
            finally:
                undo()

    loop._compatshim_loop = True  # type: ignore[attr-defined]
    return loop


def instrument(trainer_cls: type, patches: patching.PatchSet, view: Optional[View] = None) -> None:
    """Wrap each loop of ``trainer_cls`` in a loop frame, in ``patches`` (the shim's, whose loops read their DataSpec
    through what ``view`` makes, or the monitor's watch)."""
    for name, mode in LOOPS.items():
        if (trainer_cls, name) not in patches and hasattr(trainer_cls, name):
            patches.patch(trainer_cls, name, functools.partial(_make_loop, mode=mode, view=view))


def warn_if_running(trainer_cls: type) -> None:
    """Say once that ``enable()`` was called while one of ``trainer_cls``'s loops ran (a callback that enables the shim
    at ``FIT_START``, a fit started in a notebook before it): that loop runs as the release does, never with its
    transform silently dropped; the next loop opens with the shim. The one look at the stack: at ``enable()``."""
    codes = {}
    for name, mode in LOOPS.items():
        found = inspect.unwrap(getattr(trainer_cls, name, _none))  # beneath the patches' wrappers
        if hasattr(found, '__code__'):
            codes[found.__code__] = mode
    running = [
        frame
        for top in sys._current_frames().values()
        for frame in _callers(top)
        if frame.f_code in codes
    ]  # fmt: skip
    if not running or 'loop-running' in STATE.warned:
        return
    STATE.warned.add('loop-running')
    warnings.warn(
        f'compatshim: enable() was called while a Composer {codes[running[0].f_code]} loop was running: until that '
        f'loop ends it runs as Composer {installed("mosaicml")} does ({WITHOUT_SHIM[STATE.family]}); the next fit, '
        'eval or predict runs it on the device. Call enable() before the Trainer runs (or start the job with '
        'compatshim run).',
        CompatShimWarning,
        stacklevel=4,
    )


def _none() -> None:
    """Stands in for a loop ``trainer_cls`` does not have."""


def _callers(frame: Optional[FrameType]) -> Iterator[FrameType]:
    while frame is not None:
        yield frame
        frame = frame.f_back
