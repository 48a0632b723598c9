"""``python -m hmp.train`` refuses a flag given where it does nothing (the rules of
``hmp.run.settings.ACTS_ONLY``, tested there: tests/run/test_settings_flags.py) as the
flags it refused before: one line on stderr, exit 2, nothing written."""

from cli_batch import run_batch

REFUSED = {
    "--cluster_timeout=30": "--cluster_timeout=30.0: only with --cluster or --local_workers, "
                            "whose workers it waits for; this run has no workers",
    "--port_base=9000 --cluster=127.0.0.1:2222": (
        "--port_base=9000: only with --cluster=slurm, whose tasks listen from it; "
        "--cluster=127.0.0.1:2222 names its workers' ports"),
    "--rebalance_threshold=0.3": "--rebalance_threshold=0.3: only with --rebalance=epoch, "
                                 "whose re-planning it steers; --rebalance=off does not "
                                 "re-plan",
    "--val_fraction=0 --patience=5": (
        "--patience=5: only with a validation share (--val_fraction > 0): it stops after "
        "epochs without a better validation accuracy; --val_fraction=0 holds none out"),
    "--val_fraction=0 --val_split=spatial": (
        "--val_split=spatial: only with a validation share (--val_fraction > 0), which it "
        "holds out; --val_fraction=0 holds none out"),
    "--noaugment --spectral_shift=2": "--spectral_shift=2: only with --augment, which draws "
                                      "the field look; --noaugment draws none",
    "--resume --overwrite --model_dir=no/such/run": (
        "--resume, --overwrite: give one of them (continue the run in --model_dir, or "
        "delete it and start over)"),
}


def test_a_flag_given_where_it_does_nothing_gives_one_line_and_writes_nothing(tmp_path):
    runs = run_batch("hmp.train", [{"args": flags.split(), "cwd": str(tmp_path)}
                                   for flags in REFUSED])
    for (flags, message), run in zip(REFUSED.items(), runs):
        assert (run.returncode, run.stderr) == (2, "hmp.train: error: %s\n" % message), flags
    assert list(tmp_path.iterdir()) == []
