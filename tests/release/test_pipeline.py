"""``compatshim bench --pipeline``: a user's pipeline module (``tests/pipelines/uint8_pipeline.py``: a plain mapping,
uint8 images normalised and cropped on the device, no import of compatshim) benchmarked on this release, leg by leg,
saved and compared, with the regressions a user's CI must catch planted, and every bad input refused in one line.

In-process (``compatshim._cli.main``), once per family and on the forward torch. ``--quick`` runs are deterministic
where they are judged: 3 rounds can never make a timing significant, and placement, calls and bytes are counts. The
timing gate is tried here only with an effect no machine hides (a transform ten times as slow); how it does at the
edge of its minimum effect (twice as slow) is judged on recorded samples in ``tests/unit/test_judge.py``.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
from conftest import COMPOSER, FAMILY, IS_AFFECTED

from compatshim import _cli
from compatshim.bench import gate
from compatshim.config.support import Family

pytestmark = [pytest.mark.runs_in('family', 'forward'), pytest.mark.filterwarnings('ignore::UserWarning')]

PIPELINES = Path(__file__).resolve().parents[1] / 'pipelines'
SPEC = 'uint8_pipeline:pipeline'
#: Where the transform runs without the shim, per family (the unpatched leg).
UNPATCHED = {None: 'device', Family.HOST: 'host', Family.DROPPED: 'never called'}
#: What the tests plant through the environment (``tests/pipelines/uint8_pipeline.py``), and the kill switch.
PLANTED = ('PIPELINE_SLOWER', 'PIPELINE_FLOAT32', 'PIPELINE_HEAVIER', 'PIPELINE_MASKS', 'PIPELINE_COMPILED')
PLANTED += ('PIPELINE_DRAWS', 'COMPATSHIM_DISABLE')


def _as_user_repo(path: Path, patch: pytest.MonkeyPatch) -> Path:
    """``path`` made the user's repository: their pipeline module in the current directory, where baselines go by
    default, and nothing planted."""
    (path / 'uint8_pipeline.py').write_text((PIPELINES / 'uint8_pipeline.py').read_text())
    patch.chdir(path)
    patch.syspath_prepend(str(path))
    for variable in PLANTED:
        patch.delenv(variable, raising=False)
    return path


@pytest.fixture
def user_repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The user's repository (:func:`_as_user_repo`), for one test."""
    return _as_user_repo(tmp_path, monkeypatch)


@pytest.fixture(scope='module')
def unchanged(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One ``--quick --save main`` of the unchanged pipeline, then one ``--compare main`` of it, for the tests that
    start from that baseline: the save's output, the compare's exit code and output, and the baseline saved."""
    found: dict[str, Any] = {}
    with pytest.MonkeyPatch.context() as patch:
        repo = _as_user_repo(tmp_path_factory.mktemp('unchanged'), patch)
        for step, args in (('save', ['--save', 'main']), ('compare', ['--compare', 'main'])):
            out = io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
                found[f'{step}_code'] = _cli.main(['bench', '--pipeline', SPEC, '--quick', *args])
            found[step] = out.getvalue()
    found['baseline'] = (repo / '.compatshim' / 'benchmarks' / 'main.json').read_text()
    return found


def _saved(user_repo: Path, unchanged: dict[str, Any]) -> None:
    """The unchanged pipeline's baseline, saved as ``main`` in the user's repository."""
    baselines = user_repo / '.compatshim' / 'benchmarks'
    baselines.mkdir(parents=True)
    (baselines / 'main.json').write_text(unchanged['baseline'])


def _bench(capsys: Any, *args: str) -> tuple[int, str, str]:
    code = _cli.main(['bench', '--pipeline', SPEC, *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def _leg_line(out: str, leg: str) -> str:
    return next(line for line in out.splitlines() if line.startswith(f'  {leg} '))


def test_each_leg_of_this_release_and_the_verdicts(user_repo: Path, capsys: Any) -> None:
    """Per leg: placement, calls, bytes by dtype, the step time; then the shim's factor and the input-bound verdict."""
    code, out, _ = _bench(capsys, '--quick', '--json', 'result.json')
    assert code == 0, out
    result = json.loads((user_repo / 'result.json').read_text())
    legs = result['legs']
    assert result['kind'] == 'pipeline' and result['composer'] == COMPOSER
    assert result['fingerprint']['git_commit'] is None  # not a git repository
    for name in ('composer', 'torch', 'python', 'device', 'pipeline', 'samples_per_step'):
        assert result['fingerprint'][name] is not None, name
    pixels = 32 * 3 * 48 * 48  # a batch of uint8 images
    if FAMILY is Family.REJECTED:
        assert not (legs['unpatched']['status'] == 'ran') and legs['unpatched']['reason'].startswith('TypeError: ')
        assert 'n/a: TypeError' in _leg_line(out, 'unpatched') and 'unpatched cannot run here: TypeError' in out
    else:
        assert legs['unpatched']['placement'] == UNPATCHED[FAMILY]
        assert UNPATCHED[FAMILY] in _leg_line(out, 'unpatched')
    if FAMILY is Family.DROPPED:
        assert 'unpatched never calls the transform here' in out
    if IS_AFFECTED:
        for leg in ('shim-batch', 'shim-microbatch'):
            assert legs[leg]['placement'] == 'device' and legs[leg]['h2d_bytes_by_dtype']['uint8'] == pixels, leg
        assert legs['shim-batch']['calls_per_step'] == 1 and legs['shim-microbatch']['calls_per_step'] == 2
    else:  # nothing to patch: stage batch is plain device_transforms, on the device; no stage microbatch
        assert legs['shim-batch']['placement'] == 'device' and not (legs['shim-microbatch']['status'] == 'ran')
        assert 'the shim: this release runs device_transforms on the device itself' in out
    if FAMILY is Family.HOST:  # the transform on the host: float32 crosses, 4x the shim's bytes
        assert 4 * pixels <= legs['unpatched']['h2d_bytes_by_dtype']['float32'] < 4 * pixels + 1024
    native = FAMILY in (Family.DROPPED, Family.REJECTED)
    assert (legs['native-batch']['status'] == 'ran') is native and (
        legs['native-microbatch']['status'] == 'ran'
    ) is native
    if native:
        assert legs['native-batch']['placement'] == 'host'
        assert 4 * pixels <= legs['native-batch']['h2d_bytes_by_dtype']['float32'] < 4 * pixels + 1024
    assert legs['ceiling']['placement'] == 'no transform' and legs['ceiling']['h2d_bytes_per_step'] < 1024
    # --quick's 3 rounds support no timing verdict: it says so, and prints no factor
    assert 'timing: no verdict from 3 rounds' in out and ' faster' not in out and ' slower' not in out
    assert 'torch threads 1 (fixed)' in out
    head = re.search(r', measured (\d+) s of (\d+) s\)$', out.splitlines()[0])  # what it measured, of what it took
    assert head and int(head[1]) <= int(head[2]), out.splitlines()[0]
    for leg, found in legs.items():
        if found['status'] == 'ran':
            line = _leg_line(out, leg)
            assert 'ms' in line and ('uint8' in line or leg == 'ceiling' or 'float32' in line), line


def test_save_then_compare_and_the_regressions_a_ci_must_catch(
    user_repo: Path, capsys: Any, monkeypatch: Any, unchanged: dict[str, Any]
) -> None:
    """``--save`` then ``--compare`` on unchanged code: exit 0; a collate that yields float32 (4x the bytes), and the
    kill switch in the comparing run (the shim legs' transform off the device): exit 1, naming the metric."""
    assert unchanged['save_code'] == 0 and json.loads(unchanged['baseline'])['kind'] == 'pipeline', unchanged['save']
    code, out = unchanged['compare_code'], unchanged['compare']
    assert code == 0 and "compared with 'main'" in out, out  # timings of 3 rounds may be inconclusive: said so
    assert ('nothing worsened' in out) is ('which decide nothing' not in out), out
    _saved(user_repo, unchanged)
    monkeypatch.setenv('PIPELINE_FLOAT32', '1')
    code, out, _ = _bench(capsys, '--quick', '--compare', 'main')
    assert code == 1, out
    assert f'REGRESSION {SPEC} ceiling: bytes per step' not in out  # the ceiling's batches are transformed ones
    legs = ['shim-batch', 'shim-microbatch'] if IS_AFFECTED else ['unpatched']
    for leg in legs:
        assert f'REGRESSION {SPEC} {leg}: bytes per step' in out and 'threshold exact' in out, out
    monkeypatch.delenv('PIPELINE_FLOAT32')
    monkeypatch.setenv('COMPATSHIM_DISABLE', '1')
    code, out, _ = _bench(capsys, '--quick', '--compare', 'main')
    if not IS_AFFECTED:  # nothing to switch off: the kill switch changes nothing here
        assert code == 0, out
        return
    assert code == 1, out
    assert f'REGRESSION {SPEC} shim-batch: placement: device in the baseline' in out, out
    code, out, _ = _bench(capsys, '--quick', '--compare', 'main', '--save', 'main')
    assert code == 1 and "not saved as 'main'" in out  # a worse run never replaces its baseline


def test_a_heavier_transform_fails_the_compare_on_its_work_exactly(
    user_repo: Path, capsys: Any, monkeypatch: Any, unchanged: dict[str, Any]
) -> None:
    """The transform's work per call is counted in the check steps: one more op over a tenth of the batch fails
    ``--compare`` on every leg that runs it, naming ops and bytes with both figures; 2x the work too; unchanged, 0."""
    assert unchanged['save_code'] == 0 and 'work per call (counted, not timed' in unchanged['save'], unchanged['save']
    ran = [leg for leg, data in json.loads(unchanged['baseline'])['legs'].items() if data.get('work')]
    assert ran and 'ceiling' not in ran, ran
    code, out = unchanged['compare_code'], unchanged['compare']
    assert code == 0 and 'work per call' not in ''.join(line for line in out.splitlines() if 'REGRESSION' in line)
    _saved(user_repo, unchanged)
    for plant in ('PIPELINE_HEAVIER', 'PIPELINE_SLOWER'):
        monkeypatch.setenv(plant, '1' if plant == 'PIPELINE_HEAVIER' else '2')
        code, out, _ = _bench(capsys, '--quick', '--compare', 'main')
        monkeypatch.delenv(plant)
        assert code == 1, out
        for leg in ran:
            line = next(line for line in out.splitlines() if f'REGRESSION {SPEC} {leg}: work per call' in line)
            assert 'more work per call: ops' in line and 'bytes' in line and ' -> ' in line, line


def test_a_draw_dependent_transform_counts_the_same_on_every_leg_at_one_stage(
    user_repo: Path, capsys: Any, monkeypatch: Any
) -> None:
    """Issue 46: a transform that flips with probability one half (its own generator) counted 4 ops on native-batch,
    4.5 on shim-batch, 4.75 on the microbatch legs: each leg's check steps started from another state. Now each starts
    from the same state and the same batches."""
    monkeypatch.setenv('PIPELINE_MASKS', 'coin')
    code, out, _ = _bench(capsys, '--quick', '--json', 'result.json')
    assert code == 0, out
    legs = json.loads((user_repo / 'result.json').read_text())['legs']
    for stage in ('batch', 'microbatch'):
        counted = {leg: data['work'] for leg, data in legs.items() if data.get('work') and leg.split('-')[-1] == stage}
        if stage == 'batch' and legs['unpatched'].get('work'):  # the unpatched leg runs it once per batch
            counted['unpatched'] = legs['unpatched']['work']
        if not counted and stage == 'microbatch' and not IS_AFFECTED:
            continue  # the shim patches nothing here: no leg runs the transform per microbatch
        assert counted and len({json.dumps(w, sort_keys=True) for w in counted.values()}) == 1, counted


def test_a_generator_at_the_top_of_the_users_module_counts_alike_in_every_bench_of_a_process(
    user_repo: Path,
) -> None:
    """A review of issue 59: a module-level ``RNG = numpy.random.default_rng(0)`` was advanced by each bench (the
    ceiling's calls, the timed rounds) and never put back, so a second bench in one process (a fixture session's)
    counted a transform whose work depends on its draws apart: 2.5 ops per call, then 3.0. Each bench starts from
    the generators the transform holds as they were."""
    from compatshim.bench import pipeline

    (user_repo / 'held_rng.py').write_text(
        'import numpy, torch\nRNG = numpy.random.default_rng(0)\n'
        'def transform(batch):\n    x, y = batch\n    x = x.float()\n'
        '    for _ in range(int(RNG.integers(1, 6))):\n        x = x * 1.01\n    return x, y\n'
        'def pipeline():\n    data = torch.utils.data.TensorDataset(torch.zeros(32, 3, 8, 8), torch.zeros(32).long())\n'
        '    return {"dataloader": torch.utils.data.DataLoader(data, batch_size=8), "transform": transform}\n'
    )
    size = pipeline.size_of('quick', steps=4, rounds=1)
    counted = [
        {leg: m.work.ops for leg, m in pipeline.gate_pipeline('held_rng:pipeline', size=size).result.legs.items()
         if m.work is not None}
        for _ in range(2)
    ]  # fmt: skip
    assert counted[0] and counted[0] == counted[1], counted


def test_work_that_leaves_torch_is_named_and_a_count_change_of_it_is_never_an_improvement(
    user_repo: Path, capsys: Any, monkeypatch: Any
) -> None:
    """Issue 46: flip masks drawn by numpy instead of torch counted one op less, and the compare said IMPROVED and
    exited 0. The run names the transform not fully counted; the compare judges the elements that now leave torch as a
    count: never improved, and where another count fell, inconclusive, which the last line says decides nothing."""
    monkeypatch.setenv('PIPELINE_MASKS', 'torch')
    code, out, _ = _bench(capsys, '--quick', '--save', 'main')
    assert code == 0 and 'not fully counted' not in out, out
    monkeypatch.setenv('PIPELINE_MASKS', 'numpy')
    code, out, _ = _bench(capsys, '--quick', '--compare', 'main')
    assert f'work: the transform of {SPEC} is not fully counted' in out, out
    assert 'not fully counted: work left torch through numpy array into torch.as_tensor' in out, out
    assert 'IMPROVED' not in out and 'its work leaves torch now' in out, out
    assert code != 0 or 'INCONCLUSIVE' in out and 'which decide nothing' in out, out


@pytest.mark.runs_in('family:dropped')
def test_a_per_sample_python_random_loop_counts_the_same_whatever_was_drawn_before(
    user_repo: Path, capsys: Any, monkeypatch: Any
) -> None:
    """Issue 59: a loop over the samples drawing from Python's global ``random`` failed every unchanged compare: an
    import between the bench's seed and its counted steps (coolname draws ~800 numbers as Composer loads) drew in one
    run and not in the other. Here the save's collate draws 800 numbers after the bench's seed, the compares' other
    counts: the counted steps start from one seeded state, so all three exit 0 (a compare without ``--quick``
    measures at the baseline's size); twice the work exits 1 on its work."""
    monkeypatch.setenv('PIPELINE_MASKS', 'python')
    monkeypatch.setenv('PIPELINE_DRAWS', '800')
    code, out, _ = _bench(capsys, '--quick', '--save', 'main')
    assert code == 0, out
    for drawn in ('0', '1', '37'):
        monkeypatch.setenv('PIPELINE_DRAWS', drawn)
        code, out, _ = _bench(capsys, '--compare', 'main')
        assert code == 0 and 'work per call' not in ''.join(re.findall(r'REGRESSION.*', out)), out
    monkeypatch.setenv('PIPELINE_SLOWER', '2')
    code, out, _ = _bench(capsys, '--compare', 'main')
    assert code == 1 and f'REGRESSION {SPEC} shim-batch: work per call' in out, out


def test_a_compiled_transform_is_measured_on_every_leg(user_repo: Path, capsys: Any, monkeypatch: Any) -> None:
    """Issue 59: a ``torch.compile``d transform stopped Dynamo on the fake accelerator's tensor subclass, so the legs
    that run it on the device were ``n/a`` and never measured. Every leg that runs it is checked, counted and timed,
    where it ran as the uncompiled one did; the same work saved twice compares as unchanged."""
    monkeypatch.setenv('PIPELINE_COMPILED', '1')
    code, out, _ = _bench(capsys, '--quick', '--save', 'main', '--json', 'result.json')
    assert code == 0, out
    legs = json.loads((user_repo / 'result.json').read_text())['legs']
    running = [leg for leg in LEGS_RUNNING_IT if legs[leg]['status'] != 'not on this release']
    for leg in running:
        assert legs[leg]['status'] == 'ran' and legs[leg]['work']['ops'] > 0 and legs[leg]['round_s'], (leg, out)
        assert legs[leg]['placement'] == ('host' if leg == 'native-batch' else 'device'), (leg, legs[leg])
    on_device = [leg for leg in running if leg != 'native-batch']  # the host leg moves its transform's float32
    assert {legs[leg]['h2d_bytes_by_dtype'].get('uint8') for leg in on_device} == {32 * 3 * 48 * 48}, out
    code, out, _ = _bench(capsys, '--compare', 'main')
    assert code == 0 and 'nothing worsened' in out.splitlines()[-1], out


@pytest.mark.runs_in('family:rejected')
def test_a_transform_ten_times_as_slow_fails_the_timing_gate(user_repo: Path, capsys: Any, monkeypatch: Any) -> None:
    """Five rounds (the fewest that can gate), the transform doing its work ten times (several times the step): every
    leg that runs it falls against the ceiling beside it far beyond the 20% minimum effect, and the compare exits 1
    naming them; the ceiling, which never runs it, does not. Where the gate declines to judge a leg whose rounds (of
    the baseline or of this run) spread past the stability limit -- under ``tox -p auto`` another env beside this one
    did -- the pair is measured again, as the gate advises, up to four times, until each leg has been judged a
    regression in some run; a leg judged ``ok``, or declined for any other reason, fails at once. All the legs are
    judged by one rule: if only some were ever stable enough to judge (two busy processes beside it can keep a leg
    unstable through four runs), those judged a regression, and none was ever judged otherwise."""
    args = ('--steps', '6', '--rounds', '5')
    judged: set[str] = set()
    for _ in range(4):
        monkeypatch.delenv('PIPELINE_SLOWER', raising=False)
        assert _bench(capsys, *args, '--save', 'main')[0] == 0
        monkeypatch.setenv('PIPELINE_SLOWER', '10')
        code, out, _ = _bench(capsys, *args, '--compare', 'main')
        assert code == 1, out
        now = {leg for leg in LEGS_RUNNING_IT if f'REGRESSION {SPEC} {leg}/ceiling' in out}
        unstable = {
            leg
            for leg in LEGS_RUNNING_IT
            if re.search(rf'INCONCLUSIVE {re.escape(SPEC)} {leg}/ceiling: .*not judged: .*{SPREAD}', out)
        }
        assert now | unstable == set(LEGS_RUNNING_IT), out  # never ok, never improved, never declined otherwise
        judged |= now
        if judged == set(LEGS_RUNNING_IT):
            break
    assert judged, out  # the gate judged a leg at least once, and only ever as a regression
    assert f'REGRESSION {SPEC} ceiling' not in out


#: How the rule says a pair's rounds spread past its limit (compatshim/bench/rule.py).
SPREAD = r'spread by \d+% across rounds'

#: The pipeline's legs that run its transform (the ceiling never does).
LEGS_RUNNING_IT = ('native-batch', 'native-microbatch', 'shim-batch', 'shim-microbatch')


@pytest.mark.parametrize(
    ('args', 'message'),
    [
        (['--pipeline', 'uint8_pipeline'], "--pipeline 'uint8_pipeline' is not MODULE:CALLABLE"),
        (['--pipeline', 'no_such_module:pipeline'], "cannot import 'no_such_module': ModuleNotFoundError"),
        (['--pipeline', 'broken:pipeline'], "cannot import 'broken': ZeroDivisionError: division by zero"),
        (['--pipeline', 'uint8_pipeline:missing'], "'uint8_pipeline' has no 'missing'"),
        (['--pipeline', 'uint8_pipeline:MEAN'], 'uint8_pipeline:MEAN is Tensor, not a callable'),
        (['--pipeline', 'wrong:raises'], 'wrong:raises() raised RuntimeError: no data here'),
        (['--pipeline', 'wrong:a_list'], 'wrong:a_list() returned list, not a compatshim.bench.Pipeline or a mapping'),
        (
            ['--pipeline', 'wrong:no_transform'],
            "wrong:no_transform() returned a mapping with no 'transform'; a pipeline mapping needs dataloader and "
            'transform, and may have model, microbatch_size, get_num_samples_in_batch',
        ),
        (
            ['--pipeline', 'wrong:returns_none'],
            "wrong:returns_none: its transform 'forgets_to_return' returned None. It must return the batch it was "
            'given, transformed',
        ),
        (['--pipeline', 'wrong:extra_key'], "returned a mapping with unknown keys ['batch_size']"),
        (['--pipeline', 'wrong:not_callable_transform'], 'transform is int, not a callable'),
        (['--pipeline', SPEC, '--save', '../main'], "'../main' is not a baseline name"),
        (['--pipeline', SPEC, '--compare', 'never-saved'], "no baseline 'never-saved' in .compatshim/benchmarks"),
        (['--pipeline', SPEC, '--size', 'tiny'], '--pipeline does not take --size'),
        (['--pipeline', SPEC, '--rounds', '0'], 'rounds must be an int >= 1, got 0'),
        (['--save', 'main'], '--save is for --pipeline MODULE:CALLABLE only (none was given)'),
    ],
    ids=lambda value: ' '.join(value) if isinstance(value, list) else 'message',  # the same id on every pytest
)
def test_bad_input_is_one_line_and_exit_2_with_nothing_written(
    args: list[str], message: str, user_repo: Path, capsys: Any
) -> None:
    (user_repo / 'broken.py').write_text('1 / 0\n')
    (user_repo / 'wrong.py').write_text(
        'def raises():\n    raise RuntimeError("no data here")\n'
        'def a_list():\n    return []\n'
        'def no_transform():\n    return {"dataloader": [1, 2]}\n'
        'def extra_key():\n    return {"dataloader": [1], "transform": abs, "batch_size": 8}\n'
        'def not_callable_transform():\n    return {"dataloader": [1], "transform": 3}\n'
        'def forgets_to_return(batch):\n    batch[0].float()\n'
        'def returns_none():\n    from uint8_pipeline import pipeline\n'
        '    return {**pipeline(), "transform": forgets_to_return}\n'
    )

    def files() -> set[Path]:
        return {p for p in user_repo.rglob('*') if '__pycache__' not in p.parts}

    before = files()
    code = _cli.main(['bench', *args])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and message in err[0] and 'Traceback' not in err[0], err
    assert files() == before, 'nothing written'


def test_a_baseline_name_that_does_not_exist_lists_those_that_do(user_repo: Path, capsys: Any) -> None:
    """``--compare mian``: refused before anything runs, naming the baselines there and the one it meant."""
    baselines = user_repo / '.compatshim' / 'benchmarks'
    baselines.mkdir(parents=True)
    (baselines / 'main.json').write_text((RECORDED / 'main.json').read_text())
    code, out, err = _bench(capsys, '--compare', 'mian')
    lines = err.strip().splitlines()
    assert code == 2 and out == '' and len(lines) == 1, err
    assert "no baseline 'mian' in .compatshim/benchmarks, which holds main: did you mean --compare main?" in lines[0]


def test_the_pytest_fixture_holds_the_gate_beside_the_users_tests(user_repo: Path, pytester: pytest.Pytester) -> None:
    """A user's test with ``compatshim_bench`` against the baseline the command line saved (at its own size, not
    quick: the fixture measures at the baseline's size): an unchanged pipeline passes and saves, a float32 collate fails
    the test naming the bytes."""
    pytester.makepyfile(
        test_gate=f"""
        def test_pipeline(compatshim_bench):
            result = compatshim_bench('{SPEC}', compare='main', save='main')
            assert result.legs['ceiling'].placement == 'no transform'
        """
    )
    pytester.chdir()
    (pytester.path / 'uint8_pipeline.py').write_text((PIPELINES / 'uint8_pipeline.py').read_text())
    pytester.syspathinsert(pytester.path)
    assert _cli.main(['bench', '--pipeline', SPEC, '--steps', '2', '--rounds', '3', '--save', 'main']) == 0
    assert pytester.runpytest('-p', 'no:cacheprovider', '-q').ret == 0  # compares at the baseline's size: unchanged
    with pytest.MonkeyPatch.context() as environ:
        environ.setenv('PIPELINE_FLOAT32', '1')
        failed = pytester.runpytest('-p', 'no:cacheprovider', '-q')
    assert failed.ret == 1
    assert 'bytes per step' in failed.stdout.str() and 'worsened' in failed.stdout.str()
    assert 'During handling' not in failed.stdout.str()


def test_a_baseline_whose_size_is_not_one_is_refused_in_one_line(user_repo: Path) -> None:
    """The fixture measures at its baseline's size: a baseline whose size cannot be one is refused, not a traceback."""
    from compatshim.bench import pipeline

    baselines = user_repo / '.compatshim' / 'benchmarks'
    baselines.mkdir(parents=True)
    saved = _recorded('main')
    saved.fingerprint['size'] = {'name': 'default', 'steps': 0, 'rounds': 8}
    (baselines / 'main.json').write_text(json.dumps(saved.to_json()))
    with pytest.raises(ValueError, match=r'main.json cannot be used: its size is not one \(ValueError: steps must be'):
        pipeline.gate_pipeline(SPEC, baselines=pipeline.Baselines(compare='main'))


def test_the_shared_source_starts_an_iterable_dataset_over() -> None:
    """Every leg draws from one iterator over the user's loader, started over when it runs out; a streaming loader
    (an ``IterableDataset``: its iterator has no length) is no exception."""
    import torch

    from compatshim.bench.engine import Source

    class Stream(torch.utils.data.IterableDataset):  # type: ignore[type-arg]
        def __iter__(self) -> Any:
            return iter([torch.zeros(2), torch.ones(2)])

    source = Source(torch.utils.data.DataLoader(Stream(), batch_size=None))
    assert [float(source.next()[0]) for _ in range(5)] == [0.0, 1.0, 0.0, 1.0, 0.0]


RECORDED = Path(__file__).resolve().parents[1] / 'data' / 'pipeline'


def _recorded(name: str) -> Any:
    from compatshim.bench.results import PipelineResult

    return PipelineResult.from_json(json.loads((RECORDED / f'{name}.json').read_text()))


def test_the_verdicts_are_the_tables_figures_and_say_when_they_cannot_tell() -> None:
    """On a real default-size run (0.32.1): each factor is the median of the two legs' per-round ratios, printed with
    the range it came from (docs/pipeline.md; the rule row by row: tests/unit/test_verdicts.py);
    a slowdown is said as one; a leg whose rounds scatter gives "cannot tell" and no factor in words, and is marked
    unstable in the table; every transform's share of a step is at most 100%."""
    import copy
    import statistics

    from compatshim.bench import pipeline

    result = _recorded('main')
    said = pipeline.verdicts(result)
    rounds = zip(result.step_ms('native-batch'), result.step_ms('shim-batch'))
    factor = statistics.median(slow / fast for slow, fast in rounds)
    line = next(v for v in said if v.startswith('against the workaround batch_transforms=fn'))
    assert f'as fast as the workaround (x{factor:.2f}; the median of 8 rounds, per round x' in line, line
    assert all(0 <= (leg.transform_share or 0) <= 1 for leg in result.legs.values())
    slower = copy.deepcopy(result)
    slower.legs['shim-batch'].round_s = [s * 3 for s in result.legs['shim-batch'].round_s]
    line = next(v for v in pipeline.verdicts(slower) if v.startswith('against the workaround'))
    assert f'x{3 / factor:.2f} slower than the workaround (the median of 8 rounds, per round x' in line, line
    assert 'faster' not in line, line
    busy = copy.deepcopy(result)
    busy.legs['shim-batch'].round_s = [s * (8 if i % 2 else 1) for i, s in enumerate(result.legs['shim-batch'].round_s)]
    lines = pipeline.verdicts(busy)
    assert any(v.startswith('the shim against batch_transforms: cannot tell — x') for v in lines), lines
    assert any(v.startswith('stage batch vs microbatch: cannot tell — x') for v in lines), lines
    assert not any('faster' in v or 'slower' in v for v in lines if 'the shim' in v or 'stage batch' in v), lines
    assert '(unstable)' in pipeline.pipeline_text(busy).split('shim-batch ', 1)[1].splitlines()[0]


def test_a_compare_across_an_upgrade_judges_what_ran_on_both_and_the_shims_legs() -> None:
    """A baseline saved on a 0.25-0.26 release (unpatched on the host, no native transforms) compared with a run on
    0.29+ (unpatched rejected, native legs new): what the release does in Composer's own legs is said once, not
    judged, and with the shim working nothing worsened (exit 0); the same upgrade with the shim's legs off the device
    exits 1 naming placement. (The same on the real releases: tests/release/test_upgrade.py.)"""
    import copy

    from compatshim.bench.results import Cause, LegResult, Missing

    now = _recorded('main')
    before = copy.deepcopy(now)
    before.fingerprint['composer'] = '0.26.1'
    before.legs['unpatched'] = copy.deepcopy(now.legs['shim-batch'])
    before.legs['unpatched'].placement, before.legs['unpatched'].description = 'host', 'device_transforms=fn, no shim'
    before.legs['unpatched'].h2d_bytes_per_step *= 4
    for leg in ('native-batch', 'native-microbatch'):
        before.legs[leg] = LegResult('', Missing(Cause.NOT_HERE, 'batch_transforms exists from Composer 0.27.0'))
    code, lines = gate.compare(now, before, 'main')
    assert code == 0, lines
    assert any(line.startswith(f'RELEASE {now.pipeline} native-batch') for line in lines), lines
    assert any(line.startswith(f'RELEASE {now.pipeline} unpatched') and 'TypeError' in line for line in lines), lines
    assert not any(line.startswith(('NEW', 'GONE', 'IMPROVED')) for line in lines), lines
    assert lines[-1].endswith('nothing worsened')
    off = copy.deepcopy(now)
    for leg in ('shim-batch', 'shim-microbatch'):
        off.legs[leg].placement = 'host'
    code, lines = gate.compare(off, before, 'main')
    assert code == 1 and any(f'REGRESSION {now.pipeline} shim-batch: placement' in line for line in lines), lines


def test_a_baseline_that_is_not_comparable_is_refused_before_anything_is_measured(user_repo: Path, capsys: Any) -> None:
    """A baseline of another size (here: the default size, compared with --quick): exit 2, one line naming what differs,
    before any leg runs, nothing written (no --json file, the baseline untouched)."""
    baselines = user_repo / '.compatshim' / 'benchmarks'
    baselines.mkdir(parents=True)
    saved = _recorded('main')
    saved.fingerprint['pipeline'] = SPEC
    (baselines / 'main.json').write_text(json.dumps(saved.to_json()))
    before = {p: p.read_bytes() for p in user_repo.rglob('*') if p.is_file()}
    code, out, err = _bench(capsys, '--quick', '--compare', 'main', '--json', 'result.json')
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "the baseline 'main' is not comparable: size" in lines[0], err
    assert 'round' not in err and out == ''
    assert {p: p.read_bytes() for p in user_repo.rglob('*') if p.is_file() and '__pycache__' not in p.parts} == {
        p: b for p, b in before.items() if '__pycache__' not in p.parts
    }
    code, _, err = _bench(capsys, '--steps', '5', '--compare', 'main')  # the same size name: what differs is said
    assert code == 2 and 'size default (steps 20) in the baseline, default (steps 5) now' in err, err
