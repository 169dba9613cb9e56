"""The shim's settings, from the arguments given in code and the environment, validated in one place: every entry
point reads them here, so a bad value gets the same one-line message everywhere (exit
:data:`compatshim._exits.NOT_DONE` on the command line). Which source wins: docs/configuration.md; a valid argument
beats an invalid variable (ignored, with a warning). ``COMPATSHIM_MONITOR`` is read by ``compatshim run``'s import hook
and ``import compatshim.auto``, never by ``enable()``. Imports nothing heavy.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Optional

from compatshim._stages import Stage, validate_stage
from compatshim.errors import ConfigurationError

__all__ = [
    'ALLOW_UNTESTED_VAR',
    'KILL_SWITCH',
    'MONITOR_VAR',
    'STAGE_VAR',
    'Settings',
    'kill_switch_on',
    'monitor',
    'resolve',
]

#: The operators' kill switch: 1/true/yes/on and ``enable()`` patches nothing (0/false/no/off or unset: off).
KILL_SWITCH = 'COMPATSHIM_DISABLE'
#: The default ``stage`` of ``enable()`` calls that do not pass one (``compatshim run --stage`` sets it).
STAGE_VAR = 'COMPATSHIM_STAGE'
#: The default ``allow_untested`` of ``enable()`` calls that do not pass one (``compatshim run --allow-untested``).
ALLOW_UNTESTED_VAR = 'COMPATSHIM_ALLOW_UNTESTED'
#: Attach a ``TransformMonitor`` to every Trainer of the run (``compatshim run --monitor``): on, strict, or off.
MONITOR_VAR = 'COMPATSHIM_MONITOR'

_TRUE, _FALSE = ('1', 'true', 'yes', 'on'), ('', '0', 'false', 'no', 'off')


@dataclasses.dataclass(frozen=True)
class Settings:
    """What ``enable()`` will do: the stage, whether an untested release may be patched, the kill switch, and the
    environment variables that were ignored because an argument stood in for them (one message each)."""

    stage: Stage
    allow_untested: bool
    killed: bool
    ignored: tuple[str, ...] = ()


def kill_switch_on(environ: Optional[Mapping[str, str]] = None) -> bool:
    """Whether :data:`KILL_SWITCH` is on (a value that is not allowed counts as off: for messages; never raises)."""
    try:
        return _flag(KILL_SWITCH, (os.environ if environ is None else environ).get(KILL_SWITCH, ''))
    except ConfigurationError:
        return False


def monitor(environ: Optional[Mapping[str, str]] = None) -> str:
    """:data:`MONITOR_VAR`: ``'off'`` (unset, or 0/false/no/off), ``'on'`` (1/true/yes/on) or ``'strict'``.

    Raises:
        ConfigurationError: Any other value.
    """
    value = (os.environ if environ is None else environ).get(MONITOR_VAR, '')
    if value.strip().lower() == 'strict':
        return 'strict'
    try:
        return 'on' if _flag(MONITOR_VAR, value) else 'off'
    except ConfigurationError:
        raise ConfigurationError(
            f'compatshim: {MONITOR_VAR}={value!r} is not allowed; use 1, true, yes, on or strict, or 0, false, no, off '
            '(or unset it)'
        ) from None


def _flag(variable: str, value: str) -> bool:
    word = value.strip().lower()
    if word in _TRUE or word in _FALSE:
        return word in _TRUE
    raise ConfigurationError(
        f'compatshim: {variable}={value!r} is not allowed; use 1, true, yes or on, or 0, false, no, off (or unset it)'
    )


def resolve(
    stage: Optional[str] = None, allow_untested: Optional[bool] = None, environ: Optional[Mapping[str, str]] = None
) -> Settings:
    """The settings from the arguments (``None``: not given) and ``environ`` (default: this process's environment).

    Raises:
        ConfigurationError: An argument, or a variable no argument stands in for, holds a value that is not allowed.
    """
    environ = os.environ if environ is None else environ
    if allow_untested is not None and not isinstance(allow_untested, bool):
        raise ConfigurationError(
            f'compatshim: allow_untested={allow_untested!r} is not allowed; pass True or False (or leave it out)'
        )
    ignored = []
    given_stage = None if stage is None else validate_stage(stage)
    try:
        env_stage: Optional[Stage] = validate_stage(
            environ.get(STAGE_VAR, '').strip() or 'batch', what=f'stage in {STAGE_VAR}'
        )
    except ConfigurationError as exc:
        if given_stage is None:
            raise
        env_stage = None
        ignored.append(f'{exc}; ignored: the stage given in code ({given_stage!r}) wins')
    try:
        env_untested: Optional[bool] = _flag(ALLOW_UNTESTED_VAR, environ.get(ALLOW_UNTESTED_VAR, ''))
    except ConfigurationError as exc:
        if allow_untested is None:
            raise
        env_untested = None
        ignored.append(f'{exc}; ignored: allow_untested given in code ({allow_untested!r}) wins')
    return Settings(
        stage=given_stage or env_stage or 'batch',
        allow_untested=bool(env_untested) if allow_untested is None else allow_untested,
        killed=_flag(KILL_SWITCH, environ.get(KILL_SWITCH, '')),
        ignored=tuple(ignored),
    )
