"""What compatshim is configured by: the support table (:mod:`~compatshim.config.support`), the settings from code and
the environment (:mod:`~compatshim.config.settings`) and the two transfer stages (:mod:`~compatshim.config.stages`).
Imports nothing of compatshim but its errors, and nothing heavy."""
