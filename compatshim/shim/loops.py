"""Which Composer loop is running on this thread: its DataSpec, device and state, and what the shim did in its step.

The trainer calls a ``DataSpec``'s batch-level transform with the batch alone; to move that batch the shim needs the
trainer's own ``Device`` and ``State``. The patches of the Trainer's train, eval and predict loops (the shim's, and the
monitor's watch while the shim is off) push a frame for each loop (eval inside ``fit`` nests) naming the DataSpec it
runs; the hooks and the monitor read the innermost one. While a frame needs it, ``batch_to_device`` is interposed on
the class of the trainer's device, above anything set on the instance (a profiler's wrapper, set before the fit or in
the middle of it): after the shim moved a step's batch at stage batch, Composer's later moves of it in that step leave
the batch as the transform returned it, without reaching the user's ``Device`` (0.24.1 moved each batch once, then
split it); on 0.25–0.26 at stage microbatch, each of the loop's moves is followed by the transform.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import sys
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any, Callable, Optional

from compatshim.shim import patching
from compatshim.shim.notes import TRAINER_MODULE, call, kind, spec_name, transform_name
from compatshim.shim.registry import STATE

__all__ = ['LOOPS', 'TARGETS', 'LoopFrame', 'by_loop', 'current_frame', 'instrument', 'loop_frame']

Batch = Any

_local = threading.local()


@dataclasses.dataclass(eq=False)
class LoopFrame:
    """One running loop: the trainer's device and state, the mode, the DataSpec it runs, the module whose reads and
    moves are the loop's own, and what the shim did in the current step."""

    device: Any
    mode: str  # 'train' | 'eval' | 'predict'
    state: Any = None
    #: The DataSpec this loop runs (``None``: predict over a plain dataloader, whose DataSpec Composer builds bare).
    spec: Any = None
    #: The module whose reads of a DataSpec's hooks, and whose moves, are this loop's (:func:`by_loop`).
    reader: str = TRAINER_MODULE
    #: 0.25–0.26, stage microbatch: the transform run after each move by this frame's device, and its DataSpec.
    armed: Optional[Callable[[Batch], Batch]] = None
    armed_by: Any = None
    #: The hooks this loop's reads of its DataSpec's hook names were served, by name, with what each was made from
    #: (the value the read resolved to, the stage): made once, not at every read (``data_spec.for_trainer``).
    hooks: dict[str, tuple[Any, Optional[str], Any]] = dataclasses.field(default_factory=dict)
    #: Stage batch: the shim moved this step's batch; the loop's later moves in the step leave it as it is.
    passed: bool = False
    #: Stage batch: the transform that changed its batch's structure in this step, both structures and its DataSpec,
    #: noted on an error of Composer's readers of the batch in this step.
    reshaped: Optional[tuple[str, str, str, str]] = None
    #: The interposer this frame uses on its device (shared by every frame of that device, on any thread).
    _interposer: Optional[_Interposer] = None

    def new_step(self) -> None:
        """A new batch reached the shim's hook: what the last step's did no longer applies."""
        self.passed, self.reshaped = False, None

    def moved(self, transform: Any, spec: Any, moved: Batch, out: Batch) -> None:
        """Stage batch: the shim moved this step's batch and ran ``transform`` on it, which returned ``out``."""
        self.passed = True
        self._interpose()
        if type(out) is not type(moved) or (isinstance(out, (list, tuple)) and len(out) != len(moved)):
            self.reshaped = (transform_name(transform), kind(moved), kind(out), spec_name(spec))

    def note_error(self, exc: BaseException) -> None:
        """A note on ``exc`` where Composer's reader of a batch raised it in a step whose transform, at stage batch,
        returned another structure (the exception's type and message are never changed)."""
        reader = _reader(exc) if self.reshaped is not None else None
        if reader is None:
            return
        transform, before, after, spec = self.reshaped  # type: ignore[misc]
        returned = 'None (is a `return` missing?)' if after == 'None' else f'a {after}'
        text = (
            f'compatshim: {reader} got what device_transforms {transform!r} of {spec} returned: {returned} for a '
            f'batch that was a {before} (0.24.1 could not take it either). Return a structure it takes, or give the '
            f'DataSpec a {reader} of your own.'
        )
        if hasattr(exc, 'add_note'):
            exc.add_note(text)
        else:  # Python < 3.11, where tracebacks do not show them: ``__notes__`` alone
            exc.__notes__ = [*getattr(exc, '__notes__', ()), text]  # type: ignore[attr-defined]

    def arm(self, spec: Any, transform: Callable[[Batch], Batch]) -> None:
        """Run ``spec``'s ``transform`` (through its taps) after every move this frame's device makes until the frame
        closes."""
        self.armed, self.armed_by = transform, spec
        self._interpose()

    def _interpose(self) -> None:
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
    the middle of one), as 0.24.1's single move was. A read by Composer's code (the running loop's, an algorithm's) of
    the innermost frame's device, in a step the shim moved or armed, gets a :class:`_Move` in front of what the read
    would have given; every other read gets exactly that (an instance's own value, else the class's method), and
    assignments and deletions go to the instance, as without it."""

    def __init__(self, owner: type) -> None:
        self.owner = owner
        #: The class's own entry (a function, or another non-data descriptor); ``None``: it inherits one, looked up
        #: at every read (a base's may be patched meanwhile).
        self.own = vars(owner).get('batch_to_device')
        self.bases = owner.__mro__[1:]
        self.__wrapped__ = self.raw
        self.users = 0
        self.swapped: Optional[patching.Swap] = None

    @property
    def raw(self) -> Any:
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
            raw = self.raw
            get = getattr(type(raw), '__get__', None)
            move = raw if get is None else get(raw, device, owner)
        frame = current_frame()
        if frame is None or frame.device is not device or not (frame.passed or frame.armed is not None):
            return move
        reader: Optional[FrameType] = sys._getframe(1)
        while reader is not None and reader.f_code.co_name in _LOOKUPS:
            reader = reader.f_back
        module = '' if reader is None else reader.f_globals.get('__name__', '')
        if module == frame.reader:
            return _Move(frame, move, True)
        return _Move(frame, move, False) if module.startswith('composer.') else move

    def __set__(self, device: Any, value: Any) -> None:
        vars(device)['batch_to_device'] = value

    def __delete__(self, device: Any) -> None:
        try:
            del vars(device)['batch_to_device']
        except KeyError:
            raise AttributeError('batch_to_device') from None


class _Move:
    """What Composer's read of ``batch_to_device`` got in a step the shim moved (or armed): called in that step, the
    loop's own move (``loop``), or an algorithm's move of ``state.batch``, leaves the batch as the shim's move and
    transform left it; armed (0.25–0.26, stage microbatch), the loop's move is followed by the transform. Anything
    else is the move the read would have given."""

    __slots__ = ('frame', 'loop', 'move')

    def __init__(self, frame: LoopFrame, move: Callable[[Batch], Batch], loop: bool) -> None:
        self.frame, self.move, self.loop = frame, move, loop

    def __call__(self, batch: Batch) -> Batch:
        frame = self.frame
        if frame is not current_frame():
            return self.move(batch)
        if frame.passed and (self.loop or (frame.state is not None and batch is frame.state.batch)):
            return batch
        moved = self.move(batch)
        if frame.armed is None or not self.loop:
            return moved
        return call(frame.armed_by, 'device_transforms', frame.armed, moved)


def _stack() -> list[LoopFrame]:
    stack = _local.__dict__.get('stack')  # not getattr's default: a missing name raises inside it (1 µs)
    if stack is None:
        stack = _local.stack = []
    return stack


def current_frame() -> Optional[LoopFrame]:
    """The innermost running loop on this thread, or ``None`` outside any trainer loop."""
    stack = _local.__dict__.get('stack')
    return stack[-1] if stack else None


#: The names of the lookups a read may pass through on its way to the shim's (a subclass's, another library's).
_LOOKUPS = frozenset({'__getattribute__', '__get__'})


def by_loop(reader: Optional[str] = None) -> bool:
    """Whether the attribute read (or the move) being served is the running loop's own: the first caller past
    compatshim's own frames and any ``__getattribute__`` or ``__get__`` (a subclass's own lookup calling ``super()``,
    another library's descriptor over the shim's) is in the loop's reader module (Composer's trainer; outside any loop
    too), or ``reader`` where the caller has the running frame."""
    if reader is None:
        running = current_frame()
        reader = TRAINER_MODULE if running is None else running.reader
    frame: Optional[FrameType] = sys._getframe(2)
    while frame is not None:
        name: str = frame.f_globals.get('__name__', '')
        if name == reader:
            return True
        if not name.startswith('compatshim.') and frame.f_code.co_name not in _LOOKUPS:
            return False
        frame = frame.f_back
    return False


@contextlib.contextmanager
def loop_frame(
    device: Any, mode: str, state: Any = None, spec: Any = None, reader: str = TRAINER_MODULE
) -> Iterator[LoopFrame]:
    """Open a frame for one loop over ``spec``; it closes (and restores its device) however the loop ends. ``reader``:
    the module that drives the loop (the bench's probe names its own)."""
    frame = LoopFrame(device, mode, state, spec, reader)
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


def _spec_of(trainer: Any, mode: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The DataSpec a loop runs: the trainer's train DataSpec, the evaluator's, or the one ``predict()`` was given."""
    if mode == 'train':
        return getattr(trainer, '_train_data_spec', None)
    given = args[0] if args else kwargs.get('evaluator' if mode == 'eval' else 'dataloader')
    spec = getattr(given, 'dataloader', None) if mode == 'eval' else given
    data_spec = getattr(sys.modules.get('composer.core.data_spec'), 'DataSpec', None)
    return spec if data_spec is not None and isinstance(spec, data_spec) else None


def _make_loop(original: Callable[..., Any], record: patching.Patch, mode: str) -> Callable[..., Any]:
    @functools.wraps(original)
    def loop(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not record.active:
            return record.original(self, *args, **kwargs)
        state = self.state
        with loop_frame(state.device, mode, state, _spec_of(self, mode, args, kwargs)) as frame:
            try:
                return record.original(self, *args, **kwargs)
            except Exception as exc:
                frame.note_error(exc)
                raise

    return loop


def instrument(trainer_cls: type, patches: patching.PatchSet) -> None:
    """Wrap each loop of ``trainer_cls`` in a loop frame, in ``patches`` (the shim's, or the monitor's watch)."""
    for name, mode in LOOPS.items():
        if (trainer_cls, name) not in patches and hasattr(trainer_cls, name):
            patches.patch(trainer_cls, name, functools.partial(_make_loop, mode=mode))
