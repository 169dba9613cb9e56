"""``enable()``, ``disable()``, ``status()`` and the ``enabled()`` context manager."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from typing import Optional

from compatshim.config import settings as _settings
from compatshim.config.settings import ALLOW_UNTESTED_VAR, KILL_SWITCH, STAGE_VAR
from compatshim.config.stages import Stage
from compatshim.config.support import AFFECTED, UNAFFECTED, Family, family_of, installed
from compatshim.errors import CompatShimError, CompatShimWarning, ComposerNotInstalledError, UnsupportedComposerWarning
from compatshim.shim.registry import STATE, warn_once
from compatshim.shim.status import ShimStatus, Verdict, parse_version, status

__all__ = [
    'ALLOW_UNTESTED_VAR',
    'KILL_SWITCH',
    'STAGE_VAR',
    'ShimStatus',
    'Verdict',
    'disable',
    'enable',
    'enabled',
    'status',
    'switched',
]


def _warn_once(key: str, message: str, category: type[Warning]) -> None:
    """One warning per process and reason, however many ``enable()`` calls (a script's and ``compatshim run``'s)."""
    warn_once(key, message, category, stacklevel=3)


def enable(stage: Optional[str] = None, *, allow_untested: Optional[bool] = None) -> ShimStatus:
    """Make ``DataSpec(device_transforms=fn)`` run ``fn`` on the device again, on the installed Composer.

    Idempotent and thread-safe. Calling it again while enabled only changes the default stage (from the next
    batch on), and only when ``stage`` is passed. Works before or after ``import composer``. On 0.27–0.28 Composer
    drops the argument of a DataSpec built *before* ``enable()``: build DataSpecs after it (call ``enable()`` at the
    top of the training script, on every rank — or start the job with ``compatshim run``, which does it in every
    process).

    Args:
        stage: ``'batch'``: move the whole batch, run ``fn`` once on it, then split into microbatches — coherent,
            the 0.24.1 behaviour. ``'microbatch'``: move each microbatch, then run ``fn`` on it — one microbatch on
            the device at a time. A DataSpec's own ``data_transfer_stage=`` wins over this. Default: the
            ``COMPATSHIM_STAGE`` environment variable (set by ``compatshim run --stage``), else ``'batch'``.
        allow_untested: ``True``: patch a Composer newer than the support table (or a dev build) if, and only if,
            every patch target has the shape of a known family. Without it such releases get a warning and no patch.
            Default: the ``COMPATSHIM_ALLOW_UNTESTED`` environment variable (``compatshim run --allow-untested``),
            else off.

    Returns:
        The :func:`status` after enabling.

    With the environment variable ``COMPATSHIM_DISABLE=1`` (the operators' kill switch) it patches nothing and warns,
    once per process. An argument given here beats a variable that holds a value that is not allowed (the variable is
    ignored, with a :class:`~compatshim.errors.CompatShimWarning` naming it).

    Raises:
        ConfigurationError: (a ``ValueError``) ``stage`` is not ``'batch'`` or ``'microbatch'``, ``allow_untested`` is
            not a bool, or a variable no argument stands in for holds a value that is not allowed (the message names
            the setting, the value and what is allowed). Nothing was changed.
        ComposerNotInstalledError: No ``mosaicml`` distribution is installed.
        UnexpectedComposerShapeError: A patch target does not look as expected. Nothing was patched.
    """
    settings = _settings.resolve(stage, allow_untested)  # nothing has changed yet if this raises
    with STATE.lock:
        for message in settings.ignored:
            _warn_once(message, message, CompatShimWarning)
        composer = _installed_composer()
        if STATE.active:
            if stage is not None:
                STATE.stage = settings.stage
            return status()
        patch, family = _patch_plan(composer, settings)
        if (
            not patch or STATE.enabling
        ):  # enabling: re-entered from compatshim run's hook, fired by _instrument's import
            return status()
        STATE.enabling = True
        try:
            STATE.family = _instrument(family, composer)
        finally:
            STATE.enabling = False
        STATE.allow_untested = family is None
        STATE.stage = settings.stage
        STATE.enabled_by = STATE.starting or 'compatshim.enable()'
        _warn_if_running()
        return status()


def _installed_composer() -> str:
    composer = installed('mosaicml')
    if composer is None:
        raise ComposerNotInstalledError(
            'compatshim: Composer is not installed (no "mosaicml" distribution in this environment), so there is '
            f'nothing to patch. Install a supported release ({AFFECTED}) or drop the enable() call.',
        )
    return composer


def _patch_plan(composer: str, settings: _settings.Settings) -> tuple[bool, Optional[Family]]:
    """Whether ``enable()`` patches ``composer``, and as which family (``None``: an untested release it is allowed to
    patch, whose family its shape decides); a release it leaves alone is said once per process where that is news."""
    if settings.killed:
        _warn_once(
            'killed',
            f"compatshim: {KILL_SWITCH} is set in the environment; enable() patched nothing (Composer's own "
            'behaviour applies). Unset it to re-enable the shim.',
            CompatShimWarning,
        )
        return False, None
    parsed = parse_version(composer)
    if parsed is not None and parsed in UNAFFECTED:
        return False, None
    family = None if parsed is None or parsed not in AFFECTED else family_of(parsed)
    if family is None and not settings.allow_untested:
        _warn_once(
            'unsupported',
            f'compatshim: Composer {composer} is outside the support table ({AFFECTED}); nothing was patched. '
            'Pass enable(allow_untested=True) (or compatshim run --allow-untested) to patch it if its code still '
            'has a known shape, or use a supported release.',
            UnsupportedComposerWarning,
        )
        return False, None
    return True, family


def _instrument(family: Optional[Family], version: str) -> Family:
    from composer.core.data_spec import DataSpec
    from composer.trainer.trainer import Trainer

    from compatshim.shim import data_spec, loops
    from compatshim.shim.shape import check_shape, detect_family

    if family is None:
        family = detect_family(DataSpec, Trainer, version)
    check_shape(family, DataSpec, Trainer, version)
    try:
        data_spec.instrument(DataSpec, family)
        loops.instrument(Trainer, STATE.patches, data_spec.view_of)
    except BaseException:
        STATE.patches.restore_all()
        raise
    return family


def _warn_if_running() -> None:
    from composer.trainer.trainer import Trainer

    from compatshim.shim import loops

    loops.warn_if_running(Trainer)


def disable() -> ShimStatus:
    """Undo ``enable()``; a no-op when not enabled. Thread-safe.

    Every patched attribute that still holds the shim's wrapper is restored exactly. One that other code (an APM
    agent, a tracer) has wrapped since is left as it is, with the shim's wrapper beneath switched to a pass-through,
    and a :class:`~compatshim.errors.CompatShimWarning` names it; a later ``enable()`` switches it back on.

    Nothing of the shim's is kept in a DataSpec: one built while enabled is then Composer's own (0.25–0.26 run its
    ``device_transforms`` before the move, on the host; 0.27+ never), until ``enable()`` again.
    """
    with STATE.lock:
        STATE.patches.restore_all()
        STATE.stage = None
        STATE.family = None
        STATE.allow_untested = False
        STATE.enabled_by = None
        return status()


def enabled(
    stage: Optional[str] = None, *, allow_untested: Optional[bool] = None
) -> contextlib.AbstractContextManager[ShimStatus]:
    """``with compatshim.enabled(...):`` — enable for the block; on leaving it, the shim is in the state it had before.

    That holds whatever code inside the block did: if it called ``enable(stage=...)``, the stage from before comes
    back; if it called ``disable()`` while the shim had been enabled before the block, the shim is enabled again with
    the stage and ``allow_untested`` it had. Blocks nest. The block's own ``enable()`` takes the same arguments as
    :func:`enable` and raises as it does, before anything changes.
    """
    return switched(True, stage, allow_untested=allow_untested)


@contextlib.contextmanager
def switched(on: bool, stage: Optional[str] = None, *, allow_untested: Optional[bool] = None) -> Iterator[ShimStatus]:
    """The one "for a block, then as before": the shim enabled (``on``, as :func:`enable` takes ``stage`` and
    ``allow_untested``) or disabled for the block (:func:`enabled`; the bench's legs)."""
    with STATE.lock:
        before = (STATE.stage, STATE.allow_untested)
        shim_status = enable(stage, allow_untested=allow_untested) if on else disable()
    try:
        yield shim_status
    finally:
        with STATE.lock:
            _return_to(*before)


def _return_to(stage: Optional[Stage], allow_untested: bool) -> None:
    """Put the shim back in a state :func:`enabled` saw: off, or on at ``stage``."""
    if stage is None:
        disable()
    elif STATE.active:
        STATE.stage = stage
    else:  # code inside the block disabled the shim that had been on before it
        try:
            enable(stage, allow_untested=allow_untested)
        except CompatShimError as exc:  # the environment changed inside the block (e.g. a bad kill switch)
            warnings.warn(
                f'compatshim.enabled(): could not enable the shim again on leaving the block: {exc}',
                CompatShimWarning,
                stacklevel=4,
            )
