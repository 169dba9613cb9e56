"""The two transfer stages and their validation (the process-wide default lives in :mod:`compatshim.shim.registry`)."""

from __future__ import annotations

from typing import Literal

from compatshim.errors import ConfigurationError

__all__ = ['STAGES', 'Stage', 'validate_stage']

Stage = Literal['batch', 'microbatch']

#: ``batch``: move the whole batch once, transform it once, then split (coherent; the 0.24.1 behaviour).
#: ``microbatch``: move each microbatch, then transform it (one microbatch on the device at a time).
STAGES: tuple[str, ...] = ('batch', 'microbatch')


def validate_stage(stage: object, *, what: str = 'stage') -> Stage:
    """``stage`` if it names a stage, else a :class:`ConfigurationError` naming it ``what`` and listing the choices."""
    if not isinstance(stage, str) or stage not in STAGES:
        choices = ', '.join(repr(s) for s in STAGES)
        raise ConfigurationError(f'compatshim: unknown {what} {stage!r}; choose one of {choices}')
    return stage  # type: ignore[return-value]
