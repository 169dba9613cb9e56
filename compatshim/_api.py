"""``enable()``, ``disable()``, ``status()`` and the ``enabled()`` context manager."""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import importlib.metadata
import os
import warnings
from collections.abc import Iterator, Mapping
from typing import Optional

from packaging.version import InvalidVersion, Version

from compatshim import _stages, _state
from compatshim._state import STATE
from compatshim._support import AFFECTED, UNAFFECTED, Family, family_of
from compatshim.errors import CompatShimWarning, ComposerNotInstalledError, UnsupportedComposerWarning

__all__ = [
    'ALLOW_UNTESTED_VAR',
    'KILL_SWITCH',
    'STAGE_VAR',
    'ShimStatus',
    'Verdict',
    'disable',
    'enable',
    'enabled',
    'killed',
    'status',
]


class Verdict(str, enum.Enum):
    """What the shim makes of the installed Composer."""

    NOT_INSTALLED = 'not installed'
    #: ≤ 0.24.x: runs ``device_transforms`` on the device itself; nothing to patch.
    UNAFFECTED = 'unaffected'
    #: In the support table, but ``enable()`` has not run (or ``disable()`` ran since).
    AFFECTED = 'affected'
    PATCHED = 'patched'
    #: Newer than the support table, or a dev build: not patched unless opted in.
    UNSUPPORTED = 'unsupported'


@dataclasses.dataclass(frozen=True)
class ShimStatus:
    """A snapshot of the shim's state.

    Attributes:
        composer_version: The installed ``mosaicml`` version, or ``None``.
        torch_version: The installed ``torch`` version, or ``None``.
        verdict: See :class:`Verdict`.
        family: How this release treats ``device_transforms`` (``'host'``, ``'dropped'``, ``'rejected'``), or
            ``None`` when unaffected, not installed, or unsupported and not opted in.
        stage: The default stage while patched, else ``None``.
        patches: Dotted names of the attributes currently patched.
        detail: One sentence for people.
        allow_untested: Whether the patches were made for a release outside the support table (opted in).
    """

    composer_version: Optional[str]
    torch_version: Optional[str]
    verdict: Verdict
    family: Optional[str]
    stage: Optional[str]
    patches: tuple[str, ...]
    detail: str
    allow_untested: bool = False


def _installed(distribution: str) -> Optional[str]:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def _parse(version: str) -> Optional[Version]:
    try:
        return Version(version)
    except InvalidVersion:
        return None


#: The operators' kill switch: set it to 1/true/yes/on and ``enable()`` patches nothing (0/false/no/off or unset: off).
KILL_SWITCH = 'COMPATSHIM_DISABLE'
#: The default ``stage`` of ``enable()`` calls that do not pass one (``compatshim run --stage`` sets it).
STAGE_VAR = 'COMPATSHIM_STAGE'
#: The default ``allow_untested`` of ``enable()`` calls that do not pass one (``compatshim run --allow-untested``).
ALLOW_UNTESTED_VAR = 'COMPATSHIM_ALLOW_UNTESTED'
_TRUE, _FALSE = ('1', 'true', 'yes', 'on'), ('', '0', 'false', 'no', 'off')


def _switch() -> str:
    return os.environ.get(KILL_SWITCH, '').strip().lower()


def _flag(variable: str, meaning: str, environ: Mapping[str, str]) -> bool:
    value = environ.get(variable, '').strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ValueError(
        f'compatshim: {variable}={environ[variable]!r} is not understood; use 1, true, yes or on to {meaning}, or '
        '0, false, no, off (or unset it) for the default.',
    )


def killed(environ: Optional[Mapping[str, str]] = None) -> bool:
    """Whether the :data:`KILL_SWITCH` environment variable turns the shim off.

    Args:
        environ: The environment to read (default: this process's).

    Raises:
        ValueError: The variable holds something other than the accepted values (named in the message).
    """
    return _flag(
        KILL_SWITCH, 'turn the shim off (enable() then patches nothing)', os.environ if environ is None else environ
    )


def settings_from_environment(environ: Optional[Mapping[str, str]] = None) -> tuple[_stages.Stage, bool]:
    """The default stage and ``allow_untested`` from :data:`STAGE_VAR` and :data:`ALLOW_UNTESTED_VAR`.

    Args:
        environ: The environment to read (default: this process's).

    Raises:
        ValueError: A variable holds something other than the accepted values (named in the message).
    """
    environ = os.environ if environ is None else environ
    stage = environ.get(STAGE_VAR, '').strip() or 'batch'
    return (
        _stages.validate_stage(stage, what=f'stage in {STAGE_VAR}'),
        _flag(ALLOW_UNTESTED_VAR, 'patch releases outside the support table whose code has a known shape', environ),
    )


def _warn_once(key: str, message: str, category: type[Warning]) -> None:
    """One warning per process and reason, however many ``enable()`` calls (a script's and ``compatshim run``'s)."""
    if key not in STATE.warned:
        STATE.warned.add(key)
        warnings.warn(message, category, stacklevel=3)


def status() -> ShimStatus:
    """Report the installed versions, the verdict, the stage and the patches applied. Imports nothing heavy."""
    composer, torch = _installed('mosaicml'), _installed('torch')
    patches = _state.patched_targets()
    stage = STATE.stage
    parsed = None if composer is None else _parse(composer)
    table_family = None if parsed is None or parsed not in AFFECTED else family_of(parsed)
    if composer is None:
        verdict, family, detail = Verdict.NOT_INSTALLED, None, 'Composer (mosaicml) is not installed.'
    elif STATE.active:
        verdict, family = Verdict.PATCHED, STATE.family
        detail = f'Composer {composer} is patched: device_transforms runs on the device, stage {stage!r} by default.'
    elif parsed is not None and parsed in UNAFFECTED:
        verdict, family = Verdict.UNAFFECTED, None
        detail = f'Composer {composer} runs device_transforms on the device itself; nothing to patch.'
    elif table_family is not None:
        verdict, family = Verdict.AFFECTED, table_family
        detail = f'Composer {composer} is affected ({table_family.value} family); call compatshim.enable().'
        if _switch() in _TRUE:
            detail = (
                f'Composer {composer} is affected ({table_family.value} family); {KILL_SWITCH} is set, so '
                'enable() patches nothing.'
            )
    else:
        verdict, family = Verdict.UNSUPPORTED, None
        detail = (
            f'Composer {composer} is outside the support table ({AFFECTED}); nothing is patched unless '
            'enable(allow_untested=True) finds the shape the shim knows.'
        )
    return ShimStatus(
        composer, torch, verdict, None if family is None else family.value, stage, patches, detail, STATE.allow_untested
    )


def enable(stage: Optional[str] = None, *, allow_untested: Optional[bool] = None) -> ShimStatus:
    """Make ``DataSpec(device_transforms=fn)`` run ``fn`` on the device again, on the installed Composer.

    Idempotent and thread-safe. Calling it again while enabled only changes the default stage (from the next
    batch on), and only when ``stage`` is passed. Works before or after ``import composer``. DataSpecs built *before*
    ``enable()`` keep Composer's own behaviour: build them after it (call ``enable()`` at the top of the training
    script, on every rank — or start the job with ``compatshim run``, which does it in every process).

    Args:
        stage: ``'batch'``: move the whole batch, run ``fn`` once on it, then split into microbatches — coherent,
            the 0.24.1 behaviour. ``'microbatch'``: move each microbatch, then run ``fn`` on it — one microbatch on
            the device at a time. A DataSpec's own ``data_transfer_stage=`` wins over this. Default: the
            ``COMPATSHIM_STAGE`` environment variable (set by ``compatshim run --stage``), else ``'batch'``.
        allow_untested: Patch a Composer newer than the support table (or a dev build) if, and only if, every patch
            target has the shape of a known family. Without it such releases get a warning and no patch. Default:
            the ``COMPATSHIM_ALLOW_UNTESTED`` environment variable (``compatshim run --allow-untested``), else off.

    Returns:
        The :func:`status` after enabling.

    With the environment variable ``COMPATSHIM_DISABLE=1`` (the operators' kill switch) it patches nothing and warns.

    Raises:
        ValueError: ``stage`` is not one of ``'batch'``, ``'microbatch'``, or one of the environment variables
            above holds a value it does not understand (the message names it and the accepted values).
        ComposerNotInstalledError: No ``mosaicml`` distribution is installed.
        UnexpectedComposerShapeError: A patch target does not look as expected. Nothing was patched.
    """
    env_stage, env_untested = settings_from_environment()
    valid_stage = env_stage if stage is None else _stages.validate_stage(stage)
    untested = env_untested if allow_untested is None else bool(allow_untested)
    with STATE.lock:
        composer = _installed('mosaicml')
        if composer is None:
            raise ComposerNotInstalledError(
                'compatshim: Composer is not installed (no "mosaicml" distribution in this environment), so there is '
                f'nothing to patch. Install a supported release ({AFFECTED}) or drop the enable() call.',
            )
        if STATE.active:
            if stage is not None:
                STATE.stage = valid_stage
            return status()
        if killed():
            _warn_once(
                'killed',
                f"compatshim: {KILL_SWITCH} is set in the environment; enable() patched nothing (Composer's own "
                'behaviour applies). Unset it to re-enable the shim.',
                CompatShimWarning,
            )
            return status()
        parsed = _parse(composer)
        if parsed is not None and parsed in UNAFFECTED:
            return status()
        family = None if parsed is None or parsed not in AFFECTED else family_of(parsed)
        if family is None and not untested:
            _warn_once(
                'unsupported',
                f'compatshim: Composer {composer} is outside the support table ({AFFECTED}); nothing was patched. '
                'Pass enable(allow_untested=True) (or compatshim run --allow-untested) to patch it if its code still '
                'has a known shape, or use a supported release.',
                UnsupportedComposerWarning,
            )
            return status()
        if STATE.enabling:  # re-entered from compatshim run's import hook, fired by _instrument's own import
            return status()
        STATE.enabling = True
        try:
            STATE.family = _instrument(family, composer)
        finally:
            STATE.enabling = False
        STATE.allow_untested = family is None
        STATE.stage = valid_stage
        return status()


def _instrument(family: Optional[Family], version: str) -> Family:
    from composer.core.data_spec import DataSpec
    from composer.trainer.trainer import Trainer

    from compatshim._shape import check_shape, detect_family
    from compatshim.patches import data_spec, trainer

    if family is None:
        family = detect_family(DataSpec, Trainer, version)
    check_shape(family, DataSpec, Trainer, version)
    try:
        data_spec.instrument(DataSpec, family)
        trainer.instrument(Trainer)
    except BaseException:
        _state.restore_all()
        raise
    return family


def disable() -> ShimStatus:
    """Undo ``enable()``; a no-op when not enabled. Thread-safe.

    Every patched attribute that still holds the shim's wrapper is restored exactly. One that other code (an APM
    agent, a tracer) has wrapped since is left as it is, with the shim's wrapper beneath switched to a pass-through,
    and a :class:`~compatshim.errors.CompatShimWarning` names it; a later ``enable()`` switches it back on.

    DataSpecs built while enabled then run ``device_transforms`` at batch level before the move (on the host),
    with a :class:`~compatshim.errors.CompatShimWarning`, as Composer 0.25 did.
    """
    with STATE.lock:
        _state.restore_all()
        STATE.stage = None
        STATE.family = None
        STATE.allow_untested = False
        STATE.warned.clear()
        return status()


@contextlib.contextmanager
def enabled(stage: Optional[str] = None, *, allow_untested: Optional[bool] = None) -> Iterator[ShimStatus]:
    """``with compatshim.enabled(...):`` — enable for the block, then return to the state before it."""
    with STATE.lock:
        previous = STATE.stage
        shim_status = enable(stage, allow_untested=allow_untested)
    try:
        yield shim_status
    finally:
        with STATE.lock:
            if previous is None:
                disable()
            else:
                STATE.stage = previous
