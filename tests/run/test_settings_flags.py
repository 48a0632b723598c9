"""Flags that act only beside other settings (``hmp.run.settings.ACTS_ONLY``): chosen where
they would do nothing, refused in one line naming the flag, its value and what it needs,
before anything is written; left at their defaults, or on --resume when the run's
flags.txt names them, never."""

import pytest

import hmp
from hmp import cli
from hmp.run import run_files
from hmp.run.resume import check_resumed_flags
from hmp.run.settings import ACTS_ONLY, DEFAULT, Settings
from models import get_model

# both named, not only --resume's missing folder (read first, before)
RESUME_AND_OVERWRITE = (
    {"resume": True, "overwrite": True, "model_dir": "no/such/run"},
    "--resume, --overwrite: give one of them (continue the run in --model_dir, or delete it "
    "and start over)")
REFUSED = [
    ({"cluster_timeout": 30.0}, "--cluster_timeout=30.0: only with --cluster or "
                                "--local_workers, whose workers it waits for; this run has "
                                "no workers"),
    ({"port_base": 9000}, "--port_base=9000: only with --cluster=slurm, whose tasks listen "
                          "from it; this run has no workers"),
    ({"port_base": 9000, "cluster": "127.0.0.1:2222"},
     "--port_base=9000: only with --cluster=slurm, whose tasks listen from it; "
     "--cluster=127.0.0.1:2222 names its workers' ports"),
    ({"port_base": 9000, "local_workers": "0:1"},
     "--port_base=9000: only with --cluster=slurm, whose tasks listen from it; "
     "--local_workers starts its workers on free ports"),
    ({"rebalance_threshold": 0.3}, "--rebalance_threshold=0.3: only with --rebalance=epoch, "
                                   "whose re-planning it steers; --rebalance=off does not "
                                   "re-plan"),
    ({"try_alone": False, "mesh": "batch:2"},
     "--notry_alone: only with --mesh=auto, whose plan it races against the fastest device "
     "alone; --mesh=batch:2 is the layout given"),
    ({"patience": 5, "val_fraction": 0.0},
     "--patience=5: only with a validation share (--val_fraction > 0): it stops after "
     "epochs without a better validation accuracy; --val_fraction=0 holds none out"),
    # at its default value too: given, it is the user's choice that does nothing
    ({"val_split": "random", "val_fraction": 0.0},
     "--val_split=random: only with a validation share (--val_fraction > 0), which it "
     "holds out; --val_fraction=0 holds none out"),
    ({"spectral_shift": "2", "augment": False},
     "--spectral_shift=2: only with --augment, which draws the field look; --noaugment "
     "draws none"),
    ({"spectral_gain": 0.2, "augment": False},
     "--spectral_gain=0.2: only with --augment, which draws the field look; --noaugment "
     "draws none"),
    ({"brightness": 0.2, "augment": False},
     "--brightness=0.2: only with --augment, which draws each patch's brightness factor; "
     "--noaugment draws none"),
    ({"noise": 0.1, "augment": False},
     "--noise=0.1: only with --augment, which draws each patch's noise; --noaugment draws "
     "none"),
    RESUME_AND_OVERWRITE,
    # the rule that was there first, now one of the table's
    ({"data_dir": "/tmp"}, "--data_dir=/tmp: only for a benchmark scene or a "
                           "--synthetic_layout of one; --dataset=synthetic "
                           "(--synthetic_layout=generated) reads no file from it"),
]


@pytest.mark.parametrize("values, message", REFUSED)
def test_a_flag_given_where_it_does_nothing_is_refused_naming_what_it_needs(values, message):
    with pytest.raises(cli.UsageError) as refused:
        Settings.of(**values).check(get_model)
    assert str(refused.value) == message


@pytest.mark.parametrize("values, message", REFUSED[::3] + [RESUME_AND_OVERWRITE])
def test_hmp_fit_refuses_them_before_anything_is_written(values, message, tmp_path,
                                                         monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(cli.UsageError) as refused:
        hmp.fit(Settings.of(**values), get_model)
    assert str(refused.value) == message
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("values", [
    {"cluster_timeout": 30.0, "cluster": "127.0.0.1:2222,127.0.0.1:2223"},
    {"cluster_timeout": 30.0, "cluster": "tf_config"},
    {"cluster_timeout": 30.0, "local_workers": "0:1"},
    {"port_base": 9000, "cluster": "slurm", "cluster_timeout": 30.0},
    {"rebalance_threshold": 0.3, "rebalance": "epoch"},
    {"patience": 5, "val_fraction": 0.2, "val_split": "spatial"},
    {"spectral_shift": "2", "spectral_gain": "0.2"},   # --augment is on by default
    {"augment": True, "brightness": 0.2, "noise": 0.1},
    {"val_fraction": 0.0},   # --patience, --val_split at their defaults: not chosen
    # at --smoothing=1 it says how hmp.predict --smoothing=N smooths the run's maps
    {"smoothing": "1", "smoothing_guide": False},
])
def test_the_same_flags_beside_what_they_need_or_at_their_defaults_pass(values):
    Settings.of(**values).check(get_model)


@pytest.mark.parametrize("values, message", REFUSED[:-2])
def test_a_resumed_run_goes_on_with_its_flags_txt_and_refuses_such_a_flag_given_anew(
        values, message, tmp_path):
    """A run whose flags.txt has such a flag (accepted before) resumes with it; one given
    on the resuming command line alone is refused as a new run refuses it."""
    resumed = Settings.of(resume=True, **values)
    resumed.check(get_model)   # flags.txt is read with the run's folder
    refused_line = message.split(": ")[0]   # as flags.txt writes it
    others = resumed.flag_lines()
    assert refused_line in others
    (tmp_path / run_files.FLAGS_FILE).write_text("\n".join(others) + "\n")
    check_resumed_flags(str(tmp_path), resumed, get_model)   # all of them were in its flags.txt
    (tmp_path / run_files.FLAGS_FILE).write_text("\n".join(   # the flag, with another value
        line + "0" if line == refused_line else line for line in others) + "\n")
    with pytest.raises(cli.UsageError) as refused:
        check_resumed_flags(str(tmp_path), resumed, get_model)
    assert str(refused.value) == message
    (tmp_path / run_files.FLAGS_FILE).write_text("\n".join(
        line for line in others if line != refused_line) + "\n")
    with pytest.raises(cli.UsageError) as refused:
        check_resumed_flags(str(tmp_path), resumed, get_model)
    assert str(refused.value) == message
    (tmp_path / run_files.FLAGS_FILE).unlink()   # a run from before flags.txt: goes on
    check_resumed_flags(str(tmp_path), resumed, get_model)


def test_the_defaults_trigger_none_of_them():
    """hmp.train with no flags: none of the table's flags is chosen, though the cluster
    flags, --data_dir and --rebalance_threshold do nothing there."""
    assert not any(DEFAULT.chosen(name) for name in ACTS_ONLY)
    assert not any(acts(DEFAULT) for name, (acts, _) in ACTS_ONLY.items()
                   if name in ("data_dir", "cluster_timeout", "port_base",
                               "rebalance_threshold"))
    DEFAULT.check(get_model)


def test_a_resumed_run_refuses_a_flag_its_plan_gives_when_given_anew(tmp_path):
    """--plan gives the devices: --devices beside it is refused in a new run, and on
    --resume when its flags.txt does not hold it with that value."""
    given = {"plan": "p.json", "devices": "/cpu:0,/cpu:1"}
    with pytest.raises(cli.UsageError) as new_run:
        Settings.of(**given).check(get_model)
    assert str(new_run.value).startswith("--devices=/cpu:0,/cpu:1: --plan=p.json gives ")
    resumed = Settings.of(resume=True, **given)
    resumed.check(get_model)   # flags.txt is read with the run's folder
    flags_txt = tmp_path / run_files.FLAGS_FILE
    # (--batch_norm: written by every run since it changed default, resume.check_resumed_flags)
    for lines in (["--batch_norm=local", "--plan=p.json"],
                  ["--batch_norm=local", "--plan=p.json", "--devices=/cpu:0"]):
        flags_txt.write_text("\n".join(lines) + "\n")
        with pytest.raises(cli.UsageError) as refused:
            check_resumed_flags(str(tmp_path), resumed, get_model)
        assert str(refused.value) == str(new_run.value)
    flags_txt.write_text("--batch_norm=local\n--plan=p.json\n--devices=/cpu:0,/cpu:1\n")
    check_resumed_flags(str(tmp_path), resumed, get_model)


@pytest.mark.parametrize("values, message", [
    ({"model": "cnn3d", "pca_in_graph": True},
     "--pca_in_graph: only for a model on PCA components; --model=cnn3d keeps all bands "
     "(give --pca=N for N components)"),
    ({"pca": 0, "pca_in_graph": False},
     "--nopca_in_graph: only for a model on PCA components; --pca=0 keeps all bands")])
def test_pca_in_graph_chosen_for_a_run_on_all_bands_is_refused(values, message, tmp_path):
    """--pca_in_graph (on or off) does nothing for a run on all bands: chosen there, it is
    refused naming what keeps them; at its default, for a model on PCA components, or on
    --resume when the run's flags.txt has it, it passes; given anew on --resume, it is
    refused as in a new run."""
    with pytest.raises(cli.UsageError) as refused:
        Settings.of(**values).check(get_model)
    assert str(refused.value) == message
    resumed = Settings.of(resume=True, **values)
    resumed.check(get_model)   # flags.txt is read with the run's folder
    lines = resumed.flag_lines()
    flags_txt = tmp_path / run_files.FLAGS_FILE
    flags_txt.write_text("\n".join(lines) + "\n")
    check_resumed_flags(str(tmp_path), resumed, get_model)
    flags_txt.write_text("\n".join(x for x in lines if "pca_in_graph" not in x) + "\n")
    with pytest.raises(cli.UsageError) as refused:
        check_resumed_flags(str(tmp_path), resumed, get_model)
    assert str(refused.value) == message
    Settings.of(model=values.get("model", "hybridsn"), pca=values.get("pca")).check(get_model)
    Settings.of(pca_in_graph=False).check(get_model)   # hybridsn: 45 components
    Settings.of(model="cnn3d", pca=30, pca_in_graph=True).check(get_model)


def test_a_flag_given_as_none_is_no_flag_given():
    """A setting given as None from Python (e.g. ``data_dir=os.environ.get(...)``) is the
    flag's absence, as flags.txt writes it: not refused where it would not act."""
    Settings.of(data_dir=None).check(get_model)


def test_a_resumed_flag_is_matched_with_its_flags_txt_line_as_written(tmp_path):
    """flags.txt names a boolean as --name or --noname, and a float flag given from Python
    as a whole number as the float its resumed run reads: such a flag resumed as written
    is not given anew; left out of flags.txt, it is, and refused naming it so."""
    flags_txt = tmp_path / run_files.FLAGS_FILE
    for first, resumed, line in (
            ({"try_alone": False, "mesh": "batch:2"}, {"try_alone": False}, "--notry_alone"),
            ({"try_alone": True, "mesh": "batch:2"}, {"try_alone": True}, "--try_alone"),
            ({"cluster_timeout": 30}, {"cluster_timeout": 30.0}, "--cluster_timeout=30.0")):
        lines = Settings.of(**first).flag_lines()
        assert line in lines
        resuming = Settings.of(resume=True, **{**first, **resumed})
        flags_txt.write_text("\n".join(lines) + "\n")
        check_resumed_flags(str(tmp_path), resuming, get_model)
        flags_txt.write_text("\n".join(x for x in lines if x != line) + "\n")
        with pytest.raises(cli.UsageError) as refused:
            check_resumed_flags(str(tmp_path), resuming, get_model)
        assert str(refused.value).startswith(line + ": only with ")
