"""The CI workflow (``.github/workflows/matrix.yml``) plans every env of the matrix, on the runners each device needs.

Its schema is checked offline by ``tox -e lint`` (check-jsonschema's built-in GitHub workflow schema); here: that what
it plans (``matrix/plan.py``, from tox.ini) leaves out no row of the support table and no env of tox's matrix, and that
its jobs are wired as the README says.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.version import Version

from compatshim.config.support import DEFAULT_PYTHON, TESTED_RELEASES, family_of

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
    assert 'check-jsonschema --builtin-schema vendor.dependabot .github/dependabot.yml' in tox
    assert '\n    actionlint\n' in tox.split('[testenv:lint]')[1].split('\n[')[0]


def _actionlint(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([ACTIONLINT, '-no-color', *args], cwd=root, capture_output=True, text=True, check=False)


ACTIONLINT = shutil.which('actionlint') or 'actionlint'
needs_actionlint = pytest.mark.skipif(shutil.which('actionlint') is None, reason='actionlint is not installed here')


@needs_actionlint
def test_actionlint_finds_nothing_in_the_workflows() -> None:
    found = _actionlint(ROOT)
    assert found.returncode == 0, found.stdout + found.stderr


@needs_actionlint
@pytest.mark.parametrize('planted', ['actions/checkout@v4', 'actions/upload-artifact@v4'])
def test_actionlint_fails_a_planted_node20_action(tmp_path: Path, planted: str) -> None:
    """What the lint is for: an action pinned to a major that runs on the retired node20 runtime fails it."""
    text = (WORKFLOWS / 'matrix.yml').read_text()
    action = planted.split('@')[0]
    current = next(line.split('uses: ')[1] for line in text.splitlines() if f'uses: {action}@' in line)
    assert current != planted
    (tmp_path / 'matrix.yml').write_text(text.replace(current, planted, 1))
    found = _actionlint(tmp_path, '-config-file', str(ROOT / '.github' / 'actionlint.yaml'), 'matrix.yml')
    assert found.returncode == 1 and 'node20' in found.stdout and planted in found.stdout, found.stdout


@needs_actionlint
def test_actionlint_knows_the_self_hosted_gpu_label(tmp_path: Path) -> None:
    """Without .github/actionlint.yaml the cuda job's `gpu` label is unknown: the config is what declares it."""
    shutil.copy(WORKFLOWS / 'matrix.yml', tmp_path / 'matrix.yml')
    found = _actionlint(tmp_path, 'matrix.yml')
    assert found.returncode == 1 and 'label "gpu" is unknown' in found.stdout, found.stdout


def test_the_plan_reads_env_names_as_the_support_table_writes_them(planned: dict[str, Any]) -> None:
    from compatshim.config.support import split_env

    for entries in planned.values():
        for entry in entries:
            row, device = split_env(entry['env'])
            assert entry['device'] == device, entry
            assert entry['lock'] == (
                f'matrix/{row}.txt' if (ROOT / 'matrix' / f'{row}.txt').exists() else 'pyproject.toml'
            )


def test_the_docs_job_uploads_the_built_site(workflow: dict[str, Any]) -> None:
    uploads = [step for step in workflow['jobs']['cpu']['steps'] if step.get('with', {}).get('name') == 'site']
    assert len(uploads) == 1 and uploads[0]['if'] == "matrix.env == 'docs'" and uploads[0]['with']['path'] == 'site/'
    assert 'docs' in [entry['env'] for entry in plan.plan()['cpu']]


def test_dependabot_keeps_the_actions_current() -> None:
    config = yaml.safe_load((ROOT / '.github' / 'dependabot.yml').read_text())
    assert config['version'] == 2
    assert [(u['package-ecosystem'], u['directory']) for u in config['updates']] == [('github-actions', '/')]


def test_the_composer_main_job_warns_and_never_fails(workflow: dict[str, Any]) -> None:
    job = workflow['jobs']['composer-main']
    assert job['continue-on-error'] is True and job['env']['COMPATSHIM_ALLOW_UNTESTED'] == '1'
    assert "github.event_name == 'schedule'" in job['if']
    runs = [step.get('run', '') for step in job['steps']]
    assert any('git+https://github.com/mosaicml/composer.git@main' in run for run in runs)
    assert any('plan.py --head' in run and 'GITHUB_STEP_SUMMARY' in run for run in runs)


def _doctor(train: str = 'device', enable_error: Any = None) -> str:
    with_shim = {'train': train, 'eval': 'device', 'predict': 'device'}
    check = {'with_shim': with_shim, 'enable_error': enable_error}
    return json.dumps({'composer': '0.33.0.dev0', 'torch': '2.7.0', 'summary': 'Affected; ...', 'self_check': check})


def _junit(path: Path, failed: bool) -> Path:
    case = '<testcase name="b"><failure message="x"/></testcase>' if failed else '<testcase name="b"/>'
    path.write_text(f'<testsuites><testsuite><testcase name="a"/>{case}</testsuite></testsuites>')
    return path


def test_head_summary_says_patched_and_placed(tmp_path: Path) -> None:
    (tmp_path / 'doctor.json').write_text(_doctor())
    markdown, warnings = plan.head_summary(tmp_path / 'doctor.json', _junit(tmp_path / 'junit.xml', failed=False))
    assert 'with the shim: train device, eval device, predict device' in markdown
    assert '- placement tests: 2 passed' in markdown
    assert 'the shim patches Composer main and every placement test passes' in markdown and warnings == []


@pytest.mark.parametrize(
    ('doctor', 'failed', 'expected'),
    [
        (_doctor(enable_error='UnexpectedComposerShapeError: moved'), False, 'enable() failed: Unexpected'),
        (_doctor(train='host'), False, 'did not put the transform on the device (host, device, device)'),
        (_doctor(), True, 'the placement tests did not all pass'),
        (None, False, 'the doctor did not run'),
    ],
    ids=['shape-changed', 'placed-on-host', 'tests-failed', 'no-doctor'],
)
def test_head_summary_warns_when_composer_moved(tmp_path: Path, doctor: Any, failed: bool, expected: str) -> None:
    if doctor is not None:
        (tmp_path / 'doctor.json').write_text(doctor)
    markdown, warnings = plan.head_summary(tmp_path / 'doctor.json', _junit(tmp_path / 'junit.xml', failed))
    assert '**warning**' in markdown and expected in markdown
    assert warnings and all(w.startswith('::warning title=Composer main::') for w in warnings)
    assert any(expected in w for w in warnings)


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


def _user_workflow() -> str:
    """The copy-and-run workflow of docs/ci.md (its one ```yaml block), as a user would save it."""
    text = (ROOT / 'docs' / 'ci.md').read_text()
    blocks = text.split('```yaml\n')[1:]
    assert len(blocks) == 1, 'docs/ci.md holds one workflow'
    return blocks[0].split('```')[0]


def test_the_user_workflow_gates_pull_requests_and_saves_on_main() -> None:
    workflow = yaml.safe_load(_user_workflow())
    runs = [step.get('run', '') for job in workflow['jobs'].values() for step in job['steps']]
    assert any('pytest --compatshim' in run for run in runs)
    assert any('--compare main' in run for run in runs) and any('--save main' in run for run in runs)
    assert any('--monitor=strict' in run for run in runs)
    assert set(workflow['jobs']) == {'cpu', 'gpu'} and workflow['jobs']['gpu']['runs-on'] == [
        'self-hosted',
        'linux',
        'gpu',
    ]


@needs_actionlint
def test_actionlint_finds_nothing_in_the_user_workflow(tmp_path: Path) -> None:
    """The workflow a user copies is clean: current action majors, expressions, its run: scripts through shellcheck;
    its `gpu` label needs the label file, as the page says."""
    (tmp_path / 'compatshim.yml').write_text(_user_workflow())
    found = _actionlint(tmp_path, '-config-file', str(ROOT / '.github' / 'actionlint.yaml'), 'compatshim.yml')
    assert found.returncode == 0, found.stdout + found.stderr
    unlabelled = _actionlint(tmp_path, 'compatshim.yml')
    assert unlabelled.returncode == 1 and 'label "gpu" is unknown' in unlabelled.stdout, unlabelled.stdout


def test_the_release_workflow_builds_once_smoke_tests_the_wheel_and_publishes_by_trusted_publishing() -> None:
    """On a ``v*`` tag: one build job builds and checks the files (and the tag); the smoke jobs install the built wheel
    (not the checkout) beside a Composer release of each affected family and run the doctor and the placement tests;
    publish uploads those same files with PyPI's trusted publishing (an OIDC token in the ``pypi`` environment, no
    password); the GitHub release takes CHANGELOG.md's section."""
    release: dict[str, Any] = yaml.safe_load((WORKFLOWS / 'release.yml').read_text())
    triggers = release[True]  # YAML reads the key `on` as True
    assert triggers == {'push': {'tags': ['v*']}}
    jobs = release['jobs']
    runs = {name: ' '.join(step.get('run', '') for step in job['steps']) for name, job in jobs.items()}
    builds = [name for name, text in runs.items() if '--build' in text or 'python -m build' in text]
    assert builds == ['build'] and '--tag "$GITHUB_REF_NAME"' in runs['build']
    smoke = jobs['smoke']
    assert smoke['needs'] == 'build' and 'dist/*.whl' in runs['smoke'] and 'pip install -e' not in runs['smoke']
    for part in ('compatshim" doctor', 'compatshim" run --', 'test_placement.py', 'rm -rf compatshim'):
        assert part in runs['smoke'], part
    newest: dict[Any, str] = {}
    for row in TESTED_RELEASES:
        family = family_of(row.composer)
        if family is not None and not row.override and Version(row.composer) > Version(newest.get(family, '0')):
            newest[family] = row.composer
    assert sorted(smoke['strategy']['matrix']['composer']) == sorted(newest.values()), 'the newest of each family'
    publish = jobs['publish']
    assert set(publish['needs']) == {'build', 'smoke'}
    assert publish['environment']['name'] == 'pypi' and publish['permissions'] == {'id-token': 'write'}
    assert [s['uses'] for s in publish['steps'] if 'uses' in s][-1].startswith('pypa/gh-action-pypi-publish@')
    assert not any('password' in s.get('with', {}) for s in publish['steps'])
    assert release['permissions'] == {'contents': 'read'}, 'write access only where a job needs it'
    assert jobs['github-release']['permissions'] == {'contents': 'write'} and '--notes' in runs['github-release']


def test_the_release_notes_are_the_changelogs_section() -> None:
    import check_dist

    version = check_dist._version()
    notes = check_dist.release_notes(version)
    assert notes.strip() and '### Added' in notes and not any(line.startswith('## ') for line in notes.splitlines())
    assert f'[{version}]: ' not in notes and '[Unreleased]: ' not in notes
    assert check_dist.changelog_problems(check_dist.as_released((ROOT / 'CHANGELOG.md').read_text()), version) == []
    assert check_dist._tag_problems('v0.0.0-not-it') == [
        f'the tag v0.0.0-not-it is not v{version} (compatshim.__version__)'
    ]


@pytest.fixture(scope='module')
def release() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((WORKFLOWS / 'release.yml').read_text())
    return loaded


def test_no_checkout_of_the_release_keeps_its_token(release: dict[str, Any]) -> None:
    """Every ``actions/checkout`` says ``persist-credentials: false``: no later step (the build, the tests of the
    built wheel) finds the job's token in ``.git/config``."""
    checkouts = [
        (name, step)
        for name, job in release['jobs'].items()
        for step in job['steps']
        if step.get('uses', '').startswith('actions/checkout@')
    ]
    assert len(checkouts) == 3
    for name, step in checkouts:
        assert step.get('with', {}).get('persist-credentials') is False, name


def test_every_job_sets_python_up_before_it_calls_python(release: dict[str, Any]) -> None:
    """A runner's own ``python`` is whatever the image ships: each job that runs ``python`` has
    ``actions/setup-python`` before it."""
    for name, job in release['jobs'].items():
        steps = job['steps']
        calls = [i for i, step in enumerate(steps) if re.search(r'(^|[\s;&|(])python3? ', step.get('run', ''))]
        setups = [i for i, step in enumerate(steps) if step.get('uses', '').startswith('actions/setup-python@')]
        if calls:
            assert setups and setups[0] < calls[0], f'{name}: python before actions/setup-python'
    assert any(
        s.get('uses', '').startswith('actions/setup-python@') for s in release['jobs']['github-release']['steps']
    )


def _github_release(tmp_path: Path, release: dict[str, Any], tag: str, prerelease: str) -> list[str]:
    """Run the github-release job's last step as the runner would (bash -e), with ``gh`` and ``python`` standing in:
    the arguments ``gh`` was given."""
    job = release['jobs']['github-release']
    step = job['steps'][-1]
    assert step['env']['PRERELEASE'] == '${{ needs.build.outputs.prerelease }}'
    bin_dir = tmp_path / 'bin'
    bin_dir.mkdir()
    (bin_dir / 'gh').write_text('#!/bin/sh\nfor a in "$@"; do printf "%s\\n" "$a"; done > "$RUNNER_TEMP/gh.args"\n')
    (bin_dir / 'python').write_text('#!/bin/sh\necho notes\n')
    for stub in bin_dir.iterdir():
        stub.chmod(0o755)
    (tmp_path / 'dist').mkdir()
    (tmp_path / 'dist' / 'compatshim.whl').write_text('')
    env = {
        'PATH': f'{bin_dir}:/usr/bin:/bin',
        'GITHUB_REF_NAME': tag,
        'RUNNER_TEMP': str(tmp_path),
        'PRERELEASE': prerelease,
        'GH_TOKEN': 'unused',
    }
    subprocess.run(['bash', '-e', '-c', step['run']], cwd=tmp_path, env=env, check=True)
    return (tmp_path / 'gh.args').read_text().splitlines()


@pytest.mark.skipif(shutil.which('bash') is None, reason='the step is a bash script')
@pytest.mark.parametrize(('tag', 'prerelease'), [('v0.1.0', False), ('v0.2.0rc1', True), ('v0.2.0.dev1', True)])
def test_a_prerelease_tag_is_a_github_prerelease_never_the_latest(
    tmp_path: Path, release: dict[str, Any], tag: str, prerelease: bool
) -> None:
    """The build job says whether the tag is a pre-release (PEP 440, ``check_dist.py --prerelease``); the GitHub
    release of one is ``--prerelease --latest=false``, of a final release neither; both ``--verify-tag``."""
    import check_dist

    build = release['jobs']['build']
    decide = next((step for step in build['steps'] if step.get('id') == 'tag'), {})
    assert decide.get('run') == 'python matrix/check_dist.py --prerelease "$GITHUB_REF_NAME" >> "$GITHUB_OUTPUT"'
    assert build['outputs']['prerelease'] == '${{ steps.tag.outputs.prerelease }}'
    assert 'build' in release['jobs']['github-release']['needs']
    assert check_dist.is_prerelease(tag) is prerelease
    args = _github_release(tmp_path, release, tag, str(prerelease).lower())
    assert args[:3] == ['release', 'create', tag] and 'dist/compatshim.whl' in args and '--verify-tag' in args
    assert ('--prerelease' in args) is prerelease and ('--latest=false' in args) is prerelease
    assert args[args.index('--notes-file') + 1] == f'{tmp_path}/notes.md'


@pytest.mark.parametrize(
    ('tag', 'expected'),
    [
        ('v0.1.0', False),
        ('v0.1.1', False),
        ('v0.1.0.post1', False),
        ('v0.2.0a1', True),
        ('v0.2.0b2', True),
        ('v0.2.0rc1', True),
        ('v0.2.0.dev3', True),
        ('v0.2.0rc1.dev1', True),
    ],
)
def test_which_tags_are_prereleases(tag: str, expected: bool, capsys: pytest.CaptureFixture[str]) -> None:
    import check_dist

    assert check_dist.main(['--prerelease', tag]) == 0
    assert capsys.readouterr().out == f'prerelease={str(expected).lower()}\n'
    with pytest.raises(SystemExit, match='is not v and a version'):
        check_dist.is_prerelease(tag[1:])
