"""The shim's patches of ``composer.core.data_spec.DataSpec``.

* ``__init__`` takes the shim's own ``data_transfer_stage`` (kept on the DataSpec) and, where Composer no longer takes
  ``device_transforms`` as 0.24.1 did (0.27+), the argument: Composer builds the DataSpec without it, then the wrapper
  sets ``self.device_transforms`` as 0.24.1's ``__init__`` did (a subclass's property setter sees it). On 0.25–0.26
  Composer's own ``__init__`` still sets it.
* The trainer's reads of the transform hooks it calls get a hook (:mod:`compatshim.shim.hooks`) bound to the DataSpec
  and made from what ``device_transforms`` resolves to at that read; every other read gets what Python gives. The
  DataSpec is the one owner of the transform; the hooks keep no copy. On 0.25–0.26 the name is ``device_transforms``,
  which 0.24.1 code may serve itself (a subclass's property or method), so ``__getattribute__`` serves it; on 0.27+ the
  names are ``batch_transforms``/``microbatch_transforms``, which 0.24.1 code never defines, so each is a data
  descriptor (:class:`HookName`) and a read of any other attribute costs what Python's own lookup costs.
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
from compatshim.config.support import HOOKS, WITHOUT_SHIM, Family, installed
from compatshim.errors import CompatShimWarning
from compatshim.shim import notes, patching
from compatshim.shim.hooks import BatchHook, MicrobatchHook
from compatshim.shim.loops import by_loop, current_frame
from compatshim.shim.registry import STATE

__all__ = ['HookName', 'for_trainer', 'given', 'instrument', 'lookups', 'make_lookup', 'own_hook_names', 'targets']


def lookups(family: Family) -> tuple[str, ...]:
    """The attributes of ``DataSpec`` that serve the trainer's reads of ``family``'s hook names."""
    return ('__getattribute__',) if family is Family.HOST else HOOKS[family]


def targets(family: Family) -> tuple[str, ...]:
    """What this module patches for ``family``, dotted."""
    return tuple(f'composer.core.data_spec.DataSpec.{name}' for name in ('__init__', *lookups(family)))


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
    names = _DEFINED.get(cls)
    if names is None:
        base = sys.modules['composer.core.data_spec'].DataSpec
        names = _DEFINED[cls] = tuple(own_hook_names(cls, base, HOOKS[STATE.family or Family.REJECTED]))
    return names


def _serve_own_names(data_spec_cls: type, family: Family) -> None:
    """The shim's ``__getattribute__`` on ``DataSpec`` (once), for subclasses that define a hook name of 0.27+ on the
    class: Composer's ``__init__`` assigns that name on the instance, which hides the class's own value from the
    user's code and the shim's descriptor from the trainer. With it, the trainer's read gets the shim's hook (around
    Composer's value), and every other read the class's own value, as on 0.24.1."""
    with STATE.lock:
        if (data_spec_cls, '__getattribute__') not in STATE.patches:
            lookup = functools.partial(
                make_lookup, names=HOOKS[family], serve=_for_the_trainer, while_on=True, other=_for_the_user
            )
            STATE.patches.patch(data_spec_cls, '__getattribute__', lookup)
            STATE.patches.patch(data_spec_cls, '__setattr__', _make_setattr)


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


def _make_setattr(original: Callable[[Any, str, Any], None], record: patching.Patch) -> Callable[..., None]:
    """``DataSpec.__setattr__`` where a subclass defines a hook name of 0.27+ itself: Composer's ``__init__``'s
    assignment of that name goes to the instance, past the class's own (a property, which 0.24.1 never set)."""
    del original  # called as record.original

    def __setattr__(self: Any, name: str, value: Any) -> None:
        by = _set_by(self, name, value) if record.active and name in _defined(type(self)) else 'user'
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


def _for_the_trainer(spec: Any, name: str, value: Any) -> Any:
    if name not in _defined(type(spec)):
        return value  # served by the descriptor beneath
    value = notes.own(spec).get(name, value)  # Composer's (or an assignment over it), past the class's property
    if not _composers(spec, name, value):  # the class's own, or one the user's code assigned
        _noting(spec).add(name)
    return for_trainer(spec, name, value)


def _for_the_user(spec: Any, name: str, value: Any) -> Any:
    if name not in _defined(type(spec)) or not _composers(spec, name, value):
        return value
    raw = vars(patching.definer(type(spec), name))[name]
    return raw.__get__(spec, type(spec)) if hasattr(type(raw), '__get__') else raw


def for_trainer(spec: Any, name: str, value: Any) -> Any:
    """What the trainer's read of the transform hook ``spec.<name>`` gets with the shim on, ``value`` being what it
    resolves to. A loop's reads of its own DataSpec get the hook its last read got while ``value`` and the stage are
    the same: no object is made at every read (a long fit collects no more garbage than without the shim)."""
    stage = notes.stage_of(spec)
    if stage is None:  # left to Composer: the monitor's taps only
        return notes.tapped(spec, name, value)
    frame = current_frame()
    if frame is None:  # a loop that began before enable(): it runs as the release does, said once
        _warn_loop_running(spec)
        return notes.tapped(spec, name, value)
    hooks = None if frame.spec is not spec else frame.hooks
    held = None if hooks is None else hooks.get(name)
    if held is not None and held[1] == stage and _same(held[0], value):
        return held[2]
    if STATE.family is Family.DROPPED and name == 'batch_transforms':
        _warn_built_before(spec)
    runs = _assigned(spec, name, value) if name in _noted(spec) else value  # the cache is keyed by what was read
    hook: Any
    if name == 'device_transforms':  # 0.25–0.26
        hook = BatchHook(spec, None, runs, stage)
    elif name == 'batch_transforms':
        hook = BatchHook(spec, runs, None, stage)
    else:
        hook = MicrobatchHook(spec, runs, stage)
    if hooks is not None:
        hooks[name] = (value, stage, hook)
    return hook


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
        key = f'assigned:{type(spec).__module__}.{type(spec).__qualname__}.{name}'
        if key not in STATE.warned:
            STATE.warned.add(key)
            warnings.warn(
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


def _warn_loop_running(spec: Any) -> None:
    """Say once that the trainer read a hook in a loop that began before ``enable()`` (a callback that enables the
    shim at ``FIT_START``, a fit started in a notebook before it): that loop runs as the release does, never with its
    transform silently dropped; the next loop opens with the shim."""
    if 'loop-running' in STATE.warned:
        return
    STATE.warned.add('loop-running')
    warnings.warn(
        f'compatshim: enable() was called while a Composer loop over {notes.spec_name(spec)} was running: until that '
        f'loop ends it runs as Composer {installed("mosaicml")} does ({WITHOUT_SHIM[STATE.family]}); the next fit, '
        'eval or predict runs it on the device. Call enable() before the Trainer runs (or start the job with '
        'compatshim run).',
        CompatShimWarning,
        stacklevel=4,
    )


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


def make_lookup(
    original: Callable[[Any, str], Any],
    record: patching.Patch,
    *,
    names: tuple[str, ...],
    serve: Callable[[Any, str, Any], Any],
    while_on: bool,
    other: Optional[Callable[[Any, str, Any], Any]] = None,
) -> Callable[..., Any]:
    """``DataSpec.__getattribute__`` in a patch set's ``record`` (the shim's and the watch's up to 0.26; on 0.27+ the
    shim's and the watch's once a subclass defines a hook name itself): a read of ``names`` by the running loop, while
    the shim's switch is ``while_on``, gets ``serve(spec, name, value)``; any other read of them ``other(spec, name,
    value)`` (given), or what Python gives, as every other read does."""
    del original  # called as record.original: another of compatshim's patch sets may splice it
    hooked = frozenset(names)

    def __getattribute__(self: Any, name: str) -> Any:
        if name not in hooked or (STATE.stage is not None) is not while_on or not record.active:
            return record.original(self, name)
        try:
            value = record.original(self, name)
        except AttributeError:  # ``del spec.device_transforms``, or a subclass that never ran the base ``__init__``
            if not while_on or not by_loop():  # only the shim stands in for a missing value: the watch observes
                raise
            return serve(self, name, _fallback(self, name))
        if by_loop():
            return serve(self, name, value)
        return value if other is None else other(self, name, value)

    return __getattribute__


class HookName:
    """A data descriptor for one hook name the trainer reads on 0.27+, in a patch set's ``record``: the value lives in
    the DataSpec's own ``__dict__``, where Composer's ``__init__`` puts it. A read by the running loop, while the shim's
    switch is ``while_on`` (the shim's descriptor: on; the monitor's watch: off), gets ``serve(spec, name, value)``;
    any other read gets the value (through the other patch set's descriptor beneath, which may serve it), or Python's
    ``AttributeError`` (then the class's ``__getattr__``) where there is none."""

    def __init__(
        self, original: Any, record: patching.Patch, *, name: str, serve: Callable[[Any, str, Any], Any], while_on: bool
    ) -> None:
        del original  # read as record.original: another of compatshim's patch sets may splice it
        self.name, self.record, self.serve, self.while_on = name, record, serve, while_on
        self.__wrapped__ = record.original

    def __get__(self, spec: Any, owner: Optional[type] = None) -> Any:
        if spec is None:
            return self
        name = self.name
        value = notes.own(spec).get(name, patching.MISSING_ATTRIBUTE)
        missing = value is patching.MISSING_ATTRIBUTE  # only the shim stands in for it: the watch observes
        serving = self.record.active and (STATE.stage is not None) is self.while_on and (self.while_on or not missing)
        if serving and by_loop():
            return self.serve(spec, name, _fallback(spec, name) if missing else value)
        below = self.record.original
        if below is not patching.MISSING_ATTRIBUTE:  # the other patch set's (or a library's), which may serve it
            return below.__get__(spec, owner)
        if missing:  # ``del spec.batch_transforms``, or a subclass that never ran __init__
            raise _no_attribute(spec, name)
        return value

    def __set__(self, spec: Any, value: Any) -> None:
        if _set_by(spec, self.name, value) != 'kept':
            notes.own(spec)[self.name] = value

    def __delete__(self, spec: Any) -> None:
        try:
            del notes.own(spec)[self.name]
        except KeyError:
            raise _no_attribute(spec, self.name) from None


def _no_attribute(spec: Any, name: str) -> AttributeError:
    """The error Python gives for an attribute ``spec`` does not have."""
    return AttributeError(f'{type(spec).__name__!r} object has no attribute {name!r}')


def instrument(data_spec_cls: type, family: Family) -> None:
    """Wrap ``DataSpec.__init__`` and the trainer's reads of its transform hooks for ``family``."""
    STATE.patches.patch(data_spec_cls, '__init__', functools.partial(_make_init, family=family))
    if family is Family.HOST:
        lookup = functools.partial(make_lookup, names=HOOKS[family], serve=for_trainer, while_on=True)
        STATE.patches.patch(data_spec_cls, '__getattribute__', lookup)
        return
    for name in HOOKS[family]:
        served = functools.partial(HookName, name=name, serve=for_trainer, while_on=True)
        STATE.patches.patch(data_spec_cls, name, served)
    classes: list[type] = data_spec_cls.__subclasses__()
    while classes:  # one defined before enable() that keeps a name of its own
        cls = classes.pop()
        if _defined(cls):
            _serve_own_names(data_spec_cls, family)
            break
        classes += cls.__subclasses__()
