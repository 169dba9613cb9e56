"""Checks that Composer's patch targets still have the shape a family's patch plan expects.

Run on every ``enable()`` before anything is patched. For a release in the support table a mismatch means a broken
install; for an untested release (opted in) it is how the shim refuses code it has not seen.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable

from compatshim._support import Family
from compatshim.errors import UnexpectedComposerShapeError

__all__ = ['check_shape', 'detect_family']

# (method, substrings its source must contain), per family. These are the call sites the patch plan relies on.
_BATCH_HOOK = {Family.HOST: 'device_transforms(', Family.DROPPED: 'batch_transforms(', Family.REJECTED: 'batch_transforms('}
_PARAMS = {
    Family.HOST: ({'device_transforms'}, {'batch_transforms', 'microbatch_transforms'}),
    Family.DROPPED: ({'device_transforms', 'batch_transforms', 'microbatch_transforms'}, set()),
    Family.REJECTED: ({'batch_transforms', 'microbatch_transforms'}, {'device_transforms'}),
}


def _source(func: Callable[..., Any]) -> str:
    try:
        return inspect.getsource(func)
    except (OSError, TypeError):
        return ''


def _problems(family: Family, data_spec_cls: type, trainer_cls: type) -> list[str]:
    problems: list[str] = []
    required, forbidden = _PARAMS[family]
    params = set(inspect.signature(data_spec_cls.__init__).parameters)
    if missing := required - params:
        problems.append(f'DataSpec.__init__ lacks {sorted(missing)}')
    if extra := forbidden & params:
        problems.append(f'DataSpec.__init__ unexpectedly takes {sorted(extra)}')
    hook = _BATCH_HOOK[family]
    calls = {
        '_train_loop': [hook],
        '_train_microbatches': ['batch_to_device('] + ([] if family is Family.HOST else ['microbatch_transforms(']),
        '_eval_loop': [hook, 'batch_to_device('] + ([] if family is Family.HOST else ['microbatch_transforms(']),
        'predict': [hook, 'batch_to_device('],
    }
    for name, needles in calls.items():
        method = getattr(trainer_cls, name, None)
        if not callable(method):
            problems.append(f'Trainer.{name} is missing')
            continue
        source = _source(method)
        for needle in needles:
            if needle not in source:
                problems.append(f'Trainer.{name} no longer calls {needle[:-1]}')
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
