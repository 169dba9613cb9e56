"""``import compatshim.auto``: the shim enabled by an import, with ``compatshim run``'s policy.

For a notebook's first cell, ``PYTHONSTARTUP``, ``python -c``, or a framework that imports the modules listed in its
configuration. On import it does what ``compatshim run``'s import hook does when Composer is imported:

- an affected Composer is patched (stage and ``allow_untested`` from ``COMPATSHIM_STAGE`` and
  ``COMPATSHIM_ALLOW_UNTESTED``, as ``enable()`` reads them; ``COMPATSHIM_DISABLE`` still wins);
- an unaffected one (0.24.x and older) is left alone;
- a release outside the support table gets an ``UnsupportedComposerWarning`` and no patch (unless allowed);
- with no Composer installed, nothing happens (under ``compatshim run`` the hook never fires either);
- with ``COMPATSHIM_MONITOR`` on (or ``strict``), every Trainer built afterwards gets a ``TransformMonitor``.

A setting that is not allowed raises ``ConfigurationError`` at the import; Composer code the shim cannot patch
raises ``UnexpectedComposerShapeError``, nothing patched. The import imports Composer (and torch) when it is there.
"""

from compatshim._api import start
from compatshim._support import installed

if installed('mosaicml') is not None:
    start(by='compatshim.auto')
