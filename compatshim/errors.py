"""The shim's exceptions and warnings, each naming what was wrong and what is allowed."""

from __future__ import annotations

__all__ = [
    'CompatShimError', 'ConfigurationError', 'CompatShimWarning', 'ComposerNotInstalledError',
    'TransformPlacementError', 'UnexpectedComposerShapeError', 'UnsupportedComposerWarning',
]  # fmt: skip


class CompatShimError(Exception):
    """Base class of the shim's errors."""


class ConfigurationError(CompatShimError, ValueError):
    """A setting — an argument, or an environment variable no argument stands in for — holds a value that is not
    allowed. The message names the setting, the value and what is allowed; nothing was changed."""


class ComposerNotInstalledError(CompatShimError, ImportError):
    """``enable()`` found no ``mosaicml`` distribution in this environment."""


class UnexpectedComposerShapeError(CompatShimError):
    """A patch target does not have the shape the shim was written against; nothing was patched."""


class TransformPlacementError(CompatShimError, RuntimeError):
    """Raised by ``TransformMonitor(strict=True)`` at the first step whose ``device_transforms`` ran on the host or was
    never called, on an accelerator: the message names the DataSpec, the dataloader, the release and the fix."""


class CompatShimWarning(UserWarning):
    """Base class of the shim's warnings."""


class UnsupportedComposerWarning(CompatShimWarning):
    """The installed Composer is newer than (or a dev build beyond) the support table: nothing was patched."""
