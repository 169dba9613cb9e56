"""The pytest plugin's options, parsed as pytest parses them (no Composer needed: nothing is enabled here).

That a user's test passes with ``--compatshim`` and fails without it is ``tests/process/test_pytest_plugin.py``.
"""

from __future__ import annotations

import pytest


@pytest.mark.parametrize(
    ('args', 'stage'),
    [
        ([], None),
        (['--compatshim'], 'default'),  # enable()'s own default: COMPATSHIM_STAGE, else batch
        (['--compatshim=batch'], 'batch'),
        (['--compatshim=microbatch'], 'microbatch'),
    ],
)
def test_stage_option(pytester: pytest.Pytester, args: list[str], stage: str) -> None:
    assert pytester.parseconfig(*args).getoption('compatshim') == stage


def test_a_bare_flag_before_a_test_path_takes_no_path_for_its_stage(pytester: pytest.Pytester) -> None:
    """``pytest --compatshim tests/`` (docs/ci.md): the bare flag, and the path stays a path."""
    pytester.makepyfile(test_x='def test_ok(): pass')
    config = pytester.parseconfig('--compatshim', 'test_x.py', '-q')
    assert config.getoption('compatshim') == 'default' and config.args == ['test_x.py']
    assert pytester.parseconfig('--compatshim', 'microbatch').getoption('compatshim') == 'microbatch'


def test_device_option(pytester: pytest.Pytester) -> None:
    assert pytester.parseconfig().getoption('compatshim_device') == 'cpu'
    assert pytester.parseconfig('--compatshim-device=mps').getoption('compatshim_device') == 'mps'


def test_bad_stage_is_a_usage_error(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_subprocess('--compatshim=gpu')
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert '--compatshim=gpu: not a stage; use batch or microbatch' in err, err
