"""scripts/bench_rebalance.py: the hmp.train command of its runs and the flags it refuses (the
runs themselves take minutes; docs/benchmarks.md, "Dynamic load")."""

import sys

import pytest
from absl import flags
from absl.testing import flagsaver

from script_modules import import_script

bench = import_script("bench_rebalance")


def test_both_runs_train_with_the_batch_norm_asked_for():
    for given, mode in (([], "sync"), (["--batch_norm=local"], "local")):
        with flagsaver.flagsaver():
            flags.FLAGS(["bench_rebalance", "--epochs=6", *given])
            command = bench.train_command("cnn2d", "127.0.0.1:1,127.0.0.1:2", "epoch", "/r")
        assert command == [
            sys.executable, "-m", "hmp.train", "--cluster=127.0.0.1:1,127.0.0.1:2",
            "--model=cnn2d", "--batch_size=256", "--epochs=6", "--train_fraction=0.6",
            "--mesh=batch:2", "--notry_alone", "--notta", "--rebalance=epoch",
            "--batch_norm=" + mode, "--steps_per_run=1", "--model_dir=/r/epoch"]


def test_bench_hetero_flags_it_does_not_use_are_refused_in_one_line():
    with flagsaver.flagsaver():
        flags.FLAGS(["bench_rebalance", "--width=4", "--repeats=2", "--steps_per_run=2"])
        with pytest.raises(bench.cli.UsageError) as refused:
            bench.main(["bench_rebalance"])
    assert str(refused.value) == ("--width, --repeats: bench_hetero.py's, not used here "
                                  "(hmp.train trains the model at its default width)")
