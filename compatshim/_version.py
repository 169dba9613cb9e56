"""compatshim's version: the single source (the package's metadata, ``compatshim.__version__``, CHANGELOG.md's newest
release and the release tag are held to it). Imports nothing."""

__version__ = '0.1.0'
