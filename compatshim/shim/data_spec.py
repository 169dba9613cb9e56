"""The shim's patches of ``composer.core.data_spec.DataSpec``, and the view of a DataSpec its loops read.

* ``__init__`` takes the shim's own ``data_transfer_stage`` (kept on the DataSpec) and, where Composer no longer takes
  ``device_transforms`` as 0.24.1 did (0.27+), the argument: Composer builds the DataSpec without it, then the wrapper
  sets ``self.device_transforms`` as 0.24.1's ``__init__`` did (a subclass's property setter sees it). On 0.25–0.26
  Composer's own ``__init__`` still sets it.
* The trainer reads a loop's DataSpec through its *view* (:func:`view_of`, bound by the loop's frame,
  :mod:`compatshim.shim.loops`; the monitor's watch makes the same): an object of a subclass of the DataSpec's class,
  made once per loop, sharing its ``__dict__``. Its hook names (0.25–0.26 ``device_transforms``; 0.27+
  ``batch_transforms`` and ``microbatch_transforms``) are data descriptors (:class:`Served`) giving the hook
  (:mod:`compatshim.shim.hooks`) bound to the DataSpec and made from what the name resolves to on it at that read (the
  shim off: what Python gives); every other read is Python's own. The DataSpec itself keeps no patched lookup: every
  read of it is the user's and gets what Python gives (a subclass that defines a hook name of 0.27+ itself aside: its
  own value is kept apart from Composer's). The DataSpec is the one owner of the transform; the hooks keep no copy.
"""

from __future__ import annotations

import functools
import inspect
import sys
import types
import warnings
import weakref
from typing import Any, Callable, Optional

from compatshim.config import stages
from compatshim.config.support import HOOKS, Family, installed
from compatshim.errors import CompatShimWarning
from compatshim.shim import notes, patching
from compatshim.shim.hooks import BatchHook, MicrobatchHook
from compatshim.shim.loops import LoopFrame
from compatshim.shim.registry import STATE, warn_once

__all__ = ['Served', 'for_trainer', 'given', 'instrument', 'own_hook_names', 'targets', 'view_of']


def targets(family: Family) -> tuple[str, ...]:
    """What this module patches for ``family``, dotted (the trainer reads a loop's DataSpec through its view; a
    subclass that defines a hook name of 0.27+ itself adds ``__getattribute__`` on demand)."""
    names = ('__init__',) if family is Family.HOST else ('__init__', '__setattr__')
    return tuple(f'composer.core.data_spec.DataSpec.{name}' for name in names)


def _take_device_transforms(
    signature: inspect.Signature, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[Any, tuple[Any, ...], dict[str, Any]]:
    """Remove ``device_transforms`` from a call, whether passed by keyword or (0.27–0.28) by position.

    Where Composer has the parameter, the call is bound against its signature first, so that a call Composer would
    refuse (``device_transforms`` given twice, by position and by keyword) reaches Composer as it is, and fails there.
    """
    if 'device_transforms' not in signature.parameters:
        if 'device_transforms' not in kwargs:
            return None, args, kwargs
        kwargs = dict(kwargs)
        return kwargs.pop('device_transforms'), args, kwargs
    bound = patching.bound(signature, None, *args, **kwargs)
    if bound is None:
        return None, args, kwargs  # let Composer report its own argument error
    transform = bound.arguments.pop('device_transforms', None)
    return transform, bound.args[1:], bound.kwargs


def given(signature: inspect.Signature, args: tuple[Any, ...], kwargs: dict[str, Any]) -> frozenset[str]:
    """The transform arguments a ``DataSpec(...)`` call gives (bound against Composer's signature where it can be)."""
    bound = patching.bound(signature, None, *args, **kwargs)
    arguments = kwargs if bound is None else bound.arguments
    return frozenset(name for name in notes.TRANSFORM_NAMES if arguments.get(name) is not None)


#: 0.24.1's ``DataSpec`` parameters, in order: what a positional argument meant to code written for it.
REFERENCE_PARAMETERS = (
    'dataloader', 'num_samples', 'num_tokens', 'device_transforms', 'split_batch', 'get_num_samples_in_batch',
    'get_num_tokens_in_batch',
)  # fmt: skip


def _by_position(
    signature: inspect.Signature, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """A call's positional arguments, read in 0.24.1's order where the installed release reads a position otherwise.

    Whoever enables the shim declares code written for 0.24.1, and Composer itself only ever calls
    ``DataSpec(dataloader)`` or ``DataSpec(**kwargs)``: so ``DataSpec(dl, None, None, fn)`` gives ``device_transforms``
    on every release (0.29+ read position 3 as ``batch_transforms``). A warning (once per process and count of
    positions) names each position read so, and the keyword for this release's own arguments. More positions than
    0.24.1 took (which it refused) keep the release's reading.
    """
    names = [name for name in signature.parameters if name != 'self']
    moved = [
        (i, names[i] if i < len(names) else None, theirs)
        for i, theirs in enumerate(REFERENCE_PARAMETERS[: len(args)])
        if (names[i] if i < len(names) else None) != theirs
    ]
    if not moved or len(args) > len(REFERENCE_PARAMETERS):
        return args, kwargs
    twice = next((theirs for theirs in REFERENCE_PARAMETERS[: len(args)] if theirs in kwargs), None)
    if twice is not None:  # as Python said it on 0.24.1, where the position was that keyword's
        raise TypeError(f"DataSpec.__init__() got multiple values for argument '{twice}'")
    key = f'positions:{len(args)}'
    if key not in STATE.warned:
        STATE.warned.add(key)
        said = '; '.join(f'position {i} as {theirs} (here: {mine or "none"})' for i, mine, theirs in moved)
        newer = [mine for _, mine, _ in moved if mine and mine not in REFERENCE_PARAMETERS]
        warnings.warn(
            f"compatshim: DataSpec got {len(args)} positional arguments, read in Composer 0.24.1's order: {said}. "
            + (f'Pass {", ".join(f"{name}=..." for name in newer)} by keyword.' if newer else ''),
            CompatShimWarning,
            stacklevel=3,
        )
    return (), {**dict(zip(REFERENCE_PARAMETERS, args)), **kwargs}


def _check_transform(transform: Any) -> None:
    if transform is not None and not callable(transform):
        raise TypeError(
            'compatshim: DataSpec(device_transforms=...) must be a callable that takes a batch and returns the '
            f'transformed batch; got {type(transform).__name__} {transform!r}',
        )


def _default(spec: Any) -> Any:
    """The identity method a DataSpec given no transform reads as (0.24.1: ``_default_device_transforms``)."""
    return next(getattr(spec, name) for name in notes.DEFAULTS if hasattr(spec, name))


def _make_init(original: Callable[..., None], record: patching.Patch, family: Family) -> Callable[..., None]:
    signature = inspect.signature(original)

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if not record.active:  # switched off beneath another wrapper: Composer's own behaviour, keywords and all
            record.original(self, *args, **kwargs)
            return
        stage = kwargs.pop('data_transfer_stage', None)
        if stage is not None:
            stage = stages.validate_stage(stage, what='DataSpec data_transfer_stage')
        args, kwargs = _by_position(signature, args, kwargs)
        transform, without_args, without_kwargs = _take_device_transforms(signature, args, kwargs)
        _check_transform(transform)
        own_names = family is not Family.HOST and type(self) is not record.owner and _defined(type(self))
        if own_names:
            _serve_own_names(record.owner, family)  # before Composer's __init__ assigns those names
        if family is Family.HOST:  # Composer sets self.device_transforms itself, as 0.24.1 did
            record.original(self, *args, **kwargs)
        else:
            record.original(self, *without_args, **without_kwargs)
            self.device_transforms = _default(self) if transform is None else transform
        if stage is not None:
            vars(self)[notes.STAGE_ATTRIBUTE] = stage
        _noting(self).add(BUILT)
        if own_names:
            mine = vars(self)
            kept = mine.setdefault(notes.COMPOSERS_HOOKS, {})
            kept.update({name: mine[name] for name in own_names if name in mine and name not in kept})

    return __init__


def own_hook_names(cls: type, base: type, names: tuple[str, ...]) -> list[str]:
    """The ``names`` a class of ``cls``'s MRO before ``base`` (``DataSpec``) defines itself, a mixin's included:
    Python finds them before a descriptor on ``base``."""
    return [name for name in names if patching.definer(cls, name) not in (base, None)]


#: The hook names of 0.27+ a DataSpec subclass defines itself (0.24.1 code may, for its own purposes), by class.
_DEFINED: weakref.WeakKeyDictionary[type, tuple[str, ...]] = weakref.WeakKeyDictionary()


def _defined(cls: type) -> tuple[str, ...]:
    if vars(cls).get(patching.SHARING):
        cls = cls.__bases__[0]
    names = _DEFINED.get(cls)
    if names is None:
        base = sys.modules['composer.core.data_spec'].DataSpec
        names = _DEFINED[cls] = tuple(own_hook_names(cls, base, HOOKS[STATE.family or Family.REJECTED]))
    return names


def _serve_own_names(data_spec_cls: type, family: Family) -> None:
    """The shim's ``__getattribute__`` on ``DataSpec`` (once), for subclasses that define a hook name of 0.27+ on the
    class: Composer's ``__init__`` assigns that name on the instance, which hides the class's own value from the
    user's code. With it, the user's reads get the class's own value, as on 0.24.1 (the trainer's, through the loop's
    view, Composer's value)."""
    with STATE.lock:
        if (data_spec_cls, '__getattribute__') not in STATE.patches:
            lookup = functools.partial(_make_users_lookup, names=HOOKS[family])
            STATE.patches.patch(data_spec_cls, '__getattribute__', lookup)


def _by_composer() -> bool:
    """Whether the assignment being made is Composer's (its ``DataSpec`` module's), past compatshim's own frames."""
    frame: Optional[types.FrameType] = sys._getframe(2)
    while frame is not None and frame.f_globals.get('__name__', '').startswith('compatshim.'):
        frame = frame.f_back
    return frame is not None and frame.f_globals.get('__name__') == notes.DATA_SPEC_MODULE


def _set_by(spec: Any, name: str, value: Any) -> str:
    """Whose assignment of a hook name of 0.27+ this is: ``'user'`` (noted), ``'composer'``, or ``'kept'`` where
    Composer's ``__init__`` would replace a value the user's code set first (0.24.1 never did): kept apart instead."""
    if not _by_composer():
        _noting(spec).add(name)
        return 'user'
    mine = notes.own(spec)
    if name in _noted(spec) and name in mine:
        mine.setdefault(notes.COMPOSERS_HOOKS, {})[name] = value
        return 'kept'
    return 'composer'


def _make_setattr(
    original: Callable[[Any, str, Any], None], record: patching.Patch, *, names: tuple[str, ...]
) -> Callable[..., None]:
    """``DataSpec.__setattr__`` on 0.27+: an assignment of a hook name (``names``) by code other than Composer's
    ``__init__`` is noted (:func:`_set_by`); Composer's goes to the instance, past a class's own (a property, which
    0.24.1 never set), or is kept apart where the user's code set the name first. Reads are Python's own."""
    del original  # called as record.original
    hooked = frozenset(names)

    def __setattr__(self: Any, name: str, value: Any) -> None:
        by = _set_by(self, name, value) if name in hooked and record.active else 'user'
        if by == 'composer':
            notes.own(self)[name] = value
        elif by == 'user':
            record.original(self, name, value)

    return __setattr__


def _composers(spec: Any, name: str, value: Any) -> bool:
    """Whether ``value`` (the instance's own ``name``) is what Composer's ``__init__`` assigned (for a DataSpec built
    before ``enable()``: Composer's identity)."""
    kept = notes.own(spec).get(notes.COMPOSERS_HOOKS)
    if kept is None:
        return not notes.holds(value)
    return name in kept and _same(kept[name], value)


def _trainers_own(spec: Any, name: str, value: Any) -> Any:
    """What the trainer reads for a hook name of 0.27+ that ``spec``'s class defines itself, ``value`` being the
    instance's own (or missing): Composer's (or an assignment over it), past the class's own; the class's own (or one
    the user's code assigned) is noted."""
    if value is patching.MISSING_ATTRIBUTE:
        try:
            value = object.__getattribute__(spec, name)
        except AttributeError:
            value = _fallback(spec, name)
    if not _composers(spec, name, value):
        _noting(spec).add(name)
    return value


def _for_the_user(spec: Any, name: str, value: Any) -> Any:
    if name not in _defined(type(spec)) or not _composers(spec, name, value):
        return value
    raw = vars(patching.definer(type(spec), name))[name]
    return raw.__get__(spec, type(spec)) if hasattr(type(raw), '__get__') else raw


def _make_users_lookup(
    original: Callable[[Any, str], Any], record: patching.Patch, *, names: tuple[str, ...]
) -> Callable[..., Any]:
    """``DataSpec.__getattribute__`` once a subclass defines a hook name of 0.27+ itself: a read of one of ``names``
    gets the class's own value where Composer's ``__init__`` hid it (the trainer reads through the loop's view, whose
    descriptor is found first)."""
    del original  # called as record.original
    hooked = frozenset(names)

    def __getattribute__(self: Any, name: str) -> Any:
        value = record.original(self, name)
        if name not in hooked or not record.active or STATE.stage is None or vars(type(self)).get(patching.SHARING):
            return value
        return _for_the_user(self, name, value)

    return __getattribute__


def for_trainer(spec: Any, name: str, value: Any, frame: LoopFrame) -> Any:
    """What the trainer's read of the transform hook ``spec.<name>`` through ``frame``'s view gets with the shim on,
    ``value`` being what it resolves to. A loop's reads get the hook its last read got while ``value`` and the stage
    are the same (:meth:`Served.__get__` asks that first): no object is made at every read (a long fit collects no
    more garbage than without the shim)."""
    stage = notes.stage_of(spec)
    if stage is None or frame.closed:  # left to Composer (the monitor's taps only), or read after the loop
        return notes.tapped(spec, name, value)
    held = frame.hooks.get(name)
    if held is not None and held[1] == stage and _same(held[0], value):
        return held[2]
    if STATE.family is Family.DROPPED and name == 'batch_transforms':
        _warn_built_before(spec)
    runs = _assigned(spec, name, value) if name in _noted(spec) else value  # the cache is keyed by what was read
    hook: Any
    if name == 'device_transforms':  # 0.25–0.26
        hook = BatchHook(spec, frame, None, runs, stage)
    elif name == 'batch_transforms':
        hook = BatchHook(spec, frame, runs, None, stage)
    elif stage == 'batch' and runs is not None and not notes.holds(runs):
        hook = runs  # Composer's own identity: nothing of the shim's runs per microbatch at stage batch
    else:
        hook = MicrobatchHook(spec, frame, runs, stage)
    frame.hooks[name] = (value, stage, hook)
    return hook


class Served:
    """A hook name on a view's class: in a loop the shim serves, a read gives the hook for what the name resolves to
    on the DataSpec (0.25–0.26: its own lookup, a subclass's property or method included; 0.27+: the value
    Composer's ``__init__`` put in its ``__dict__``); else what Python gives, through the monitor's tap. Assignments
    and deletions go to the DataSpec."""

    __slots__ = ('host', 'name')

    def __init__(self, name: str, host: bool) -> None:
        self.name, self.host = name, host

    def __get__(self, view: Any, owner: Optional[type] = None) -> Any:
        if view is None:
            return self
        spec, frame, name, stage = view._compatshim_of, view._compatshim_frame, self.name, STATE.stage
        if not frame.shim or stage is None:  # the shim off (the monitor's watch), or disabled in the loop
            return notes.tapped(spec, name, getattr(spec, name))  # what Python gives, through the monitor's taps
        mine: dict[str, Any] = object.__getattribute__(spec, '__dict__')
        if self.host:
            try:
                value = getattr(spec, name)
            except AttributeError:  # ``del spec.device_transforms``, or a subclass that never ran the base __init__
                value = None
        else:
            value = mine.get(name, patching.MISSING_ATTRIBUTE)
            special = view._compatshim_special.get(name)
            if special is not None:
                value = _trainers_own(spec, name, value) if special == 'own' else _looked_up(spec, name)
            elif value is patching.MISSING_ATTRIBUTE:
                value = _fallback(spec, name)
        stage = mine.get(notes.STAGE_ATTRIBUTE) or stage
        held = frame.hooks.get(name)
        if held is not None and held[0] is value and held[1] == stage:
            return held[2]
        return for_trainer(spec, name, value, frame)

    def __set__(self, view: Any, value: Any) -> None:
        setattr(view._compatshim_of, self.name, value)

    def __delete__(self, view: Any) -> None:
        delattr(view._compatshim_of, self.name)


class _Split:
    """``split_batch`` on a view (0.25–0.26): the DataSpec's own; in an armed step (stage microbatch) called through
    the frame, which keeps what it returned, the microbatches whose moves the transform follows."""

    def __get__(self, view: Any, owner: Optional[type] = None) -> Any:
        if view is None:
            return self
        split = view._compatshim_of.split_batch
        frame = view._compatshim_frame
        return split if frame.armed is None else functools.partial(frame.split, split)

    def __set__(self, view: Any, value: Any) -> None:
        view._compatshim_of.split_batch = value

    def __delete__(self, view: Any) -> None:
        del view._compatshim_of.split_batch


def _looked_up(spec: Any, name: str) -> Any:
    """``spec.<name>`` through another library's descriptor on ``DataSpec`` (``None`` where it has none)."""
    try:
        return getattr(spec, name)
    except AttributeError:
        return None


def _library_descriptor(base: type, name: str) -> bool:
    """Whether something (another library's descriptor) defines ``name`` on ``base`` or above it."""
    return patching.definer(base, name) is not None


def view_of(spec: Any, frame: LoopFrame, family: Optional[Family] = None) -> Any:
    """What the trainer reads ``spec`` through in ``frame``'s loop: an object of a subclass of its class (named as it
    is; an ``isinstance`` of each of its classes) sharing its ``__dict__``, whose hook names are :class:`Served`.
    Decided here, once per loop, for 0.27+: which hook names the DataSpec's class defines itself (read past, to
    Composer's value), and which another library's descriptor on ``DataSpec`` serves (read through it). ``family``:
    the installed release's (the shim's where it is on)."""
    family = family or STATE.family or Family.REJECTED
    host = family is Family.HOST
    special: dict[str, str] = {}
    if not host:
        base = sys.modules['composer.core.data_spec'].DataSpec
        special = {name: 'looked up' for name in HOOKS[family] if _library_descriptor(base, name)}
        special.update(dict.fromkeys(_defined(type(spec)), 'own'))
    served: dict[str, Any] = {name: Served(name, host) for name in HOOKS[family]}
    if host:
        served['split_batch'] = _Split()
    return patching.sharing(spec, served, _compatshim_frame=frame, _compatshim_special=special)


#: What the shim notes of a DataSpec, by identity (a subclass may define ``__eq__`` and so not hash), while it lives:
#: :data:`BUILT` where the shim's ``__init__`` built it, and the hook names of 0.27+ that code other than Composer's
#: ``__init__`` assigned on it (a subclass's own).
_NOTED: dict[int, tuple[weakref.ref[Any], set[str]]] = {}
BUILT = '<built by the shim>'


def _noted(spec: Any) -> set[str]:
    held = _NOTED.get(id(spec))
    return held[1] if held is not None and held[0]() is spec else set()


def _noting(spec: Any) -> set[str]:
    """``spec``'s notes, to add to (gone when it is)."""
    key, held = id(spec), _NOTED.get(id(spec))
    if held is None or held[0]() is not spec:
        held = _NOTED[key] = (weakref.ref(spec, lambda _, key=key: _NOTED.pop(key, None)), set())  # type: ignore[misc]
    return held[1]


def _assigned(spec: Any, name: str, value: Any) -> Any:
    """What the trainer's hook runs for a hook name of 0.27+ whose value code other than Composer's set, on ``spec`` or
    its class: code written for 0.24.1 used these names for its own purposes (0.24.1 never read them), so the value is
    never called; what Composer's ``__init__`` assigned runs instead (kept apart), if anything. A value callable with a
    batch could be meant for Composer: said once per class and name."""
    kept = notes.own(spec).get(notes.COMPOSERS_HOOKS, {}).get(name)
    if kept is not None and _same(kept, value):  # Composer's, read past what the class's code set (its property)
        return value
    if notes.holds(value) and callable(value) and _takes_a_batch(value):
        warn_once(
            f'assigned:{type(spec).__module__}.{type(spec).__qualname__}.{name}',
            f'compatshim: {type(spec).__qualname__} keeps its own {name}: the trainer does not call it, as 0.24.1 '
            f'never read that name (Composer {installed("mosaicml")} would). To have it called, pass it to the '
            f'DataSpec as {name}=...',
            CompatShimWarning,
            stacklevel=4,
        )
    return kept


def _takes_a_batch(value: Any) -> bool:
    """Whether ``value`` can be called with one batch (one whose signature Python cannot read: assumed so)."""
    try:
        inspect.signature(value).bind(None)
    except TypeError:
        return False
    except Exception:  # noqa: BLE001  (no signature Python can read; a proxy that raises on a look at it)
        pass
    return True


def _warn_built_before(spec: Any) -> None:
    """Say once, at the trainer's first read of its hooks, that a DataSpec was built before ``enable()`` on 0.27–0.28,
    which drop a ``device_transforms`` argument at construction without a trace: none can run on the device."""
    own, said = notes.own(spec), 'built-before' in STATE.warned
    if said or 'device_transforms' in own or 'batch_transforms' not in own or BUILT in _noted(spec):
        return  # said; or built (or copied) with the shim on; or Composer's __init__ never ran (a delegating class)
    STATE.warned.add('built-before')
    warnings.warn(
        f'compatshim: {notes.spec_name(spec)} was built before compatshim.enable(): a device_transforms given to it '
        f'was dropped by Composer {installed("mosaicml")} at construction, without a trace, and does not run. Build '
        'DataSpecs after enable(), or start the job with compatshim run.',
        CompatShimWarning,
        stacklevel=4,
    )


def _same(held: Any, value: Any) -> bool:
    """Whether a read resolved to what an earlier one did: the same object, or the same method bound to the same
    object (each read of a method makes a new bound method)."""
    if held is value:
        return True
    return (
        type(held) is types.MethodType
        and type(value) is types.MethodType
        and held.__func__ is value.__func__
        and held.__self__ is value.__self__
    )


def _fallback(spec: Any, name: str) -> Any:
    """What Python gives after ``AttributeError``: the class's ``__getattr__`` (a delegating subclass), else ``None``
    (``del spec.device_transforms``, or a subclass that never ran the base ``__init__``)."""
    fallback = getattr(type(spec), '__getattr__', None)
    try:
        return None if fallback is None else fallback(spec, name)
    except AttributeError:
        return None


def _subclasses(cls: type) -> list[type]:
    """``cls``'s direct subclasses, the views made of it aside."""
    found: list[type] = cls.__subclasses__()
    return [sub for sub in found if not vars(sub).get(patching.SHARING)]


def instrument(data_spec_cls: type, family: Family) -> None:
    """Wrap ``DataSpec.__init__`` for ``family``, and on 0.27+ its ``__setattr__`` (the trainer's reads go through the
    loop's view, :func:`view_of`)."""
    patching.forget_sharing()  # the views made for the family enabled before
    STATE.patches.patch(data_spec_cls, '__init__', functools.partial(_make_init, family=family))
    if family is Family.HOST:
        return
    STATE.patches.patch(data_spec_cls, '__setattr__', functools.partial(_make_setattr, names=HOOKS[family]))
    classes: list[type] = _subclasses(data_spec_cls)
    while classes:  # one defined before enable() that keeps a name of its own
        cls = classes.pop()
        if _defined(cls):
            _serve_own_names(data_spec_cls, family)
            break
        classes += _subclasses(cls)
