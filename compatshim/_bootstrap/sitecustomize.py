"""Put first on ``PYTHONPATH`` by ``compatshim run``: arm the shim in this process, then run any other sitecustomize.

Cheap: it imports nothing the interpreter has not loaded at start-up, and puts a finder on ``sys.meta_path`` that
calls ``compatshim._start.start`` once Composer has been imported; other processes never import compatshim.
"""

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
_PACKAGE = os.path.dirname(_HERE)  # the compatshim package this bootstrap belongs to


def _enable():
    """``compatshim._start.start()`` of the compatshim package this bootstrap belongs to, also where it is not
    importable (``python -m compatshim run`` from a checkout), never another copy first on ``sys.path``."""
    init = os.path.join(_PACKAGE, '__init__.py')
    if 'compatshim' not in sys.modules and os.path.exists(init):
        from importlib.util import module_from_spec, spec_from_file_location

        spec = spec_from_file_location('compatshim', init, submodule_search_locations=[_PACKAGE])
        module = module_from_spec(spec)  # type: ignore[arg-type]  # a file that exists always has a spec
        sys.modules['compatshim'] = module
        try:
            spec.loader.exec_module(module)  # type: ignore[union-attr]  # and a source loader
        except BaseException:
            del sys.modules['compatshim']
            raise
    from compatshim._start import start

    start()


class _ChainedLoader:
    """Runs the real loader, puts it back on the module, then enables the shim."""

    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        module.__loader__ = self.loader
        if getattr(module, '__spec__', None) is not None:
            module.__spec__.loader = self.loader
        try:
            self.loader.exec_module(module)
        except BaseException:
            sys.meta_path.insert(0, ComposerImportHook())  # Composer failed to import: wait for the next attempt
            raise
        _enable()


class ComposerImportHook:
    """A one-shot ``sys.meta_path`` finder: the first ``import composer`` gets a loader that enables the shim after."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != 'composer':
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        for finder in list(sys.meta_path):
            find_spec = getattr(finder, 'find_spec', None)
            spec = None if find_spec is None else find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, 'exec_module'):
                    spec.loader = _ChainedLoader(spec.loader)
                return spec
        return None


def _arm() -> None:
    if 'composer' in sys.modules:
        _enable()
    elif not any(isinstance(f, ComposerImportHook) for f in sys.meta_path):
        sys.meta_path.insert(0, ComposerImportHook())


def _chain() -> None:
    """Run the ``sitecustomize`` that would have run without this one, as ``sitecustomize``."""
    from importlib.machinery import PathFinder

    path = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
    spec = PathFinder.find_spec('sitecustomize', path)
    if spec is None or spec.loader is None:
        return
    from importlib.util import module_from_spec

    module = module_from_spec(spec)
    sys.modules['sitecustomize'] = module
    spec.loader.exec_module(module)


_arm()
_chain()
