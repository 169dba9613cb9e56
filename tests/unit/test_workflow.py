"""The CI workflow (``.github/workflows/matrix.yml``) plans every env of the matrix, on the runners each device needs.

Its schema is checked offline by ``tox -e lint`` (check-jsonschema's built-in GitHub workflow schema); here: that what
it plans (``matrix/plan.py``, from tox.ini) leaves out no row of the support table and no env of tox's matrix, and that
its jobs are wired as the README says.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from compatshim._support import DEFAULT_PYTHON, TESTED_RELEASES

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / 'matrix'))

import plan  # noqa: E402

WORKFLOWS = ROOT / '.github' / 'workflows'


@pytest.fixture(scope='module')
def workflow() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((WORKFLOWS / 'matrix.yml').read_text())
    return loaded


@pytest.fixture(scope='module')
def planned() -> dict[str, list[dict[str, Any]]]:
    return plan.plan()


def test_every_tox_env_of_the_cpu_matrix_has_a_job(planned: dict[str, Any]) -> None:
    envs, _ = plan.tox_config()
    assert [e['env'] for e in planned['cpu']] == envs
    assert {f'{row.env}-cpu' for row in TESTED_RELEASES} <= set(envs)


@pytest.mark.parametrize('device', ['cuda', 'mps'])
def test_every_row_of_the_support_table_runs_on_each_device(planned: dict[str, Any], device: str) -> None:
    entries = {e['env']: e for e in planned[device]}
    assert set(entries) == {f'{row.env}-{device}' for row in TESTED_RELEASES}
    for row in TESTED_RELEASES:  # the benchmark runs on the default Python; the factor's rows have no bench env
        expected = f'bench-{row.env}-{device}' if row.python == DEFAULT_PYTHON else ''
        assert entries[f'{row.env}-{device}']['bench'] == expected
        assert entries[f'{row.env}-{device}']['python'] == row.python


def test_every_release_is_benchmarked_on_cpu(planned: dict[str, Any]) -> None:
    benched = [e['env'] for e in planned['bench']]
    assert benched == [f'bench-{row.env}-cpu' for row in TESTED_RELEASES if row.python == DEFAULT_PYTHON]
    assert all((ROOT / e['lock']).exists() for kind in planned.values() for e in kind)


def test_jobs_take_their_envs_from_the_plan(workflow: dict[str, Any]) -> None:
    jobs = workflow['jobs']
    assert 'python matrix/plan.py --github' in jobs['plan']['steps'][-1]['run']
    for job, kind in (('cpu', 'cpu'), ('bench-cpu', 'bench'), ('cuda', 'cuda'), ('mps', 'mps')):
        assert jobs[job]['strategy']['matrix']['include'] == f'${{{{ fromJSON(needs.plan.outputs.{kind}) }}}}', job
        assert any('tox -e ${{ matrix.env }}' in step.get('run', '') for step in jobs[job]['steps']), job


def test_runners_triggers_artifacts_and_the_report(workflow: dict[str, Any]) -> None:
    jobs = workflow['jobs']
    assert jobs['cuda']['runs-on'] == ['self-hosted', 'linux', 'gpu']
    assert jobs['mps']['runs-on'].startswith('macos-') and jobs['cpu']['runs-on'] == 'ubuntu-latest'
    triggers = workflow[True] if True in workflow else workflow['on']  # YAML 1.1 reads the key `on` as True
    assert {'pull_request', 'schedule', 'workflow_dispatch'} <= set(triggers)
    nightly = "github.event_name == 'schedule' || github.event_name == 'workflow_dispatch'"
    for job in ('bench-cpu', 'cuda', 'mps', 'report'):
        assert nightly in jobs[job]['if'], job
    assert 'if' not in jobs['cpu'], 'pull requests run the cpu tests'
    for job in ('cpu', 'cuda', 'mps'):  # every test job uploads its JUnit XML and summarises it (skips made visible)
        steps = jobs[job]['steps']
        assert any('--junitxml=results/junit.xml' in str(step.get('env', {})) for step in steps), job
        assert any('plan.py --summary' in step.get('run', '') for step in steps), job
        assert any(step.get('uses', '').startswith('actions/upload-artifact') for step in steps), job
    report = jobs['report']
    assert set(report['needs']) == {'bench-cpu', 'cuda', 'mps'}
    runs = ' '.join(step.get('run', '') for step in report['steps'])
    assert 'tox -e report' in runs and 'GITHUB_STEP_SUMMARY' in runs


def test_lint_checks_every_workflow_against_the_schema() -> None:
    tox = (ROOT / 'tox.ini').read_text()
    for path in WORKFLOWS.glob('*.y*ml'):
        assert f'check-jsonschema --builtin-schema vendor.github-workflows .github/workflows/{path.name}' in tox


def test_job_summary_of_a_device_the_runner_lacks(tmp_path: Path) -> None:
    junit = tmp_path / 'junit.xml'
    junit.write_text(
        '<testsuites><testsuite><testcase name="a"/><testcase name="b"><skipped type="pytest.skip" '
        'message="COMPATSHIM_TEST_DEVICE=cuda, but torch.cuda.is_available() is False here: run the cuda envs on a '
        'machine with one"/></testcase><testcase name="c"><skipped type="pytest.xfail" message="control"/></testcase>'
        '</testsuite></testsuites>'
    )
    markdown, warnings = plan.summary('composer0.28.0-cuda', junit)
    assert markdown.startswith('### composer0.28.0-cuda: 1 passed, 2 skipped')
    assert '- skipped 1: COMPATSHIM_TEST_DEVICE=cuda, but torch.cuda.is_available() is False' in markdown
    assert len(warnings) == 1 and warnings[0].startswith('::warning title=composer0.28.0-cuda - device absent::')
    assert plan.summary('lint', tmp_path / 'missing.xml') == ('### lint: no JUnit results\n', [])
