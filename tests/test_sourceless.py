"""A sourceless Composer (byte-compiled, ``.py`` files removed, as in slim images) enables like a source install.

The copy is made at test time in a temporary directory (``compileall -b``, then every ``.py`` deleted) and put first
on ``PYTHONPATH`` of a fresh interpreter; the env's own Composer is never touched. The shape checks read code objects,
so they also still refuse genuinely changed code with a precise message, with or without source.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from conftest import COMPOSER, FAMILY, LEGS

import compatshim
from compatshim._shape import check_shape
from compatshim._support import Family

TESTS = Path(__file__).resolve().parent

JOB = """
import inspect, json, sys
sys.path.append({tests!r})
import composer
from composer.trainer.trainer import Trainer
try:
    inspect.getsource(Trainer._train_loop)
    has_source = True
except (OSError, TypeError):
    has_source = False
import compatshim
if {leg!r} == 'shim':
    compatshim.enable()
from composer.core import DataSpec
from conftest_device import make_device
from workload import Probe, loader, trainer
probe = Probe()
t, _ = trainer(make_device(), train_dataloader=DataSpec(loader(8), device_transforms=probe), max_duration='1ba',
               device_train_microbatch_size=4)
t.fit()
print(json.dumps({{'file': composer.__file__, 'has_source': has_source, 'status': compatshim.status().verdict.value,
                  'placements': [c.placement for c in probe.calls]}}))
"""


@pytest.fixture(scope='module')
def sourceless(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A byte-compiled copy of the installed Composer with no ``.py`` file left; its parent goes on PYTHONPATH."""
    spec = importlib.util.find_spec('composer')
    assert spec is not None and spec.submodule_search_locations
    root = tmp_path_factory.mktemp('sourceless')
    copy = root / 'composer'
    shutil.copytree(spec.submodule_search_locations[0], copy, ignore=shutil.ignore_patterns('__pycache__'))
    subprocess.run([sys.executable, '-m', 'compileall', '-b', '-q', '-j', '0', str(copy)], check=True)
    for source in copy.rglob('*.py'):
        source.unlink()
    assert not list(copy.rglob('*.py')) and list(copy.rglob('*.pyc'))
    return root


@pytest.mark.device
@pytest.mark.parametrize('leg', LEGS, indirect=True)
def test_sourceless_composer_enables_and_places(leg: str, sourceless: Path) -> None:
    env = {
        **os.environ,
        'OMP_NUM_THREADS': '1',
        'PYTHONPATH': os.pathsep.join(filter(None, [str(sourceless), os.environ.get('PYTHONPATH')])),
    }
    proc = subprocess.run(
        [sys.executable, '-c', JOB.format(tests=str(TESTS), leg=leg)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if proc.returncode != 0:
        # The failure the shim used to have (a shape error blaming Composer) must fail the shim leg loudly.
        raise AssertionError(f'the sourceless run failed ({proc.returncode}):\n{proc.stderr[-3000:]}')
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result['file'].startswith(str(sourceless)) and result['file'].endswith('.pyc'), result['file']
    assert result['has_source'] is False, 'the copy must really be sourceless'
    assert result['placements'] == ['device'], result


def _function(code: str, name: str) -> Any:
    """A function compiled from a string: it has a code object and no retrievable source, like a .pyc-only install."""
    namespace: dict[str, Any] = {}
    exec(compile(textwrap.dedent(code), '<no source>', 'exec'), namespace)
    return namespace[name]


@pytest.mark.skipif(FAMILY is None, reason=f'Composer {COMPOSER} is unaffected: no family to check against')
def test_changed_code_is_refused_precisely_without_source() -> None:
    """A release whose train loop stopped using the hook is named, method and name, from its code object alone."""
    from composer.core.data_spec import DataSpec
    from composer.trainer.trainer import Trainer

    hook = 'device_transforms' if FAMILY is Family.HOST else 'batch_transforms'
    changed = type(
        'Trainer',
        (Trainer,),
        {
            '_train_loop': _function(
                """
        def _train_loop(self):
            return self.state.batch  # no longer calls the batch-level hook
    """,
                '_train_loop',
            )
        },
    )
    with pytest.raises(
        compatshim.UnexpectedComposerShapeError,
        match=rf'Trainer\._train_loop no longer uses {hook}\)?.*Nothing was patched',
    ):
        check_shape(FAMILY, DataSpec, changed, COMPOSER)
    nested = type(
        'Trainer',
        (Trainer,),
        {
            '_train_loop': _function(
                f"""
        def _train_loop(self):
            def inner(spec):
                return [spec.{hook}(b) for b in self.batches]  # used only inside nested code
            return inner
    """,
                '_train_loop',
            )
        },
    )
    check_shape(FAMILY, DataSpec, nested, COMPOSER)


@pytest.mark.skipif(FAMILY is None, reason=f'Composer {COMPOSER} is unaffected: no family to check against')
def test_a_wrapper_that_hides_the_method_is_named() -> None:
    """An agent's wrapper without ``__wrapped__`` is not taken for a changed Composer: the message says what it is."""
    from composer.core.data_spec import DataSpec
    from composer.trainer.trainer import Trainer

    original = Trainer._train_loop

    def opaque_tracer(self: Any, *args: Any, **kwargs: Any) -> Any:
        return original(self, *args, **kwargs)

    hidden = type('Trainer', (Trainer,), {'_train_loop': opaque_tracer})
    with pytest.raises(
        compatshim.UnexpectedComposerShapeError,
        match=r'Trainer\._train_loop is test_sourceless\..*opaque_tracer, a wrapper that hides',
    ):
        check_shape(FAMILY, DataSpec, hidden, COMPOSER)
