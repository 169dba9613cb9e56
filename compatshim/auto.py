"""``import compatshim.auto``: the shim enabled by an import, as ``compatshim run``'s hook enables it
(:func:`compatshim._start.start`), for a notebook's first cell or ``python -c`` (docs/enable.md). Without Composer:
nothing. A setting that is not allowed raises ``ConfigurationError`` at the import.
"""

from compatshim._start import start
from compatshim.config.support import installed

if installed('mosaicml') is not None:
    start(by='compatshim.auto')
