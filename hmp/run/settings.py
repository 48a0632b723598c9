"""What a training run is asked to do: one frozen value, grouped by what it decides.

``python -m hmp.train`` builds a :class:`Settings` once from its flags
(``hmp.train.settings_from_flags``); Python code builds one directly, e.g.
``Settings.of(model="cnn2d", epochs=5)`` (keywords: hmp.train's flag names) or
``Settings(data=..., recipe=RecipeSettings(epochs=5))``, and hands it to
``hmp.fit``. The defaults here are the flags' defaults (the flags take them
from here). :meth:`Settings.check` refuses values with the one-line messages
of the command line (naming the flag), as :class:`hmp.cli.UsageError`, an
:class:`hmp.errors.InvalidInput`.

Loads no TensorFlow: the data side is :class:`hmp.run.experiment.DataConfig`;
the checks that need TensorFlow's names (optimizers, schedules, batch statistics)
import them when they run.
"""

import dataclasses
import numbers
import os

from hmp import cli
from hmp.cluster.addresses import (DEFAULT_PORT_BASE, DEFAULT_TIMEOUT_S, SLURM, check_port,
                                   check_timeout)
from hmp.data import check_patch_size, is_cube_file
from hmp.data.loaders import SYNTHETIC, check_scene_name
from hmp.data.splits import check_train_fraction
from hmp.data.synthetic import GENERATED_LAYOUT, KINDS, LAYOUTS
from hmp.errors import InvalidInput, number_in_text, whole_number
from hmp.evaluation.smoothing import DEFAULT_WINDOW, check_window
from hmp.graph.graph_config import PRECISIONS, check_model
from hmp.planning import parse_mesh
from hmp.run.experiment import BRIGHTNESS_NORMS, SPLITS, VAL_SPLITS, DataConfig
from hmp.run.progress import DEFAULT_LOG_EVERY_S
from hmp.run.rebalance import DEFAULT_THRESHOLD
from hmp.run.training_recipe import CLASS_BALANCING

AUTO = "auto"   # --spectral_shift, --spectral_gain measured; --smoothing chosen


@dataclasses.dataclass(frozen=True)
class ModelSettings:
    """The model (``name``: one of the application's registry, ``models``, or a module
    path) and how it computes."""

    name: str = "hybridsn"
    width: int = 0   # filters of its first layer; 0: the model's default
    # hmp.layers.BATCH_STATISTICS: each batch replica's own (the layers' default, "sync",
    # is exact under any split, at two barriers a layer; docs/benchmarks.md)
    batch_norm: str = "local"
    precision: str = "float32"   # hmp.graph.graph_config.PRECISIONS


@dataclasses.dataclass(frozen=True)
class RecipeSettings:
    """How the model is trained and scored: batch, epochs, optimizer, schedule,
    augmentation, loss weights, test-time augmentation."""

    batch_size: int = 32
    epochs: int = 60
    # at most this many steps (0: no limit): a scene of many training pixels trains
    # fewer epochs (``epochs_within``)
    max_steps: int = 4000
    optimizer: str = "adam"
    learning_rate: float = 1e-3
    patience: int = 15
    schedule: str = "cosine"
    warmup_epochs: float = 1.0
    weight_decay: float = None   # None: the optimizer's default
    augment: bool = True
    brightness: float = 0.1
    noise: float = 0.0
    spectral_shift: str = AUTO   # a number as text, or auto
    spectral_gain: str = AUTO
    pca_in_graph: bool = True
    tta: bool = False
    smoothing: str = str(DEFAULT_WINDOW)   # a window side (1: none), or auto
    smoothing_guide: bool = True   # the guided filter (False: the window's mean)
    class_balanced: str = "sqrt"   # hmp.run.training_recipe.CLASS_BALANCING
    # the network's weight fused with the spectral prior (hmp.evaluation.spectral_prior);
    # 1: the network alone
    spectral_prior: float = 1.0

    def epochs_within(self, steps_per_epoch):
        """The epochs a run of ``steps_per_epoch`` steps an epoch trains: ``epochs``, or
        fewer when ``max_steps`` (0: no limit) allows fewer whole epochs (at least one).
        The learning-rate schedule, early stopping and re-planning count these."""
        if not self.max_steps:
            return self.epochs
        return min(self.epochs, max(1, self.max_steps // steps_per_epoch))


@dataclasses.dataclass(frozen=True)
class PlacementSettings:
    """Where the run trains: devices, their speeds, the mesh or plan, memory, workers,
    and re-planning while it trains."""

    devices: str = None   # comma-separated; None: this machine's (or the cluster's)
    speeds: str = "auto"
    mesh: str = "auto"
    plan: str = None   # a plan JSON file
    rebalance: str = "off"
    try_alone: bool = True
    rebalance_threshold: float = DEFAULT_THRESHOLD
    # training steps per session.run (hmp.graph.graph.TrainingGraph.steps_per_run)
    steps_per_run: int = 1
    cluster: str = None
    cluster_timeout: float = DEFAULT_TIMEOUT_S
    local_workers: str = None
    port_base: int = DEFAULT_PORT_BASE
    memory_caps: str = ""
    deterministic: bool = False
    simulate_slowdown: str = ""


@dataclasses.dataclass(frozen=True)
class RunFolderSettings:
    """Where the run writes, whether it continues or replaces a run there, how often
    it checkpoints and logs, and how many seeds it trains."""

    model_dir: str = None   # None: runs/<dataset>-<model>
    resume: bool = False
    overwrite: bool = False
    checkpoint_every: int = 0
    runs: int = 1
    log_every: float = DEFAULT_LOG_EVERY_S


# {group: {field: its type}} of Settings' groups (Settings._check_types)
_FIELD_TYPES = {group: {field.name: field.type for field in dataclasses.fields(kind)}
                for group, kind in (("data", DataConfig), ("model", ModelSettings),
                                    ("recipe", RecipeSettings),
                                    ("placement", PlacementSettings),
                                    ("folder", RunFolderSettings))}

# The settings held as text that also take a number from Python (e.g. spectral_shift=2).
_TEXT_OR_NUMBER = ("spectral_shift", "spectral_gain", "smoothing")

# hmp.train's data defaults: the model's own --pca (None), a tenth to validate.
TRAIN_DATA = DataConfig(pca=None, val_fraction=0.1)

# The flags whose settings a --plan file gives: {flag: what the plan gives}.
PLAN_GIVES = {"devices": "the devices", "speeds": "the speeds", "mesh": "the mesh",
              "memory_caps": "the memory caps (scripts/plan_layout.py --memory_caps)"}

# The flags that act only beside other settings: {flag: (whether it acts, of the
# settings; the rest of its refusal where it does not: what it needs, then what the
# settings given do instead)}. Chosen where it does not act (given, even at its default),
# a flag is refused in one line, "--flag=value: only ...; ..." (a boolean "--flag" or
# "--noflag"), before anything is written (Settings._check_acting). On --resume, a run
# whose flags.txt has it with that value (accepted before) goes on ignoring it
# (Settings.check_resumed_acting). (--smoothing_guide is not here: at --smoothing=1 it
# is what hmp.predict --smoothing=N smooths the run's maps by.)
ACTS_ONLY = {
    "data_dir": (
        lambda s: "data_dir" in s.scene_flags(),
        lambda s: "only for a benchmark scene or a --synthetic_layout of one; --dataset=%s%s "
                  "reads no file from it" % (s.data.dataset, "" if s.data.dataset != SYNTHETIC
                                             else " (--synthetic_layout=%s)" % GENERATED_LAYOUT)),
    "cluster_timeout": (
        lambda s: s.placement.cluster is not None or s.placement.local_workers is not None,
        lambda s: "only with --cluster or --local_workers, whose workers it waits for; this "
                  "run has no workers"),
    "port_base": (
        lambda s: s.placement.cluster == SLURM,
        lambda s: "only with --cluster=slurm, whose tasks listen from it; %s" % (
            "--cluster=%s names its workers' ports" % s.placement.cluster
            if s.placement.cluster is not None else
            "--local_workers starts its workers on free ports"
            if s.placement.local_workers is not None else "this run has no workers")),
    "rebalance_threshold": (
        lambda s: s.placement.rebalance == "epoch",
        lambda s: "only with --rebalance=epoch, whose re-planning it steers; --rebalance=%s "
                  "does not re-plan" % s.placement.rebalance),
    "try_alone": (
        lambda s: s.placement.mesh == AUTO,
        lambda s: "only with --mesh=auto, whose plan it races against the fastest device "
                  "alone; --mesh=%s is the layout given" % s.placement.mesh),
    "patience": (
        lambda s: s.data.val_fraction > 0,
        lambda s: "only with a validation share (--val_fraction > 0): it stops after epochs "
                  "without a better validation accuracy; --val_fraction=%g holds none out"
                  % s.data.val_fraction),
    "val_split": (
        lambda s: s.data.val_fraction > 0,
        lambda s: "only with a validation share (--val_fraction > 0), which it holds out; "
                  "--val_fraction=%g holds none out" % s.data.val_fraction),
    **{name: (lambda s: s.recipe.augment,
              lambda s, drawn=drawn: "only with --augment, which draws %s; --noaugment "
                                     "draws none" % drawn)
       for name, drawn in (("spectral_shift", "the field look"),
                           ("spectral_gain", "the field look"),
                           ("brightness", "each patch's brightness factor"),
                           ("noise", "each patch's noise"))},
}
SCENE_ACTING = ("data_dir",)   # checked with the scene (check_data: scripts/baselines.py too)

def check_resume_or_overwrite(resume, overwrite):
    """UsageError naming both when a run is to be continued and started over."""
    if resume and overwrite:
        raise cli.UsageError("--resume, --overwrite: give one of them (continue the run in "
                             "--model_dir, or delete it and start over)")


# Flags flags.txt names even at their default: --batch_norm's was sync until 854505f, so a
# flags.txt without it is a run that trained with sync statistics
# (``hmp.run.resume.check_resumed_flags``).
ALWAYS_WRITTEN = ("batch_norm",)
BATCH_NORM_BEFORE = "sync"

# Every flag of hmp.train (in results.json's order): (group, field).
FLAG_FIELDS = {
    "model": ("model", "name"), "width": ("model", "width"),
    "batch_norm": ("model", "batch_norm"), "precision": ("model", "precision"),
    "devices": ("placement", "devices"), "speeds": ("placement", "speeds"),
    "mesh": ("placement", "mesh"), "plan": ("placement", "plan"),
    **{name: ("recipe", name) for name in ("batch_size", "epochs", "max_steps", "optimizer",
                                           "learning_rate")},
    "runs": ("folder", "runs"), "val_fraction": ("data", "val_fraction"),
    "val_split": ("data", "val_split"), "brightness_norm": ("data", "brightness_norm"),
    **{name: ("recipe", name) for name in (
        "patience", "schedule", "warmup_epochs", "weight_decay", "augment", "brightness",
        "noise", "spectral_shift", "spectral_gain", "pca_in_graph", "tta",
        "smoothing", "smoothing_guide", "class_balanced", "spectral_prior")},
    **{name: ("folder", name) for name in ("model_dir", "resume", "overwrite",
                                           "checkpoint_every")},
    **{name: ("placement", name) for name in (
        "rebalance", "try_alone", "rebalance_threshold", "steps_per_run", "cluster",
        "cluster_timeout",
        "local_workers", "port_base")},
    "log_every": ("folder", "log_every"),
    **{name: ("placement", name) for name in ("memory_caps", "deterministic",
                                              "simulate_slowdown")},
    # the scene and split (hmp.scene_flags)
    "dataset": ("data", "dataset"), "labels": ("data", "labels_path"),
    **{name: ("data", name) for name in (
        "cube_key", "labels_key", "data_dir", "synthetic_layout", "synthetic_kind",
        "train_fraction", "train_per_class", "split", "train_set", "test_set",
        "patch_size", "pca", "seed")},
}


@dataclasses.dataclass(frozen=True)
class Settings:
    """Everything a run of ``hmp.train`` is asked: data (the scene, split, patches and
    the first seed), model, recipe, placement and run folder.

    ``given``: the flags named explicitly (the command line's, or
    :meth:`of`'s keywords). A setting counts as chosen when given or not at
    its default (:meth:`chosen`): e.g. ``--synthetic_layout`` given for a
    scene file is refused even at its default value, and ``flags.txt`` lists
    the chosen flags.
    """

    data: DataConfig = TRAIN_DATA
    model: ModelSettings = ModelSettings()
    recipe: RecipeSettings = RecipeSettings()
    placement: PlacementSettings = PlacementSettings()
    folder: RunFolderSettings = RunFolderSettings()
    given: frozenset = frozenset()

    @classmethod
    def of(cls, **values):
        """The default settings with ``values`` (hmp.train's flag names, e.g.
        ``epochs=5``) set and given."""
        return cls().replace(**values)

    def replace(self, **values):
        """These settings with ``values`` (flag names) set and given."""
        return self._with(values, self.given | set(values))

    def without(self, *names):
        """These settings with flags ``names`` at their defaults and not given, as if left
        off the command line (e.g. ``devices`` before a ``plan`` is given)."""
        _known(names)
        return self._with({name: DEFAULT.value(name) for name in names},
                          self.given - set(names))

    def _with(self, values, given):
        """These settings with ``values`` (flag names) set, and ``given`` as given; a numpy
        number as the Python number it is (``np.int64(32)``: 32), as the flag holds it."""
        _known(values)
        groups = {}
        for name, value in values.items():
            group, field = FLAG_FIELDS[name]
            groups.setdefault(group, {})[field] = _plain(value)
        return dataclasses.replace(self, given=frozenset(given), **{
            group: dataclasses.replace(getattr(self, group), **fields)
            for group, fields in groups.items()})

    def value(self, name):
        """Flag ``name``'s setting."""
        group, field = FLAG_FIELDS[name]
        return getattr(getattr(self, group), field)

    def flag_value(self, name):
        """Flag ``name``'s value as the flag holds it (--pca: 0 when the model's
        default applies)."""
        value = self.value(name)
        return DataConfig.pca if name == "pca" and value is None else value

    def flag_values(self):
        """{flag name: value as the flag holds it}, in results.json's order."""
        return {name: self.flag_value(name) for name in FLAG_FIELDS}

    def chosen(self, name):
        """Whether flag ``name`` was given, or is set to other than its default."""
        return name in self.given or self.value(name) != DEFAULT.value(name)

    def flag_lines(self):
        """``--name=value`` of every chosen flag but --resume and --overwrite, and of
        ``ALWAYS_WRITTEN`` (as absl serialises them): the lines of ``flags.txt`` that start
        the run again."""
        return [_serialise(name, self.value(name)) for name in FLAG_FIELDS
                if (self.chosen(name) or name in ALWAYS_WRITTEN)
                and name not in ("resume", "overwrite")
                and self.value(name) is not None]   # None given: the flag's absence

    def blame(self, *names, also=()):
        """:func:`hmp.cli.blame` naming these settings' values of the flags ``names`` (those
        of them the user chose, or all when none was)."""
        return cli.blame(*names, also=also, values=self.flag_values(),
                         chosen={name for name in names if self.chosen(name)})

    @property
    def model_dir(self):
        """--model_dir or its default (runs/<dataset>-<model>)."""
        return self.folder.model_dir or os.path.join("runs", "%s-%s" % (
            os.path.basename(self.data.dataset).split(".")[0], self.model.name))

    @property
    def seeds(self):
        """The seed of each run (--seed, --seed+1, ... : --runs of them)."""
        return [self.data.seed + i for i in range(self.folder.runs)]

    def check(self, get_model):
        """Raises a one-line :class:`hmp.cli.UsageError` (naming the flag, its value and
        what is allowed) for a value not allowed; ``get_model``: the application's
        model lookup (``models.get_model``)."""
        # imported here: these names load TensorFlow  # pylint: disable=import-outside-toplevel
        from hmp.layers import BATCH_STATISTICS
        from hmp.mesh.optimizers import OPTIMIZERS, SCHEDULES
        self._check_types()
        # before --resume's folder is read
        check_resume_or_overwrite(self.folder.resume, self.folder.overwrite)
        self.check_data()
        with self.blame("model"):
            check_model(get_model(self.model.name), self.model.name)
        self._check_pca_in_graph(get_model)
        for name, allowed in (("batch_norm", BATCH_STATISTICS), ("precision", PRECISIONS),
                              ("optimizer", OPTIMIZERS), ("class_balanced", CLASS_BALANCING),
                              ("schedule", SCHEDULES), ("val_split", VAL_SPLITS),
                              ("brightness_norm", BRIGHTNESS_NORMS)):
            if self.value(name) not in allowed:
                raise cli.UsageError("--%s=%s: choose one of %s"
                                     % (name, self.value(name), ", ".join(allowed)))
        self._check_plan()
        if self.placement.rebalance not in ("off", "epoch"):
            raise cli.UsageError("--rebalance=%s: choose off or epoch"
                                 % self.placement.rebalance)
        if self.placement.mesh != AUTO:
            with self.blame("mesh"):
                parse_mesh(self.placement.mesh)
        for name, minimum in (("batch_size", 1), ("epochs", 1), ("max_steps", 0), ("runs", 1),
                              ("width", 0), ("checkpoint_every", 0), ("steps_per_run", 1),
                              ("patience", 0)):
            with self.blame(name):
                whole_number(self.value(name), name, minimum=minimum)
        if not self.recipe.learning_rate > 0:
            raise cli.UsageError("--learning_rate=%g: must be positive"
                                 % self.recipe.learning_rate)
        if not 0 <= self.data.val_fraction < 1:
            raise cli.UsageError("--val_fraction=%g: must lie in [0, 1)"
                                 % self.data.val_fraction)
        for name in ("spectral_shift", "spectral_gain"):
            self.field_look_strength(name)
        self.smoothing_window()
        for name in ("warmup_epochs", "weight_decay", "brightness", "noise",
                     "rebalance_threshold", "log_every"):
            value = self.value(name)
            if value is not None and not value >= 0:   # nan too
                raise cli.UsageError("--%s=%g: must be a number >= 0" % (name, value))
        if self.recipe.brightness >= 1:
            raise cli.UsageError("--brightness=%g: must be below 1" % self.recipe.brightness)
        if not 0 <= self.recipe.spectral_prior <= 1:   # nan too
            raise cli.UsageError("--spectral_prior=%g: give a weight from 0 to 1 (1: the "
                                 "network alone)" % self.recipe.spectral_prior)
        with self.blame("cluster_timeout"):   # also when no cluster uses them, as any value
            check_timeout(self.placement.cluster_timeout)
        with self.blame("port_base"):
            check_port(self.placement.port_base)
        self._check_acting(tuple(name for name in ACTS_ONLY if name not in SCENE_ACTING))

    def _check_pca_in_graph(self, get_model, written=None):
        """--pca_in_graph (or --nopca_in_graph) chosen for a run on all bands, where it
        does nothing: refused naming what keeps them. On --resume only with ``written``
        (as ``_check_acting``)."""
        if self.folder.resume and written is None:
            return
        if self._chosen_anew("pca_in_graph", written) and not self.pca_components(get_model):
            raise cli.UsageError("%s: only for a model on PCA components; %s" % (
                _serialise("pca_in_graph", self.recipe.pca_in_graph),
                "--pca=0 keeps all bands" if self.chosen("pca") else
                "--model=%s keeps all bands (give --pca=N for N components)" % self.model.name))

    def pca_components(self, get_model):
        """--pca: as given, else the model's ``RECIPE`` value, else 0 (all bands);
        ``get_model``: the application's model lookup."""
        if self.data.pca is not None:
            return self.data.pca
        return model_recipe(get_model(self.model.name)).get("pca", DataConfig.pca)

    def _check_acting(self, names, written=None):
        """Each flag of ``names`` (of ``ACTS_ONLY``) chosen where it does not act: refused in
        one line naming it, its value and what it needs. On --resume only with
        ``written``, the lines of the run's flags.txt (:meth:`check_resumed_acting`)."""
        if self.folder.resume and written is None:
            return
        for name in names:
            acts, needs = ACTS_ONLY[name]
            if self._chosen_anew(name, written) and not acts(self):
                raise cli.UsageError("%s: %s" % (_serialise(name, self.flag_value(name)),
                                                 needs(self)))

    def _chosen_anew(self, name, written):
        """Whether flag ``name`` is chosen, and not as ``written`` (the lines of a resumed
        run's flags.txt, :func:`_written`, or None) holds it."""
        return self.chosen(name) and self.value(name) is not None and (   # None: not given
            written is None or _serialise(name, self.value(name)) not in written)

    def check_resumed_acting(self, started, get_model):
        """On --resume: a flag given anew (not in ``started``, the run's flags.txt, with
        that value) where it does nothing (``ACTS_ONLY``, --pca_in_graph on all bands) or
        beside the --plan that gives it is refused as a new run refuses it; one of
        flags.txt goes on ignored, as its run accepted it. ``get_model``: the
        application's model lookup."""
        written = _written(started)   # its lines, once
        self._check_acting(tuple(ACTS_ONLY), written)
        self._check_pca_in_graph(get_model, written)
        self._check_plan(written)

    def _check_types(self):
        """A setting given as another kind of value (from Python, e.g.
        ``learning_rate="0.1"``, ``tta="yes"``, ``devices=["/cpu:0"]``): refused in one
        line, as the flag parser refuses it, before anything is written (whole numbers:
        the checks of their values)."""
        for name, (group, field) in FLAG_FIELDS.items():
            value, kind = self.value(name), _FIELD_TYPES[group][field]
            if value is None or kind is int:
                continue
            if kind is float and (isinstance(value, bool) or
                                  not isinstance(value, numbers.Real)):
                raise cli.UsageError("--%s=%r: give a number" % (name, value))
            if kind is bool and not isinstance(value, bool):
                raise cli.UsageError("--%s=%r: give True or False" % (name, value))
            if kind is str and not isinstance(value, str) and not (
                    name in _TEXT_OR_NUMBER and isinstance(value, numbers.Real)
                    and not isinstance(value, bool)):
                raise cli.UsageError("--%s=%r: give a string, as the flag's text"
                                     % (name, value))

    def _check_plan(self, written=None):
        """A --plan file gives the devices, speeds, mesh and memory caps: those flags,
        chosen beside it, would be ignored. On --resume only with ``written``
        (:meth:`check_resumed_acting`): a run whose first invocation had them goes on
        ignoring them."""
        if self.placement.plan is None or self.folder.resume and written is None:
            return
        for name, what in PLAN_GIVES.items():
            if self._chosen_anew(name, written):
                raise cli.UsageError("--%s=%s: --plan=%s gives %s; leave --%s out"
                                     % (name, self.value(name), self.placement.plan, what,
                                        name))

    def smoothing_window(self):
        """--smoothing as a window side, or None for auto."""
        text = str(self.recipe.smoothing)
        if text == AUTO:
            return None
        window = int(text) if text.isdigit() else None
        try:
            check_window(window)
        except InvalidInput as error:
            raise cli.UsageError("--smoothing=%s: %s, or auto" % (text, error)) from None
        return window

    def field_look_strength(self, name):
        """--spectral_shift or --spectral_gain as a number, or None for auto."""
        text = self.value(name)
        if text == AUTO:
            return None
        value = (float(text) if isinstance(text, numbers.Real) and not isinstance(text, bool)
                 else number_in_text(str(text)))   # a number given from Python, or text
        value = float("nan") if value is None else value
        gain = name == "spectral_gain"
        if not 0 <= value <= (1.0 if gain else float("inf")):   # nan too
            raise cli.UsageError("--%s=%s: give auto or a number %s" % (
                name, text, "from 0 to 1 (a gain stays >= 0)" if gain else ">= 0"))
        return value

    def check_data(self):
        """One-line errors for scene and split settings the flag parser cannot judge."""
        self._check_scene()
        if self.data.split not in SPLITS:
            raise cli.UsageError("--split=%s: choose one of %s"
                                 % (self.data.split, ", ".join(SPLITS)))
        with self.blame("patch_size"):
            check_patch_size(self.data.patch_size)
        with self.blame("train_fraction"):
            check_train_fraction(self.data.train_fraction)
        for name in ("seed", "train_per_class") + (("pca",) if self.data.pca is not None
                                                   else ()):
            with self.blame(name):
                whole_number(self.value(name), name, minimum=0)
        self._check_split()

    def _check_split(self):
        """Split settings that another one chosen replaces: chosen beside it, they would be
        ignored. --train_set and --test_set give the split; --train_per_class (> 0) is
        instead of --train_fraction. Not on --resume: a run whose first invocation had
        them (in its flags.txt, data.json) goes on ignoring them."""
        if self.folder.resume:
            return
        if self.data.train_set or self.data.test_set:
            for name in ("split", "train_fraction", "train_per_class"):
                if self.chosen(name):
                    raise cli.UsageError("--%s=%s: --train_set and --test_set give the split; "
                                         "leave --%s out" % (name, self.value(name), name))
        if self.data.train_per_class and self.data.split == "disjoint":
            raise cli.UsageError("--train_per_class=%s: --split=disjoint takes a share of "
                                 "each class in stripes (--train_fraction), not a number of "
                                 "pixels" % self.data.train_per_class)
        if self.data.train_per_class and self.chosen("train_fraction"):
            raise cli.UsageError("--train_fraction=%s, --train_per_class=%s: give one of them "
                                 "(a share of each class's pixels, or a number of them)"
                                 % (self.data.train_fraction, self.data.train_per_class))

    def _check_scene(self):
        """Settings that only apply to some --dataset: chosen for another, they would be
        ignored."""
        dataset = self.data.dataset
        with self.blame("dataset"):   # before the flags that only some scenes take
            check_scene_name(dataset)
        if is_cube_file(dataset):
            if not self.data.labels_path:
                raise cli.UsageError("--dataset=%s: a cube file needs its label map: give "
                                     "--labels" % dataset)
        else:
            check_file_flags(dataset, {name: self.value(name) for name in FILE_FLAGS})
        for name in ("synthetic_layout", "synthetic_kind"):
            if dataset != SYNTHETIC and self.chosen(name):
                raise cli.UsageError("--%s=%s: only for --dataset=synthetic, not --dataset=%s"
                                     % (name, self.value(name), dataset))
        if self.data.synthetic_kind not in KINDS:
            raise cli.UsageError("--synthetic_kind=%s: choose one of %s"
                                 % (self.data.synthetic_kind, ", ".join(KINDS)))
        if self.data.synthetic_layout not in LAYOUTS:
            raise cli.UsageError("--synthetic_layout=%s: choose one of %s"
                                 % (self.data.synthetic_layout, ", ".join(LAYOUTS)))
        self._check_acting(SCENE_ACTING)   # (a --resume goes on: flags.txt of before 2026-11-28)

    def scene_flags(self):
        """The flags that name the scene's files (blamed when they cannot be read)."""
        data = self.data
        given_split = tuple(name for name in ("train_set", "test_set") if self.value(name))
        if not is_cube_file(data.dataset):   # synthetic or a benchmark scene
            if data.dataset != SYNTHETIC:   # its files are in --data_dir
                return ("dataset", "data_dir") + given_split
            if data.synthetic_layout != GENERATED_LAYOUT:   # its ground truth is
                return ("dataset", "synthetic_layout", "data_dir") + given_split
            return ("dataset",) + given_split
        mat = [self.chosen(name) or str(path).lower().endswith(".mat") for name, path in
               (("cube_key", data.dataset), ("labels_key", data.labels_path))]
        return (("dataset", "labels")
                + tuple(name for name, used in zip(("cube_key", "labels_key"), mat) if used)
                + given_split)


DEFAULT = Settings()
FILE_FLAGS = ("labels", "cube_key", "labels_key")   # only for a --dataset given as a file


def check_file_flags(dataset, values):
    """UsageError when ``values`` (``{flag: value or None}``) gives a flag of
    ``FILE_FLAGS`` for a ``dataset`` that is not a cube file (it would be ignored)."""
    if is_cube_file(dataset):
        return
    for name in FILE_FLAGS:
        if values.get(name) is not None:
            raise cli.UsageError("--%s=%s: only for a --dataset given as a cube file, not "
                                 "--dataset=%s" % (name, values[name], dataset))


def _plain(value):
    """``value``, a numpy integer or float as Python's (what the flags hold: the graph's
    dimensions refuse numpy's); other values as they are (bools too)."""
    if isinstance(value, bool) or type(value) in (int, float):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    return float(value) if isinstance(value, numbers.Real) else value


def _known(names):
    """InvalidInput unless every one of ``names`` is a flag of hmp.train."""
    unknown = sorted(set(names) - set(FLAG_FIELDS))
    if unknown:
        raise InvalidInput("%s: not a setting; allowed: hmp.train's flag names (%s)"
                           % (", ".join(unknown), ", ".join(FLAG_FIELDS)))


def model_recipe(model):
    """A model module's own defaults of hmp.train flags: its ``RECIPE`` dict (flag name:
    value, e.g. ``{"pca": 45}``), or {} if it has none."""
    return dict(getattr(model, "RECIPE", {}))


def _serialise(name, value):
    """A flag as absl serialises it: --name=value, --name / --noname for a boolean; a
    float flag's value as a float (30 given from Python is read back as 30.0)."""
    if isinstance(value, bool):
        return "--%s" % name if value else "--no%s" % name
    group, field = FLAG_FIELDS[name]
    if _FIELD_TYPES[group][field] is float and isinstance(value, numbers.Real):
        value = float(value)
    return "--%s=%s" % (name, value)


def _written(started):
    """The lines of flags.txt read as ``started`` ({name: value}; a boolean's ``--name``
    or ``--noname`` keyed by that word, its value "")."""
    return ({"--%s=%s" % item for item in started.items()}
            | {"--%s" % name for name, value in started.items() if value == ""})
