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


def test_device_option(pytester: pytest.Pytester) -> None:
    assert pytester.parseconfig().getoption('compatshim_device') == 'cpu'
    assert pytester.parseconfig('--compatshim-device=mps').getoption('compatshim_device') == 'mps'


def test_bad_stage_is_a_usage_error(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_subprocess('--compatshim=gpu')
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert "invalid choice: 'gpu'" in err and 'batch' in err and 'microbatch' in err
