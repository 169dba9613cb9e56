"""``status()``: what the shim makes of the installed Composer, read from the process's state. Imports nothing heavy,
and nothing of the shim's that acts (``_api`` and the monitor both read it)."""

from __future__ import annotations

import dataclasses
import enum
from typing import Optional

from packaging.version import InvalidVersion, Version

from compatshim.config import settings
from compatshim.config.settings import KILL_SWITCH
from compatshim.config.support import AFFECTED, UNAFFECTED, family_of, installed
from compatshim.shim import registry
from compatshim.shim.registry import STATE

__all__ = ['ShimStatus', 'Verdict', 'parse_version', 'status']


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
        enabled_by: What enabled the patches in force: ``'compatshim.enable()'``, ``'compatshim run'`` (its import
            hook, in every process of the run) or ``'compatshim.auto'``; ``None`` while nothing is patched.
    """

    composer_version: Optional[str]
    torch_version: Optional[str]
    verdict: Verdict
    family: Optional[str]
    stage: Optional[str]
    patches: tuple[str, ...]
    detail: str
    allow_untested: bool = False
    enabled_by: Optional[str] = None


def parse_version(version: str) -> Optional[Version]:
    try:
        return Version(version)
    except InvalidVersion:
        return None


def status() -> ShimStatus:
    """Report the installed versions, the verdict, the stage and the patches applied. Imports nothing heavy."""
    composer, torch = installed('mosaicml'), installed('torch')
    patches = registry.patched_targets()
    stage = STATE.stage
    parsed = None if composer is None else parse_version(composer)
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
        if settings.kill_switch_on():
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
        composer,
        torch,
        verdict,
        None if family is None else family.value,
        stage,
        patches,
        detail,
        STATE.allow_untested,
        STATE.enabled_by if STATE.active else None,
    )
