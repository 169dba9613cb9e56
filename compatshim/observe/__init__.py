"""The observer's internals, beneath the monitor (:mod:`compatshim.monitor`), the probes of the bench and the pytest
plugin: where a transform saw its batch (:mod:`~compatshim.observe.placement`), the one recorder of calls, times and
bytes (:mod:`~compatshim.observe.recorder`), the monitor's steps and placement policy
(:mod:`~compatshim.observe.steps`), and its observe-only watch of ``DataSpec.__init__``
(:mod:`~compatshim.observe.watch`). It reads the shim's notes and never changes what the shim does."""
