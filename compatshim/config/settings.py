"""The shim's settings, from the arguments given in code and the environment, validated in one place, so that a bad
value gets the same one-line message from every entry point. Which source wins: docs/configuration.md (a valid argument
beats an invalid variable, which is ignored with a warning). Imports nothing heavy.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Callable, Optional

from compatshim.config.stages import Stage, validate_stage
from compatshim.errors import ConfigurationError

__all__ = [
    'ALLOW_UNTESTED_VAR', 'BENCH_SIZES', 'BENCH_SIZE_VAR', 'KILL_SWITCH', 'MONITOR_VAR', 'STAGE_VAR', 'VARIABLES',
    'Settings', 'bench_size', 'check_environment', 'kill_switch_on', 'monitor', 'one_message', 'resolve',
]  # fmt: skip

#: The operators' kill switch: on, and ``enable()`` patches nothing.
KILL_SWITCH = 'COMPATSHIM_DISABLE'
#: The default ``stage`` of ``enable()`` (``compatshim run --stage`` sets it).
STAGE_VAR = 'COMPATSHIM_STAGE'
#: The default ``allow_untested`` of ``enable()`` (``compatshim run --allow-untested`` sets it).
ALLOW_UNTESTED_VAR = 'COMPATSHIM_ALLOW_UNTESTED'
#: A ``TransformMonitor`` on every Trainer (on, strict or off), read by ``compatshim run``'s hook and
#: ``compatshim.auto``, never by ``enable()``.
MONITOR_VAR = 'COMPATSHIM_MONITOR'
#: ``compatshim bench --size`` when it is not given (unset: by the device).
BENCH_SIZE_VAR = 'COMPATSHIM_BENCH_SIZE'
BENCH_SIZES: tuple[str, ...] = ('tiny', 'cpu', 'gpu')

_TRUE, _FALSE = ('1', 'true', 'yes', 'on'), ('', '0', 'false', 'no', 'off')


@dataclasses.dataclass(frozen=True)
class Settings:
    """What ``enable()`` will do, and the variables ignored because an argument stood in for them (one message each)."""

    stage: Stage
    allow_untested: bool
    killed: bool
    ignored: tuple[str, ...] = ()


def _flag(variable: str, environ: Mapping[str, str]) -> bool:
    value = environ.get(variable, '')
    if value.strip().lower() in _TRUE + _FALSE:
        return value.strip().lower() in _TRUE
    raise ConfigurationError(
        f'compatshim: {variable}={value!r} is not allowed; use 1, true, yes or on, or 0, false, no, off (or unset it)'
    )


def kill_switch_on() -> bool:
    """Whether :data:`KILL_SWITCH` is on (a value that is not allowed counts as off; never raises)."""
    try:
        return _flag(KILL_SWITCH, os.environ)
    except ConfigurationError:
        return False


def monitor(environ: Optional[Mapping[str, str]] = None) -> str:
    """:data:`MONITOR_VAR`: ``'off'``, ``'on'`` or ``'strict'``; raises ``ConfigurationError`` on any other value."""
    environ = os.environ if environ is None else environ
    if environ.get(MONITOR_VAR, '').strip().lower() == 'strict':
        return 'strict'
    try:
        return 'on' if _flag(MONITOR_VAR, environ) else 'off'
    except ConfigurationError:
        raise ConfigurationError(
            f'compatshim: {MONITOR_VAR}={environ[MONITOR_VAR]!r} is not allowed; use 1, true, yes, on or strict, or 0, '
            'false, no, off (or unset it)'
        ) from None


def bench_size(environ: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """:data:`BENCH_SIZE_VAR`: one of :data:`BENCH_SIZES`, or ``None`` where unset; raises ``ConfigurationError`` on
    any other value."""
    value = (os.environ if environ is None else environ).get(BENCH_SIZE_VAR, '')
    if value.strip() in BENCH_SIZES or not value.strip():
        return value.strip() or None
    raise ConfigurationError(
        f'compatshim: {BENCH_SIZE_VAR}={value!r} is not allowed; use {", ".join(BENCH_SIZES[:-1])} or '
        f'{BENCH_SIZES[-1]} (or unset it)'
    )


def _stage(environ: Mapping[str, str]) -> Stage:
    return validate_stage(environ.get(STAGE_VAR, '').strip() or 'batch', what=f'stage in {STAGE_VAR}')


#: Every variable compatshim reads, with its check (``ConfigurationError`` naming the variable, the value and what is
#: allowed), in the order a message lists them.
VARIABLES: dict[str, Callable[[Mapping[str, str]], object]] = {
    STAGE_VAR: _stage,
    ALLOW_UNTESTED_VAR: lambda environ: _flag(ALLOW_UNTESTED_VAR, environ),
    KILL_SWITCH: lambda environ: _flag(KILL_SWITCH, environ),
    MONITOR_VAR: monitor,
    BENCH_SIZE_VAR: bench_size,
}


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
    given_stage = None if stage is None else validate_stage(stage)
    env_stage: Optional[Stage] = None
    env_untested, ignored = False, []
    try:
        env_stage = _stage(environ)
    except ConfigurationError as exc:
        if given_stage is None:
            raise
        ignored.append(f'{exc}; ignored: the stage given in code ({given_stage!r}) wins')
    try:
        env_untested = _flag(ALLOW_UNTESTED_VAR, environ)
    except ConfigurationError as exc:
        if allow_untested is None:
            raise
        ignored.append(f'{exc}; ignored: allow_untested given in code ({allow_untested!r}) wins')
    return Settings(
        stage=given_stage or env_stage or 'batch',
        allow_untested=env_untested if allow_untested is None else allow_untested,
        killed=_flag(KILL_SWITCH, environ),
        ignored=tuple(ignored),
    )


def check_environment(
    environ: Optional[Mapping[str, str]] = None, given: Optional[Mapping[str, str]] = None
) -> tuple[list[str], list[str]]:
    """Every variable of :data:`VARIABLES`, as a command checks them before it does anything: the problems (one
    message each), and the variables ignored because an argument stands in for them (``given``: variable -> the
    argument as written, e.g. ``{STAGE_VAR: '--stage batch'}``), one line each."""
    environ = os.environ if environ is None else environ
    problems, ignored = [], []
    for variable, check in VARIABLES.items():
        try:
            check(environ)
        except ConfigurationError as exc:
            if given and variable in given:
                ignored.append(f'{exc}; ignored: {given[variable]} wins')
            else:
                problems.append(str(exc))
    return problems, ignored


def one_message(problems: list[str]) -> str:
    """Several problems of :func:`check_environment` as one line."""
    return '; '.join(problems[:1] + [problem.removeprefix('compatshim: ') for problem in problems[1:]])
