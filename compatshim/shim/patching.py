"""compatshim's one way to replace an attribute and put back what was there.

After gevent's ``monkey._state`` (one table of what was saved) and OpenTelemetry's ``BaseInstrumentor`` (each
instrumentor owns its patches and their lifecycle):

* :class:`Swap` / :func:`swap`: one attribute of one object (a class or an instance) replaced, with what its own
  ``__dict__`` held before (or nothing, when it only inherited it) and what it resolved to (what the
  replacement calls). :meth:`Swap.undo` puts the saved value back — or deletes the attribute the object never had —
  and only while the attribute is still the replacement: it never removes what someone else put there since. Every
  temporary replacement of compatshim's uses it (the recorder's byte counter on a ``Device``, the loop frame's
  interposer on its class, the monitor's taps, the bench's planted delay).
* :class:`Patch` / :class:`PatchSet`: a lasting replacement of a class attribute (a Composer method) and the set that
  owns it. A patch's replacement checks :attr:`Patch.active` on every call and passes straight through to the original
  when it is off. :meth:`PatchSet.restore_all` undoes a patch exactly where it is on top; where something else (an APM
  agent, a tracer, a profiler) has wrapped it since, putting the original back would remove that wrapper, so the patch
  is left in that chain, switched off, and a :class:`~compatshim.errors.CompatShimWarning` names it. A later
  :meth:`PatchSet.patch` of the same target switches it back on if it is still reachable beneath the other wrapper
  (``__wrapped__``), instead of stacking a second one. compatshim's own patch sets (the shim's, the monitor's watch,
  the monitor's attaching) splice out of each other's chains, never leaving pass-throughs beneath one another.

Imports nothing heavy.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import inspect
import types
import warnings
import weakref
from typing import Any, Callable, Optional

from compatshim.errors import CompatShimWarning

__all__ = ['Patch', 'PatchSet', 'Swap', 'bound', 'definer', 'describe', 'held', 'label', 'swap']

#: What an object's own ``__dict__`` held for an attribute it only inherited (or never had).
_MISSING: Any = object()
#: What a patch's ``original`` is where the class had no such attribute at all (the replacement adds it).
MISSING_ATTRIBUTE: Any = _MISSING


def label(owner: Any, name: str) -> str:
    """``module.Qualname.name`` of an attribute of a class (of an instance: its class's)."""
    cls = owner if isinstance(owner, type) else type(owner)
    return f'{cls.__module__}.{cls.__qualname__}.{name}'


@dataclasses.dataclass(eq=False)
class Swap:
    """One attribute of one object, replaced."""

    owner: Any
    name: str
    #: What ``vars(owner)[name]`` held before, or ``_MISSING`` when the owner only inherited the attribute.
    saved: Any
    #: The attribute as it resolved before (inherited ones included): what the replacement calls.
    original: Any
    replacement: Any = None

    def is_on_top(self) -> bool:
        """Whether the owner's attribute is still this replacement (nothing replaced it since)."""
        return vars(self.owner).get(self.name, _MISSING) is self.replacement

    def undo(self) -> bool:
        """Put back what was there, if the attribute is still this replacement; whether it was."""
        if not self.is_on_top():
            return False
        if self.saved is _MISSING:
            _delete(self.owner, self.name)
        else:
            _set(self.owner, self.name, self.saved)
        return True


def held(owner: Any, name: str) -> Any:
    """``owner.name`` as the object itself holds it: an instance's own ``__dict__`` entry first (a data descriptor on
    its class is not asked), else what the name resolves to."""
    if not isinstance(owner, type) and name in getattr(owner, '__dict__', ()):
        return vars(owner)[name]
    return getattr(owner, name)


def definer(cls: type, name: str) -> Optional[type]:
    """The first class of ``cls``'s MRO that holds ``name`` itself: where Python's lookup finds it (``None``: none)."""
    return next((k for k in cls.__mro__ if name in vars(k)), None)


def _set(owner: Any, name: str, value: Any) -> None:
    """Set ``owner.name`` in the object itself: an instance's ``__dict__`` (past any data descriptor), or a class."""
    if isinstance(owner, type) or not hasattr(owner, '__dict__'):
        setattr(owner, name, value)
    else:
        vars(owner)[name] = value


def _delete(owner: Any, name: str) -> None:
    if isinstance(owner, type) or not hasattr(owner, '__dict__'):
        delattr(owner, name)
    else:
        del vars(owner)[name]


def swap(owner: Any, name: str, make: Callable[[Any], Any]) -> Swap:
    """Replace ``owner.name`` with ``make(original)``, remembering what was there (see :class:`Swap`). An instance's
    attribute is replaced in its own ``__dict__``: a data descriptor on its class neither sees nor converts it."""
    record = Swap(owner, name, vars(owner).get(name, _MISSING), held(owner, name))
    record.replacement = make(record.original)
    _set(owner, name, record.replacement)
    return record


@dataclasses.dataclass(eq=False)
class Patch(Swap):
    """A lasting replacement of a class attribute, owned by a :class:`PatchSet`."""

    #: Read by the replacement on every call; off: a pure pass-through to :attr:`original`.
    active: bool = True

    @property
    def label(self) -> str:
        return label(self.owner, self.name)

    def is_reachable(self) -> bool:
        """Whether the replacement is still in the attribute's ``__wrapped__`` chain (someone else's wrapper on top)."""
        func = vars(self.owner).get(self.name, _MISSING)
        for _ in range(64):  # a chain this deep is a cycle
            if func is self.replacement:
                return True
            func = getattr(func, '__wrapped__', _MISSING)
            if func is _MISSING:
                return False
        return False


class PatchSet:
    """The patches one part of compatshim owns (the shim's, the monitor's watch), live and detached.

    Args:
        who: How its undo is named in the warning about another library's wrapper (``'compatshim.disable()'``).
    """

    #: Every patch set compatshim keeps: its own wrappers are spliced out of a chain, never left beneath one another.
    ALL: list[PatchSet] = []

    def __init__(self, who: str) -> None:
        self.who = who
        #: Live patches, in patch order.
        self.live: dict[tuple[Any, str], Patch] = {}
        #: Switched-off replacements left beneath another wrapper by :meth:`restore_all`, to switch back on later.
        self.detached: dict[tuple[Any, str], Patch] = {}
        PatchSet.ALL.append(self)

    def __contains__(self, key: tuple[Any, str]) -> bool:
        return key in self.live

    def get(self, owner: Any, name: str) -> Optional[Patch]:
        return self.live.get((owner, name))

    def labels(self) -> tuple[str, ...]:
        """Dotted names of every live patch, in patch order."""
        return tuple(record.label for record in self.live.values())

    def patch(self, owner: type, name: str, make: Callable[[Any, Patch], Any]) -> Patch:
        """Replace ``owner.name`` with ``make(original, record)``, remembering what was there.

        If an earlier :meth:`restore_all` left this set's replacement switched off beneath another wrapper, and it is
        still there, it is switched back on instead: the other wrapper stays on top, and nothing is stacked twice.

        Raises:
            RuntimeError: If the target is already patched by this set (an internal error: callers check first).
        """
        key = (owner, name)
        if key in self.live:
            raise RuntimeError(f'compatshim: {label(owner, name)} is already patched')
        old = self.detached.pop(key, None)
        if old is not None and old.is_reachable():
            old.active = True
            self.live[key] = old
            return old
        # An attribute the class only inherits (``DataSpec.__getattribute__``) is added, and deleted again on undo.
        record = Patch(owner, name, vars(owner).get(name, _MISSING), getattr(owner, name, _MISSING))
        record.replacement = make(record.original, record)
        self.live[key] = record
        setattr(owner, name, record.replacement)
        return record

    def restore_all(self) -> None:
        """Undo every live patch, newest first: exactly where it is on top, else switch it off and warn."""
        left: list[str] = []
        for key in reversed(list(self.live)):
            record = self.live.pop(key)
            record.active = False
            if record.undo() or _splice_out(record):
                continue  # restored; or beneath another of compatshim's wrappers, which now calls what this one did
            if record.is_reachable():
                self.detached[key] = record
                on_top = vars(record.owner).get(record.name)
                left.append(f'{record.owner.__qualname__}.{record.name} (now {describe(on_top)})')
            # else: someone replaced the attribute outright (without keeping ours): nothing of ours is left to restore.
        if left:
            warnings.warn(
                f'{self.who}: ' + ', '.join(reversed(left)) + ' were wrapped by other code after they were patched; '
                "compatshim's wrappers were left beneath them as inert pass-throughs, so that code keeps working. "
                'Composer behaves as without them.',
                CompatShimWarning,
                stacklevel=3,
            )


def _splice_out(record: Patch) -> bool:
    """Take ``record``'s replacement out from under another of compatshim's own live wrappers of the same target.

    compatshim's wrappers call ``record.original`` (not a copy of it), so the one above is made to call what ``record``
    wrapped and to restore what ``record`` saved; the chain loses exactly ``record``'s link and nothing else.
    """
    for patches in PatchSet.ALL:
        above = patches.get(record.owner, record.name)
        if above is not None and above is not record and above.original is record.replacement:
            above.original, above.saved = record.original, record.saved
            with contextlib.suppress(AttributeError, TypeError):
                above.replacement.__wrapped__ = record.original
            return True
    return False


def bound(signature: inspect.Signature, /, *args: Any, **kwargs: Any) -> Optional[inspect.BoundArguments]:
    """A call bound against the original's signature; ``None`` where it does not bind (Composer reports that)."""
    try:
        return signature.bind_partial(*args, **kwargs)
    except TypeError:
        return None


def describe(obj: Any) -> str:
    """``module.qualname`` of a function or object, for messages: the object itself, not what it wraps.

    ``functools.wraps`` copies the wrapped function's ``__module__`` and ``__qualname__`` onto a wrapper, so a plain
    function is named from its own code and globals; a wrapt wrapper by the function given to wrapt.
    """
    if type(obj) is types.FunctionType:
        code = obj.__code__
        return f'{obj.__globals__.get("__name__", obj.__module__)}.{getattr(code, "co_qualname", code.co_name)}'
    wrapper = getattr(obj, '_self_wrapper', None)  # wrapt's FunctionWrapper (a proxy: type() sees through it)
    if type(wrapper) is types.FunctionType:
        return f'{describe(wrapper)} (wrapt)'
    module = getattr(obj, '__module__', None) or type(obj).__module__
    name = getattr(obj, '__qualname__', None) or type(obj).__qualname__
    return f'{module}.{name}'


#: Marks the classes :func:`sharing` makes (never a user's).
SHARING = '_compatshim_view'
#: The class :func:`sharing` made for each class, weakly both ways (a user's class may go, and what was made for it).
_SHARING: weakref.WeakKeyDictionary[type, weakref.ref[type]] = weakref.WeakKeyDictionary()


def _plain_base(cls: type) -> type:
    """The nearest class of ``cls``'s MRO that can be subclassed without running anyone's code: none of its classes
    defines ``__init_subclass__`` (a registry's, a 'final' class's) and its metaclass is ``type``."""
    for k in cls.__mro__:
        if type(k) is type and not any('__init_subclass__' in vars(b) for b in k.__mro__[:-1]):
            return k
    return object


def _itself(obj: Any) -> Any:
    """What a pickled view unpickles as: the object it was a view of."""
    return obj


def _forward(view: Any, name: str) -> Any:
    return getattr(object.__getattribute__(view, '_compatshim_of'), name)


def sharing(obj: Any, namespace: dict[str, Any], **slots: Any) -> Any:
    """An object that shares ``obj``'s ``__dict__`` (what is set on one is set on the other), of a subclass of its
    class named as it is (an ``isinstance`` of each of its classes) holding ``namespace`` (made once per class, with
    the first ``namespace`` given), with ``slots`` of its own set and ``_compatshim_of`` (``obj``). A class whose
    subclassing runs code (its ``__init_subclass__``, a metaclass) is never subclassed: the object's class derives from
    the nearest base that is not, and forwards what it lacks to ``obj``. Copied or pickled, it is ``obj``."""
    cls = type(obj)
    held = _SHARING.get(cls)
    made = None if held is None else held()
    if made is None:
        base = _plain_base(cls)
        body = {
            **namespace, '__slots__': ('_compatshim_of', *slots), SHARING: True,
            '__reduce_ex__': lambda view, protocol: (_itself, (view._compatshim_of,)),
            '__copy__': lambda view: copy.copy(view._compatshim_of),
            '__deepcopy__': lambda view, memo: copy.deepcopy(view._compatshim_of, memo),
        }  # fmt: skip
        if base is not cls:
            body['__getattr__'] = _forward
        body.update(__module__=cls.__module__, __qualname__=cls.__qualname__)
        made = type(cls.__name__, (base,), body)
        _SHARING[cls] = weakref.ref(made)
    view: Any = object.__new__(made)
    object.__setattr__(view, '__dict__', object.__getattribute__(obj, '__dict__'))
    object.__setattr__(view, '_compatshim_of', obj)
    for name, value in slots.items():
        object.__setattr__(view, name, value)
    return view


def forget_sharing() -> None:
    """Forget the classes :func:`sharing` made (their namespaces were for the family enabled before)."""
    _SHARING.clear()
