"""The scene on the devices: a step's pixel indices in, every device cuts its own patches.

Feeding whole batches of patches moves ``batch x p x p x bands`` floats per
step from the client to the mesh (16.6 MB at batch 512 of 9x9x100 patches),
and in cluster mode on from task 0 to every other task. Instead the
preprocessed, border-padded cube is loaded once into a variable on every host
(``SceneCubes.load``), and a step takes only the batch's flat pixel indices
(4 bytes a sample: fed, or kept on the devices, ``TrainingGraph.load_batches``).
``cut_patches`` is an mtf operation whose slice on each device is the patches of
that device's batch slice, gathered from its host's copy of the cube: patches never
travel, and devices of a model-parallel row cut the same patches side by side
instead of receiving them.

Copies: the CPU devices of one host (a process or ``hmp.worker`` task) share
one cube in host memory; every other device (a GPU) holds its own, so no step
copies the cube between host and accelerator. The cube variables are local:
not trained, not checkpointed, not in ``tf.global_variables()``. So a scene
must fit each device's memory: :func:`check_cube_fits` refuses one that does
not (the cube is not kept on the host for a GPU to cut patches there).
"""

import numpy as np
import tensorflow.compat.v1 as tf

from hmp.compat import import_mesh_tensorflow
from hmp.errors import InvalidInput
from hmp.mesh.collectives import is_cpu
from hmp.formatting import format_bytes

mtf = import_mesh_tensorflow()


def padded_shape(image_shape, patch_size):
    """(rows, columns) of an ``image_shape`` scene padded for ``patch_size`` patches."""
    return tuple(int(n) + int(patch_size) - 1 for n in image_shape)


def cube_bytes(image_shape, patch_size, bands):
    """Bytes of the padded float32 cube every device holds (``SceneCubes``)."""
    rows, cols = padded_shape(image_shape, patch_size)
    return rows * cols * int(bands) * np.dtype(np.float32).itemsize


def check_cube_fits(image_shape, patch_size, bands, devices, caps):
    """InvalidInput, naming the memory needed, when the padded float32 cube of an
    ``image_shape`` scene of ``bands`` bands does not fit the memory of a device in
    ``devices`` (``caps``: bytes each, None where unknown;
    ``hmp.measure.devices.memory_bytes``), each of which holds a copy."""
    rows, cols = padded_shape(image_shape, patch_size)
    need = cube_bytes(image_shape, patch_size, bands)
    short = [(device, cap) for device, cap in zip(devices, caps)
             if cap is not None and need > cap]
    if short:
        raise InvalidInput(
            "the scene's padded cube (%d x %d pixels x %d bands, float32) needs %s on every "
            "device, more than %s; allowed: fewer bands (--pca), a smaller scene, or devices "
            "with more memory"
            % (rows, cols, bands, format_bytes(need),
               ", ".join("%s has (%s)" % (d, format_bytes(c)) for d, c in short)))


class SceneCubes:
    """The padded cube of an ``image_shape`` scene, one variable per device memory.

    Build it in the graph it serves (its placeholder is made at once).

    Args:
      image_shape: (rows, columns) of the scene (unpadded).
      patch_size: odd patch size; the cube is padded by ``patch_size // 2``.
      bands: bands of the (preprocessed) cube.
    """

    def __init__(self, image_shape, patch_size, bands):
        self.image_shape = tuple(int(n) for n in image_shape)
        self.patch_size = int(patch_size)
        self.bands = int(bands)
        self.padded_shape = padded_shape(self.image_shape, patch_size) + (self.bands,)
        # The padded cube, fed once by ``load`` (made in the caller's default graph).
        self._value = tf.placeholder(tf.float32, self.padded_shape, name="scene_cube")
        self._cubes = {}     # memory key -> [padded pixels, bands] variable

    @staticmethod
    def memory_of(device, host):
        """Devices that share a memory share a cube: the CPU devices of one host."""
        return (host, "CPU") if is_cpu(device) else (host, device)

    def cube(self, device, host):
        """The flat cube ``[padded pixels, bands]`` that ``device`` (on ``host``) reads."""
        key = self.memory_of(device, host)
        if key not in self._cubes:
            with tf.device(device):
                self._cubes[key] = tf.Variable(
                    tf.reshape(self._value, [-1, self.bands]), trainable=False,
                    collections=[], name="scene_cube_%d" % len(self._cubes))
        return self._cubes[key]

    @property
    def copies(self):
        """How many copies of the cube the lowered graph holds."""
        return len(self._cubes)

    def load(self, session, padded_cube):
        """Loads ``padded_cube`` ([padded rows, padded columns, bands]) into every copy."""
        if tuple(padded_cube.shape) != self.padded_shape:
            raise ValueError("padded cube has shape %s; this graph was built for %s"
                             % (tuple(padded_cube.shape), self.padded_shape))
        if self._cubes:
            session.run([c.initializer for c in self._cubes.values()],
                        {self._value: padded_cube})

    def cut(self, cube, indices):
        """TensorFlow patches ``[n, p, p, bands]`` around flat pixel ``indices`` [n]."""
        p = self.patch_size
        padded_cols = self.padded_shape[1]
        rows = indices // self.image_shape[1]
        cols = indices % self.image_shape[1]
        offsets = tf.range(p, dtype=indices.dtype)
        flat = ((rows[:, None, None] + offsets[None, :, None]) * padded_cols
                + cols[:, None, None] + offsets[None, None, :])
        return tf.gather(cube, flat)


class _CutPatches(mtf.Operation):
    """Patches ``[batch, h, w, bands]`` of the pixels ``indices`` [batch], cut per device."""

    def __init__(self, cubes, indices, shape, name=None):
        super().__init__([indices], name=name or "cut_patches")
        self._cubes = cubes
        self._outputs = [mtf.Tensor(self, mtf.Shape(shape), tf.float32)]

    def gradient(self, grad_ys):
        return [None]   # integer indices have no gradient

    def lower(self, lowering):
        mesh_impl = lowering.mesh_impl(self)
        for dim in self.outputs[0].shape.dims[1:]:
            if mesh_impl.tensor_dimension_to_mesh_axis(dim) is not None:
                raise ValueError("cut_patches: dimension %r of the input patches is laid out "
                                 "on a mesh axis; only the batch may be split" % dim.name)
        hosts = getattr(mesh_impl, "hosts", [""] * mesh_impl.size)
        def cut(pnum, indices):
            device = mesh_impl.devices[pnum]
            return self._cubes.cut(self._cubes.cube(device, hosts[pnum]), indices)
        lowering.set_tensor_lowering(
            self.outputs[0],
            mesh_impl.slicewise(cut, mesh_impl.laid_out_pnum(), lowering.tensors[self.inputs[0]]))


def cut_patches(cubes, indices, shape, name=None):
    """The mtf patches of ``shape`` ([batch, h, w, bands]) around the pixels ``indices``.

    ``indices``: an int32 mtf Tensor ``[batch]`` of flat pixel indices of
    ``cubes``' scene. Each device gathers its batch slice's patches from the
    cube in its own memory.
    """
    return _CutPatches(cubes, indices, shape, name).outputs[0]


def patches_around(cubes, indices):
    """Model input (``inputs`` of ``hmp.graph.graph.build_logits_graph``): the patches around
    the pixels of the TensorFlow int32 tensor ``indices`` [batch], cut per device."""
    return lambda mesh, shape: cut_patches(
        cubes, mtf.import_tf_tensor(mesh, indices, mtf.Shape(shape.dims[:1])), shape)
