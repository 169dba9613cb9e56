"""The shim's exceptions and warnings, each naming what was wrong and what is allowed."""

from __future__ import annotations

__all__ = [
    'CompatShimError',
    'CompatShimWarning',
    'ComposerNotInstalledError',
    'UnexpectedComposerShapeError',
    'UnsupportedComposerWarning',
]


class CompatShimError(Exception):
    """Base class of the shim's errors."""


class ComposerNotInstalledError(CompatShimError, ImportError):
    """``enable()`` found no ``mosaicml`` distribution in this environment."""


class UnexpectedComposerShapeError(CompatShimError):
    """A patch target does not have the shape the shim was written against; nothing was patched."""


class CompatShimWarning(UserWarning):
    """Base class of the shim's warnings."""


class UnsupportedComposerWarning(CompatShimWarning):
    """The installed Composer is newer than (or a dev build beyond) the support table: nothing was patched."""
