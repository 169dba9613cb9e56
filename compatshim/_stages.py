"""The two transfer stages, their validation, and the process-wide default the shim is enabled with."""

from __future__ import annotations

import threading
from typing import Literal, Optional

__all__ = ['STAGES', 'Stage', 'current_default', 'is_active', 'set_active', 'validate_stage']

Stage = Literal['batch', 'microbatch']

#: ``batch``: move the whole batch once, transform it once, then split (coherent; the 0.24.1 behaviour).
#: ``microbatch``: move each microbatch, then transform it (one microbatch on the device at a time).
STAGES: tuple[str, ...] = ('batch', 'microbatch')


def validate_stage(stage: object, *, what: str = 'stage') -> Stage:
    """Return ``stage`` if it names a stage, else raise a ``ValueError`` that lists the choices.

    Args:
        stage: The value to check.
        what: How the caller calls the argument, for the message.
    """
    if not isinstance(stage, str) or stage not in STAGES:
        choices = ', '.join(repr(s) for s in STAGES)
        raise ValueError(f'compatshim: unknown {what} {stage!r}; choose one of {choices}')
    return stage  # type: ignore[return-value]


class _Active:
    """Whether the shim is on, and its default stage. Read on every batch, written under the API lock."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.stage: Optional[Stage] = None  # None while the shim is off


_active = _Active()


def is_active() -> bool:
    """Whether ``enable()`` patched Composer and ``disable()`` has not run since."""
    return _active.stage is not None


def current_default() -> Optional[Stage]:
    """The stage given to ``enable()``, or ``None`` while the shim is off."""
    return _active.stage


def set_active(stage: Optional[Stage]) -> None:
    """Record the default stage (``None``: off)."""
    _active.stage = stage


def api_lock() -> threading.RLock:
    """The lock that serialises ``enable()`` and ``disable()``."""
    return _active.lock
