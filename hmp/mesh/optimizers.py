"""Optimizers for hmp's training step, by name.

SGD and Adafactor are Mesh-TensorFlow's own. Adam is Mesh-TF's AdamW (no bias
correction, decoupled weight decay) computed by TensorFlow's fused Adam kernel,
one op per weight slice where Mesh-TF's builds about 13. Momentum is hmp's:
Mesh-TF's ``MomentumOptimizer`` assigns the velocity slot and then subtracts
the slot *variable* from the weights, so in one TF1 ``session.run`` the
subtraction may read the velocity before or after it is updated. hmp's
version subtracts the freshly computed velocity instead. LARS (layer-wise
adaptive rate scaling, You et al. 2017; used for large batches by Wang et al.,
see ../shared/BACKGROUND.md) scales each variable's step by its weight-to-gradient norm
ratio; the norms are over the whole tensor, so a split variable gets exactly
the single-device step.

Under mixed precision (``hmp.graph.graph_config.PRECISIONS``) a variable is read in a low
precision (its ``activation_dtype``) but kept, updated and checkpointed in float32,
and the training step hands every optimizer float32 gradients
(``hmp.mesh.train_step``). Slots are float32 (``slot_dtype``); where an update needs
the weights themselves (LARS's norms, L2's decay term, Adafactor's scale) it reads
them as Mesh-TF's own Adafactor does, ``mtf.to_float(var.value)``: the low-precision
read, in float32 (a term of the update, not the weights, is rounded). Adam reads each
weight slice itself.
"""

import tensorflow.compat.v1 as tf

from hmp.compat import import_mesh_tensorflow

mtf = import_mesh_tensorflow()


class Adam(mtf.optimize.AdamWeightDecayOptimizer):
    """Mesh-TF's AdamW, each weight slice updated by TensorFlow's fused kernel.

    m <- b1 m + (1 - b1) g;  v <- b2 v + (1 - b2) g^2;
    w <- w - lr (m / (sqrt(v) + eps) + weight_decay w)

    as ``mtf.optimize.AdamWeightDecayOptimizer`` (its slots ``adam_m`` and ``adam_v``,
    so checkpoints carry over), but each device updates its slice of a weight and its
    slots with one ``ResourceApplyAdam`` (bias correction off: both beta powers 0),
    after an ``AssignSub`` of the decay where the weight decays. The kernel is
    element-wise, so an uneven split updates exactly as one device.
    """

    def apply_grads(self, grads, variables):
        # Mesh-TF's combines Assign operations only; these are not.
        return [op for grad, var in zip(grads, variables) for op in self.apply_grad(grad, var)]

    def apply_grad(self, grad, var):
        slots = [mtf.get_variable(var.mesh, var.name + suffix, var.shape,
                                  dtype=slot_dtype(var), initializer=tf.zeros_initializer(),
                                  trainable=False)
                 for suffix in ("/adam_m", "/adam_v")]
        decay = self.weight_decay_rate if self._do_use_weight_decay(var.name) else 0.0
        return [_AdamUpdate(mtf.to_float(grad), self.learning_rate, var,
                            [s.operation for s in slots], (self.beta_1, self.beta_2,
                                                           self.epsilon), decay)]


class _AdamUpdate(mtf.Operation):
    """One weight's Adam update (``Adam``): no outputs; its lowering is the update."""

    def __init__(self, grad, learning_rate, var, slots, betas_epsilon, decay):
        rate_is_tensor = isinstance(learning_rate, mtf.Tensor)
        super().__init__([grad] + ([learning_rate] if rate_is_tensor else []),
                         name="adam_update")
        self._variables = [var] + slots
        self._learning_rate = None if rate_is_tensor else float(learning_rate)
        self._betas_epsilon = betas_epsilon
        self._decay = decay
        self._outputs = []

    def lower(self, lowering):
        mesh_impl = lowering.mesh_impl(self)
        grads = lowering.tensors[self.inputs[0]].to_laid_out_tensor().all_slices
        rates = (lowering.tensors[self.inputs[1]].to_laid_out_tensor().all_slices
                 if self._learning_rate is None else [self._learning_rate] * len(grads))
        weights, ms, vs = [lowering.variables[v].laid_out_tensor.all_slices
                           for v in self._variables]
        beta_1, beta_2, epsilon = self._betas_epsilon
        updates = []
        for pnum, device in enumerate(mesh_impl.devices):
            weight, grad = weights[pnum], grads[pnum]
            with tf.device(device):
                rate = tf.cast(rates[pnum], tf.float32)
                # the decay, a write, waits for every gradient (the step's barrier
                # feeds ``grad``: every read of the weights has run), and the Adam
                # step waits for the decay
                with tf.control_dependencies([grad]):
                    decayed = ([weight.assign_sub(rate * self._decay * weight.read_value())]
                               if self._decay else [])
                with tf.control_dependencies([grad] + decayed):
                    updates.append(tf.raw_ops.ResourceApplyAdam(
                        var=weight.handle, m=ms[pnum].handle, v=vs[pnum].handle,
                        beta1_power=0.0, beta2_power=0.0, lr=rate, beta1=beta_1,
                        beta2=beta_2, epsilon=epsilon, grad=grad))
        lowering.operations[self] = tf.group(updates)


class Momentum(mtf.optimize.Optimizer):
    """Heavy-ball momentum: v <- m v + step;  w <- w - v, with step = lr g."""

    def __init__(self, learning_rate, momentum=0.9):
        self.learning_rate = learning_rate
        self.momentum = momentum

    def step(self, grad, var):
        """This step's change before momentum; subclasses scale it."""
        return grad * self.learning_rate

    def apply_grad(self, grad, var):
        velocity = mtf.get_variable(var.mesh, var.name + "/momentum", var.shape,
                                    dtype=slot_dtype(var), trainable=False,
                                    initializer=tf.zeros_initializer())
        new_velocity = velocity * self.momentum + self.step(grad, var)
        return [mtf.assign(velocity, new_velocity), mtf.assign_sub(var, new_velocity)]


class Lars(Momentum):
    """LARS: momentum whose step is scaled per variable.

    step = lr local_lr (g + weight_decay w), with
    local_lr = trust * |w| / (|g| + weight_decay |w|)  (1 where a norm is 0)

    Biases and batch-norm scales and offsets (``NOT_DECAYED``) take plain momentum
    steps, with neither decay nor trust ratio, as LARS's authors leave them out.
    """

    def __init__(self, learning_rate, momentum=0.9, weight_decay=1e-4, trust=1e-3):
        super().__init__(learning_rate, momentum)
        self.weight_decay = weight_decay
        self.trust = trust

    def step(self, grad, var):
        if not decays(var.name):   # biases, batch-norm scales and offsets: plain momentum
            return super().step(grad, var)
        weights = mtf.to_float(var.value)
        weight_norm = mtf.sqrt(mtf.reduce_sum(mtf.square(weights)))
        grad_norm = mtf.sqrt(mtf.reduce_sum(mtf.square(grad)))
        denominator = grad_norm + self.weight_decay * weight_norm
        both_positive = mtf.cast(mtf.greater(weight_norm * grad_norm, 0.0), weights.dtype)
        ratio = self.trust * weight_norm / (denominator + (1.0 - both_positive))
        local_lr = both_positive * ratio + (1.0 - both_positive)
        return (grad + self.weight_decay * weights) * (local_lr * self.learning_rate)


class L2(mtf.optimize.Optimizer):
    """``optimizer`` on the gradient plus ``rate`` times the weights (L2 weight decay).

    The term is elementwise, so a split variable decays exactly as on one device.
    """

    def __init__(self, optimizer, rate):
        self.optimizer = optimizer
        self.rate = rate

    def apply_grad(self, grad, var):
        if decays(var.name):
            grad += self.rate * mtf.to_float(var.value)
        return self.optimizer.apply_grad(grad, var)


def slot_dtype(var):
    """The dtype of ``var``'s optimizer slots: that of its master copy (float32), also
    where it computes in a low precision; read in it (not through the low precision)."""
    return var.master_dtype


# Variables that are never decayed: biases and batch-norm scales and offsets.
NOT_DECAYED = ("/bias", "/scale", "/offset")


def decays(name):
    """Whether weight decay applies to the variable called ``name``."""
    return not name.endswith(NOT_DECAYED)


def _with_l2(optimizer, rate):
    return L2(optimizer, rate) if rate else optimizer


OPTIMIZERS = {
    "sgd": lambda lr, wd: _with_l2(mtf.optimize.SgdOptimizer(lr), wd),
    "momentum": lambda lr, wd: _with_l2(Momentum(lr, 0.9), wd),
    # Decoupled weight decay (AdamW): w <- w - lr (adam step + wd w).
    "adam": lambda lr, wd: Adam(
        lr, weight_decay_rate=wd, exclude_from_weight_decay=[n + "$" for n in NOT_DECAYED]),
    "adafactor": lambda lr, wd, decay_rate=None: _with_l2(
        mtf.optimize.AdafactorOptimizer(learning_rate=lr, decay_rate=decay_rate), wd),
    "lars": lambda lr, wd: Lars(lr, weight_decay=wd),
}

# --weight_decay when not given: decoupled for Adam, LARS's own term, none for the others.
DEFAULT_WEIGHT_DECAY = {"adam": 1e-2, "lars": 1e-4}

SCHEDULES = ("constant", "cosine", "step")


def adafactor_decay_rate(step):
    """Adafactor's second-moment decay at ``step`` (a TensorFlow integer scalar): Mesh-TF's
    default (``adafactor_decay_rate_pow``, exponent 0.8), of a step given rather than
    read from the global step."""
    return 1.0 - tf.pow(tf.cast(step, tf.float32) + 1.0, -0.8)


def make_optimizer(name, learning_rate, weight_decay=None, at_step=None):
    """The optimizer called ``name`` (one of ``OPTIMIZERS``) at ``learning_rate``
    (a float or an mtf scalar, e.g. from :func:`learning_rate_at`) with
    ``weight_decay`` (None: ``DEFAULT_WEIGHT_DECAY``). ``at_step(function)``: an mtf
    scalar of ``function(step)`` (a function of a TensorFlow step, e.g. computed on each
    device from its own step), for what an optimizer computes from the step (Adafactor's
    decay); None: from the global step, as Mesh-TF does."""
    if name not in OPTIMIZERS:
        raise ValueError("optimizer %r is not known; choose one of %s"
                         % (name, sorted(OPTIMIZERS)))
    if weight_decay is None:
        weight_decay = DEFAULT_WEIGHT_DECAY.get(name, 0.0)
    if name == "adafactor" and at_step is not None:
        return OPTIMIZERS[name](learning_rate, weight_decay, at_step(adafactor_decay_rate))
    return OPTIMIZERS[name](learning_rate, weight_decay)


def learning_rate_at(step, base, schedule="constant", total_steps=1, warmup_steps=0):
    """The learning rate at ``step`` (a TensorFlow integer scalar), a float32 tensor.

    A linear warm-up from ``base / warmup_steps`` to ``base`` over the first
    ``warmup_steps`` steps, then ``schedule`` over the remaining steps up to
    ``total_steps``: ``constant``; ``cosine`` (half a cosine from ``base``
    down to 0); ``step`` (``base``, then a tenth from half way, a hundredth
    from three quarters).
    """
    if schedule not in SCHEDULES:
        raise ValueError("schedule %r is not known; choose one of %s"
                         % (schedule, ", ".join(SCHEDULES)))
    step = tf.cast(step, tf.float32)
    warmup = float(max(warmup_steps, 0))
    rest = float(max(total_steps - warmup_steps, 1))
    progress = tf.clip_by_value((step - warmup) / rest, 0.0, 1.0)
    if schedule == "cosine":
        decayed = 0.5 * base * (1.0 + tf.cos(3.141592653589793 * progress))
    elif schedule == "step":
        decayed = base * tf.where(progress < 0.5, 1.0, tf.where(progress < 0.75, 0.1, 0.01))
    else:
        decayed = tf.constant(float(base))
    if warmup_steps <= 0:
        return decayed
    return tf.where(step < warmup, base * (step + 1.0) / warmup, decayed)
