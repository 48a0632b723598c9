"""What a training graph is built from, as plain values: no TensorFlow is imported here.

The model and its input (:class:`ModelConfig`), the precision it computes in
(:data:`PRECISIONS`), where the graph runs (:class:`Placement`) and how it trains beyond
its optimizer (:class:`Recipe`: its patch augmentation, :class:`Augmentation`, and the
PCA done in the graph, :class:`Projection`). ``hmp.graph.graph`` builds the graph from
them (the TensorFlow side: ``hmp.graph.augment``, ``hmp.graph.projection``,
``hmp.graph.graph.model_logits``); the application's model registry (``models``), the
settings and the programs' flags use them without loading TensorFlow
(``tests/architecture/test_layering.py``).
"""

import dataclasses

import numpy as np

from hmp.errors import InvalidInput


@dataclasses.dataclass(frozen=True)
class Precision:
    """How a model computes (``--precision``): ``dtype``, the name of the TensorFlow dtype
    of its activations, their gradients and its weights as the layers read them
    (``hmp.graph.graph.model_logits`` casts to it); its weights, optimizer slots and
    checkpoints stay float32 (``hmp.layers``, ``hmp.mesh.optimizers``), and so do batch
    norm, the logits and the loss. ``loss_scale`` multiplies the loss before the
    backward pass (the float32 gradients are divided by it after their sum,
    ``hmp.mesh.train_step``): float16's smallest normal number is 6e-5, below which
    small gradients would lose their digits or vanish."""

    name: str
    dtype: str
    loss_scale: float = 1.0


# The precisions, by name: the one place for their dtypes and loss scales. float16's
# static scale 2**12 keeps gradients down to 1.5e-8 normal (6e-5 / 4096); a scaled
# gradient over 65504 (float16's largest number), an unscaled one over 16, would turn
# inf and then the loss NaN, which stops the run: the default model trained its 20
# epochs on the built-in scene without (both splits, docs/engine.md).
PRECISIONS = {precision.name: precision for precision in (
    Precision("float32", "float32"),
    Precision("mixed_bfloat16", "bfloat16"),
    Precision("mixed_float16", "float16", loss_scale=2.0 ** 12))}


@dataclasses.dataclass(frozen=True)
class Placement:
    """Where the graph runs: Mesh-TF mesh shape, layout rules, devices, splits."""

    mesh_shape: str = ""
    layout_rules: str = ""
    devices: tuple = ("",)
    splits: dict = dataclasses.field(default_factory=dict)

    @classmethod
    def from_plan(cls, plan):
        return cls(plan.mesh, plan.layout_rules, tuple(plan.devices),
                   {k: list(v) for k, v in plan.splits.items()})


# What a model is to the library: an object with these (a module of ``models``, or one of
# the application's own).
MODEL_NEEDS = ("logits", "SPLIT_DIMS")


def check_model(model, name):
    """``model`` (what the application's lookup gave for ``name``), or InvalidInput when it
    lacks one of ``MODEL_NEEDS``."""
    missing = [need for need in MODEL_NEEDS if not hasattr(model, need)]
    if missing:
        raise InvalidInput("model %r: the lookup gave a %s without %s; a model defines "
                           "logits(x, classes, width) and SPLIT_DIMS"
                           % (name, type(model).__name__, " and ".join(missing)))
    return model


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """The model and its input: patches of ``patch x patch x bands``.

    ``model`` is the model itself: a module (or any object) with ``logits(x,
    classes, width)`` and ``SPLIT_DIMS``. The application picks it by ``name``
    (``models.model_config``); the library never looks a model up. ``precision``
    (a name of ``PRECISIONS``) is the dtype it computes in: its patches are cast to it,
    its logits back to float32 (``hmp.graph.graph.model_logits``).
    """

    name: str
    patch: int
    bands: int
    n_classes: int
    width: int = 0   # 0: the model's default width
    # the statistics its batch norms train with (``hmp.layers.BATCH_STATISTICS``)
    batch_norm: str = "sync"
    precision: str = "float32"
    model: object = dataclasses.field(kw_only=True)

    def __post_init__(self):
        if self.precision not in PRECISIONS:
            raise ValueError("precision must be one of %s, got %r"
                             % (", ".join(PRECISIONS), self.precision))

    @property
    def compute(self):
        """The ``Precision`` the model computes in."""
        return PRECISIONS[self.precision]


@dataclasses.dataclass(frozen=True)
class Augmentation:
    """What to draw per sample (``hmp.graph.augment``): ``flips`` (the 8 symmetries),
    ``brightness`` (a factor uniform in [1 - b, 1 + b]) and ``noise`` (the standard
    deviation of Gaussian noise added to every value of the standardised patch)."""

    flips: bool = True
    brightness: float = 0.0
    noise: float = 0.0
    spectral_shift: float = 0.0   # bands; with spectral_gain: hmp.graph.augment.field_look
    spectral_gain: float = 0.0
    band_offset: tuple = None     # raw = standardised * band_scale + band_offset
    band_scale: tuple = None

    @property
    def active(self):
        return self.flips or self.brightness > 0 or self.noise > 0 or self.field_look

    @property
    def field_look(self):
        """Whether the field look (``hmp.graph.augment.field_look``) is drawn."""
        return self.spectral_shift > 0 or self.spectral_gain > 0


@dataclasses.dataclass(frozen=True)
class Projection:
    """A fitted PCA, done in the graph (``hmp.graph.projection``): ``mean`` [raw bands] and
    ``components`` [raw bands, k]."""

    mean: np.ndarray = dataclasses.field(compare=False)
    components: np.ndarray = dataclasses.field(compare=False)

    @classmethod
    def of(cls, pca):
        """The projection of a fitted ``hmp.data.PCA``."""
        return cls(np.asarray(pca.mean, np.float32), np.asarray(pca.components, np.float32))

    @property
    def raw_bands(self):
        return self.components.shape[0]


@dataclasses.dataclass(frozen=True)
class Recipe:
    """How a graph trains beyond its optimizer.

    ``weight_decay``: None for the optimizer's default
    (``hmp.mesh.optimizers.DEFAULT_WEIGHT_DECAY``); ``schedule``, ``warmup_steps``
    and ``total_steps``: the learning rate over the steps
    (``hmp.mesh.optimizers.learning_rate_at``); ``augmentation``: per-sample patch
    augmentation (``hmp.graph.augment``); ``class_weights``: one loss weight per
    class (None: all 1); ``projection``: the PCA done in the graph, after the
    augmentation, on patches cut from the scaled cube's bands
    (``hmp.graph.projection``), or None (the scene is the model's input cube);
    ``look_yields``: the field look's strength was measured, and yields when the
    network does not fit (``hmp.run.look_yield``).
    """

    weight_decay: float = None
    schedule: str = "constant"
    warmup_steps: int = 0
    total_steps: int = 1
    augmentation: Augmentation = Augmentation(flips=False)
    class_weights: tuple = None
    projection: Projection = None
    look_yields: bool = False

    def scene_bands(self, config):
        """Bands of the scene cube a graph of ``config`` cuts its patches from."""
        return config.bands if self.projection is None else self.projection.raw_bands

    def input_work(self, config):
        """What this recipe adds to a training step's work before the model (a JSON-able
        dict): the scene's bands, the PCA projection and the augmentation drawn."""
        augmentation = self.augmentation
        return {"scene_bands": self.scene_bands(config),
                "projection": self.projection is not None,
                "augmentation": {"flips": augmentation.flips,
                                 "brightness": augmentation.brightness > 0,
                                 "noise": augmentation.noise > 0,
                                 "field_look": augmentation.field_look}}
