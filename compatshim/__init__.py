"""compatshim: run Composer's ``DataSpec(device_transforms=fn)`` on the device again (0.25.0–0.32.1).

Usage, at the top of the training script (on every rank)::

    import compatshim
    compatshim.enable()               # stage='batch': whole batch moved, fn once, then split
    compatshim.enable(stage='microbatch')  # or: each microbatch moved, then fn

Or, without editing any script: ``compatshim run -- composer -n 8 train.py`` (every process of the run that
imports Composer enables the shim itself).

Importing this package patches nothing and imports neither torch nor Composer.
"""

from compatshim._version import __version__
from compatshim.config.settings import KILL_SWITCH
from compatshim.config.stages import STAGES
from compatshim.errors import (
    CompatShimError,
    CompatShimWarning,
    ComposerNotInstalledError,
    ConfigurationError,
    TransformPlacementError,
    UnexpectedComposerShapeError,
    UnsupportedComposerWarning,
)
from compatshim.shim.api import ShimStatus, Verdict, disable, enable, enabled, status
from compatshim.shim.registry import get_original, is_patched

__all__ = [
    'KILL_SWITCH', 'STAGES', 'CompatShimError', 'CompatShimWarning', 'ComposerNotInstalledError',
    'ConfigurationError', 'ShimStatus', 'TransformPlacementError', 'UnexpectedComposerShapeError',
    'UnsupportedComposerWarning', 'Verdict', '__version__', 'disable', 'enable', 'enabled', 'get_original',
    'is_patched', 'status',
]  # fmt: skip
