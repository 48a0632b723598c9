"""scripts/bench_predict_memory.py's flags: refused in one line before anything is written."""

from cli_batch import run_batch


def test_a_memory_below_one_mb_is_refused_before_the_training_run(tmp_path):
    work = tmp_path / "work"
    (run,) = run_batch("scripts/bench_predict_memory.py",
                       [{"args": ["--memory_mb=256,0", "--size=50", "--work_dir=%s" % work]}])
    assert (run.returncode, run.stdout) == (2, "")
    assert run.stderr == ("bench_predict_memory: error: --memory_mb=256,0: give whole "
                          "numbers >= 1\n")
    assert not work.exists()
