"""Checks, on every ``enable()`` before anything is patched, that Composer's patch targets still have the shape a
family's patch plan expects: for a release in the support table a mismatch means a broken install; for an untested
release it is how the shim refuses code it has not seen.

The checks read code objects (``co_names``), not source, so byte-compiled installs are checked like source installs;
other code's wrappers on a target are seen through by ``__wrapped__``.
"""

from __future__ import annotations

import inspect
import types
from typing import Any, Callable, Optional

from compatshim.config.support import HOOKS, Family
from compatshim.errors import UnexpectedComposerShapeError
from compatshim.shim.patching import describe

__all__ = ['check_shape', 'detect_family']

_PARAMS = {
    Family.HOST: ({'device_transforms'}, {'batch_transforms', 'microbatch_transforms'}),
    Family.DROPPED: ({'device_transforms', 'batch_transforms', 'microbatch_transforms'}, set()),
    Family.REJECTED: ({'batch_transforms', 'microbatch_transforms'}, {'device_transforms'}),
}


def names_used(code: types.CodeType) -> set[str]:
    """Every global and attribute name ``code`` and the code nested in it (closures, comprehensions) use."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= names_used(const)
    return names


def _code(func: Callable[..., Any]) -> tuple[Optional[types.CodeType], Any]:
    """The code object beneath ``func``'s wrappers, and the innermost object found."""
    inner = inspect.unwrap(func)
    inner = getattr(inner, '__func__', inner)
    return getattr(inner, '__code__', None), inner


def _problems(family: Family, data_spec_cls: type, trainer_cls: type) -> list[str]:
    problems: list[str] = []
    required, forbidden = _PARAMS[family]
    params = set(inspect.signature(data_spec_cls.__dict__['__init__']).parameters)
    if missing := required - params:
        problems.append(f'DataSpec.__init__ lacks {sorted(missing)}')
    if extra := forbidden & params:
        problems.append(f'DataSpec.__init__ unexpectedly takes {sorted(extra)}')
    hook, *microbatch = HOOKS[family]  # the names each method's code must use: the call sites the plan relies on
    uses = {
        '_train_loop': [hook],
        '_train_microbatches': ['batch_to_device', *microbatch],
        '_eval_loop': [hook, 'batch_to_device', *microbatch],
        'predict': [hook, 'batch_to_device'],
    }
    for name, needles in uses.items():
        method = getattr(trainer_cls, name, None)
        if not callable(method):
            problems.append(f'Trainer.{name} is missing')
            continue
        code, inner = _code(method)
        if code is None:
            problems.append(f'Trainer.{name} is {describe(inner)}, not a Python function')
            continue
        used = names_used(code)
        absent = [needle for needle in needles if needle not in used]
        if absent and getattr(inner, '__name__', None) != name:
            problems.append(
                f'Trainer.{name} is {describe(inner)}, a wrapper that hides the method beneath it '
                '(it sets no __wrapped__)'
            )
            continue
        problems.extend(f'Trainer.{name} no longer uses {needle}' for needle in absent)
    return problems


def check_shape(family: Family, data_spec_cls: type, trainer_cls: type, version: str) -> None:
    """Raise :class:`UnexpectedComposerShapeError` unless every patch target of ``family`` looks as expected."""
    problems = _problems(family, data_spec_cls, trainer_cls)
    if problems:
        raise UnexpectedComposerShapeError(
            f'compatshim: Composer {version} does not have the shape of the {family.value!r} family it was '
            f'matched to ({"; ".join(problems)}). Nothing was patched.',
        )


def detect_family(data_spec_cls: type, trainer_cls: type, version: str) -> Family:
    """The family whose shape an untested release matches, or :class:`UnexpectedComposerShapeError`."""
    report = {}
    for family in (Family.REJECTED, Family.DROPPED, Family.HOST):
        problems = _problems(family, data_spec_cls, trainer_cls)
        if not problems:
            return family
        report[family.value] = '; '.join(problems)
    details = ' | '.join(f'{name}: {text}' for name, text in report.items())
    raise UnexpectedComposerShapeError(
        f'compatshim: Composer {version} matches none of the shapes the shim knows ({details}). Nothing was patched; '
        'this release needs a new entry in the support table (see CONTRIBUTING.md).',
    )
