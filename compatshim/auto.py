"""``import compatshim.auto``: the shim enabled by an import, with ``compatshim run``'s policy (docs/enable.md).

For a notebook's first cell, ``PYTHONSTARTUP``, ``python -c``, or a framework that imports the modules listed in its
configuration. On import it does what ``compatshim run``'s import hook does once Composer is imported
(:func:`compatshim._start.start`: ``enable()`` with the settings from the environment, and with ``COMPATSHIM_MONITOR``
on a ``TransformMonitor`` on every Trainer); with no Composer installed, nothing. A setting that is not allowed raises
``ConfigurationError`` at the import. The import imports Composer (and torch) when it is there.
"""

from compatshim._start import start
from compatshim.config.support import installed

if installed('mosaicml') is not None:
    start(by='compatshim.auto')
