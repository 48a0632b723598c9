"""The plan a seed trains on, made once its model is known: each device's memory (the
bound of the plan), the check that the model fits at all (before any folder is made),
the plan from the speeds (``--speeds``'s numbers, or measured and cached with the
link: ``hmp.measure.speedcache``) and ``--try_alone``'s trial of the fastest device alone.

``hardware``: the fit's :class:`hmp.run.hardware.Hardware`; ``settings``: its
:class:`hmp.run.settings.Settings`.
"""

import dataclasses
import os
import sys

import numpy as np

from hmp import cli, planning
from hmp.errors import InvalidInput
from hmp.formatting import format_bytes
from hmp.measure import calibration, speedcache
from hmp.measure.devices import memory_bytes, parse_memory_caps
from hmp.measure.speeds import measure_platform, overhead_text
from hmp.planning.planner import SPLIT_MARGIN, rate_order
from hmp.run.alone_trial import AloneTrial
from hmp.run.progress import say
from hmp.run.settings import AUTO


def memory_caps(settings, devices, given_plan=None):
    """Each device's memory in bytes (None: not known): a --plan file's caps (the memory
    its plan was made for, which bounds its re-plans too), else --memory_caps, else as
    found (``hmp.measure.devices.memory_bytes``)."""
    if given_plan is not None and given_plan.memory_caps is not None:
        return list(given_plan.memory_caps)
    with settings.blame("memory_caps"):
        return (parse_memory_caps(settings.placement.memory_caps, len(devices))
                or memory_bytes(devices))


def beside_cube(caps, cube):
    """Each device's memory for the model: its cap (None: not known) less the scene's
    ``cube`` bytes that every device holds beside the model."""
    return [None if cap is None else cap - cube for cap in caps]


def recorded(plan, cube):
    """``plan`` as a run records it (results.json, history.json): a plan file's JSON
    values (``Plan.to_dict``), its memory caps each device's whole memory, the scene's
    ``cube`` bytes that :func:`beside_cube` took off given back, so that ``--plan`` reads
    the file as it reads one of scripts/plan_layout.py and plans within the same caps."""
    caps = plan.memory_caps
    return dataclasses.replace(plan, memory_caps=None if caps is None else [
        None if cap is None else cap + cube for cap in caps]).to_dict()


def check_memory(settings, devices, spec, caps, cube):
    """UsageError, before any folder is made, when the model (``spec``) at --batch_size
    fits no layout of --mesh on ``devices`` within each one's memory (``caps``) beside
    the scene's ``cube`` bytes: naming --batch_size when fewer samples would fit, else
    --width, and the memory a device alone needs (``planning.memory_bytes``: weights
    with their gradients and optimizer slots, and the activations of the batch)."""
    batch_size, mesh = settings.recipe.batch_size, settings.placement.mesh
    room = beside_cube(caps, cube)
    if all(cap is None for cap in caps) or _fits(mesh, devices, spec, room, batch_size):
        return
    fewest = 1 if mesh == AUTO else planning.fewest_batch(spec, planning.parse_mesh(mesh))
    flag = "batch_size" if _fits(mesh, devices, spec, room, fewest) else "width"
    whole = np.ones((len(spec.layers), 1))
    need, weights = (float(planning.memory_bytes(spec, [batch], whole)[0, 0])
                     for batch in (batch_size, 0))
    raise cli.UsageError(
        "--%s=%d: the model needs %s on one device (%s for its weights, their gradients "
        "and optimizer slots, %s for the activations of %d samples) and fits no layout "
        "of --mesh=%s on %s beside the scene's cube (%s); allowed: a smaller --width or "
        "--batch_size, or devices with more memory"
        % (flag, settings.value(flag), format_bytes(need), format_bytes(weights),
           format_bytes(need - weights), batch_size, mesh,
           ", ".join("%s (%s)" % (d, "?" if c is None else format_bytes(c))
                     for d, c in zip(devices, caps)), format_bytes(cube)))


def check_batch_rows(settings, spec):
    """UsageError, before any profiling or folder, when a given --mesh's batch rows cannot
    each hold the fewest samples a replica of the model (``spec``) needs at --batch_size
    (``planning.fewest_samples_a_row``: with local batch norms); --mesh=auto leaves such
    meshes out itself. Names --batch_norm too, whose sync statistics have no minimum."""
    mesh = settings.placement.mesh
    if mesh == AUTO:
        return
    try:
        planning.fewest_samples_a_row(spec, planning.parse_mesh(mesh),
                                      settings.recipe.batch_size)
    except InvalidInput as error:
        raise cli.UsageError("--mesh=%s, --batch_size=%d, --batch_norm=%s: %s"
                             % (mesh, settings.recipe.batch_size, settings.model.batch_norm,
                                error)) from error


def check_plan_memory(plan, caps, cube):
    """InvalidInput when a given plan's model needs more on a device than its memory
    (``caps``) leaves beside the scene's ``cube`` bytes."""
    over = ["%s needs %s for the model beside the scene's cube (%s), more than its %s"
            % (device, format_bytes(need), format_bytes(cube), format_bytes(cap))
            for device, need, cap, room in zip(plan.devices, plan.prediction.memory, caps,
                                               beside_cube(caps, cube))
            if room is not None and need > room]
    if over:
        raise InvalidInput("the plan does not fit: %s; allowed: a plan made for the memory "
                           "left beside the cube (scripts/plan_layout.py --memory_caps)"
                           % "; ".join(over))


def _fits(mesh, devices, spec, caps, batch_size):
    """Whether the planner finds a layout of ``mesh`` for ``batch_size`` samples on
    ``devices`` within the memory ``caps`` (at equal speeds: memory moves work between
    devices, speeds do not make room). True too when it refuses for another reason than
    memory: that is said where the plan is made."""

    def plans(memory_caps):
        try:
            planning.plan_layout(spec, devices, [1.0] * len(devices), batch_size, mesh,
                                 memory_caps)
            return True
        except InvalidInput:
            return False
    return plans(caps) or not plans(None)


def choose_plan(settings, hardware, spec, model_config, caps, model_dir, recipe,
                first_epoch, recorded_trial):
    """(the plan made now from the speeds (--speeds's numbers; None: measured on the step
    of ``recipe``, with the link), the device fastest alone at --batch_size as the plan
    priced each alone (``Plan.fastest_alone``), the runner-up or None); ``spec``: the
    model's. Each device's memory (``caps``: :func:`memory_caps`) bounds the plan.

    When ``--try_alone``'s trial can run from ``first_epoch`` (:func:`trial_can_run`;
    ``recorded_trial``: its record before a resume, or None), a layout on several
    devices predicted faster than the fastest device alone at all is planned: the trial
    measures that choice, which the cost model's error margin only guesses; and the
    layout on several devices priced next within that margin (:func:`runner_up`), when
    the run has an epoch for it, runs in the trial too."""
    devices, speeds = hardware.devices, hardware.speeds
    batch_size, mesh = settings.recipe.batch_size, settings.placement.mesh
    if len(devices) == 1:   # nothing to split: no profiling
        plan = planning.plan_layout(spec, devices, speeds or [1.0], batch_size, mesh, caps)
        if mesh == AUTO:
            plan = dataclasses.replace(plan, reason="one device (%s): the one-device "
                                       "layout, no profiling needed" % devices[0])
        return plan, devices[0], None
    if speeds is not None:
        plan = planning.plan_layout(spec, devices, speeds, batch_size, mesh, caps)
        if mesh == AUTO:
            plan = dataclasses.replace(plan, reason=plan.reason.replace(
                "communication not priced (no link given)",
                "communication not priced: --speeds=%s gives the speeds, so no link was "
                "measured (--speeds=auto measures both)" % settings.placement.speeds))
        if len(plan.devices) > 1:
            plan = _said_without_trial(plan, settings, first_epoch, recorded_trial,
                                       trial_can_run(settings, first_epoch, recorded_trial))
        return plan, plan.fastest_alone(), None
    measured, link = _measured(settings, hardware, model_config, spec, model_dir, recipe)
    trial = trial_can_run(settings, first_epoch, recorded_trial)
    plan = planning.plan_layout(spec, measured, None, batch_size, mesh, caps, link=link,
                                alone_margin=0.0 if trial else SPLIT_MARGIN)
    plan = _said_without_trial(plan, settings, first_epoch, recorded_trial, trial)
    if not (trial and len(plan.devices) > 1 and plan.fastest_alone() is not None):
        return plan, plan.fastest_alone(), None
    plan = dataclasses.replace(plan, reason=plan.reason + "; against one device, a "
                               "layout predicted faster at all, since --try_alone "
                               "measures it against the fastest device alone")
    if recorded_trial is not None:   # taken up as it ran: with a runner-up or without
        room = "runner_up" in (recorded_trial.get("key") or {})
    else:   # an epoch for the runner-up
        room = settings.recipe.epochs - first_epoch >= AloneTrial.epochs_for(runner_up=True)
    return plan, plan.fastest_alone(), (
        runner_up(plan, spec, measured, batch_size, caps, link) if room else None)


def runner_up(plan, spec, measured, batch_size, caps, link):
    """The layout on several devices that the cost model priced fastest after ``plan``
    (made with --mesh=auto) and within ``SPLIT_MARGIN`` of its step, either side (the
    margin is the cost model's error: the trial measures the two), planned on its
    devices, the candidate's count of them ranked as the planner ranked them
    (``measured``: the DeviceSpecs, ``caps`` their memory, in the order planned); None
    when no candidate is that close."""
    own = (plan.mesh, len(plan.devices))
    near = [c for c in plan.candidates
            if c.step is not None and c.devices > 1 and (c.mesh, c.devices) != own
            and abs(c.step / plan.prediction.step - 1) <= SPLIT_MARGIN]
    if not near:
        return None
    best = min(near, key=lambda c: c.step)
    index = {s.name: i for i, s in enumerate(measured)}
    order = (rate_order(spec, measured) if best.ranking == "rate"   # as planner.subsets
             else [index[r["device"]] for r in plan.alone])
    chosen = sorted(order[:best.devices])   # in the order the devices were given
    return planning.plan_layout(spec, [measured[i] for i in chosen], None, batch_size,
                                best.mesh, None if caps is None else [caps[i] for i in chosen],
                                link=link)


def trial_can_run(settings, first_epoch, recorded):
    """Whether ``--try_alone``'s trial can run from ``first_epoch`` on a plan of several
    devices: it is on with --mesh=auto, and the run has the epochs a fresh trial needs,
    or those that a trial ``recorded`` before a resume still needs (that run planned for
    it: its plan is made again the same way, and the trial taken up)."""
    return (_trial_on(settings) and settings.recipe.epochs - first_epoch
            >= _trial_epochs(recorded, first_epoch))


def _said_without_trial(plan, settings, first_epoch, recorded, trial):
    """``plan``, its reason saying so when --try_alone's trial is asked for but cannot run
    (``trial``: ``trial_can_run``'s verdict): the run has too few epochs left for it (not
    silent); as it is otherwise."""
    left = settings.recipe.epochs - first_epoch
    if trial or not _trial_on(settings) or left <= 0:
        return plan
    return dataclasses.replace(plan, reason=plan.reason + "; no --try_alone trial: it needs "
                               "%d epochs, the run has %d left"
                               % (_trial_epochs(recorded, first_epoch), left))


def _trial_epochs(recorded, first_epoch):
    """The epochs a fresh trial needs, or those a trial ``recorded`` before a resume
    from ``first_epoch`` still needs."""
    return (AloneTrial.epochs_for(runner_up=False) if recorded is None
            else AloneTrial.epochs_needed_after(recorded, first_epoch))


def _trial_on(settings):
    """Whether --try_alone's trial is asked for: on, with --mesh=auto."""
    return settings.placement.try_alone and settings.placement.mesh == AUTO


def _measurement_key(settings, hardware, model_config, devices, recipe):
    """What a speed measured on ``devices`` depends on (``speedcache.cache_key``)."""
    cluster = hardware.cluster
    return speedcache.cache_key(model_config, settings.recipe.batch_size,
                                settings.recipe.optimizer, devices,
                                cluster.identity if cluster else None,
                                recipe.input_work(model_config))


def _measured(settings, hardware, model_config, spec, model_dir, recipe):
    """The devices' DeviceSpecs (samples/s at --batch_size, FLOP/s, per-step overhead,
    and the op-size figures when --mesh may split the model) and the link (a LinkSpec):
    cached, or measured now (and stored there). See hmp.measure.speedcache."""
    devices = hardware.devices
    key = _measurement_key(settings, hardware, model_config, devices, recipe)
    op_size = planning.splits_the_model(settings.placement.mesh)
    paths = [os.path.join(model_dir, speedcache.FILE_NAME), speedcache.user_cache_path()]
    warn = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731

    def measure():
        return measure_platform(model_config, devices, settings.recipe.batch_size,
                                target=hardware.target,
                                session_config=hardware.session_config,
                                optimizer=settings.recipe.optimizer, progress=say, spec=spec,
                                op_size=op_size, recipe=recipe)

    entry, _ = speedcache.measured_or_cached(key, paths, measure,
                                             force=settings.placement.speeds == "measure",
                                             say=say, warn=warn, op_size=op_size)
    for s in entry.speeds:
        op_size_figures = calibration.describe(s)
        say("  %-28s %8.1f samples/s (%.1f - %.1f), %s%s"
             % (s.name, s.samples_per_s, s.min_samples_per_s, s.max_samples_per_s,
                overhead_text(s.overhead_s), "; " + op_size_figures if op_size_figures else ""))
    link = entry.link
    if link is not None:
        say("  link: " + "; ".join(
            what + l.figures()
            for what, l in (("", link), ("while training ", link.loaded),
                            ("within a host ", link.local)) if l is not None))
    return entry.speeds, link


def alone_trial(settings, hardware, spec, plan, fastest, model_config, recipe, first_epoch,
                recorded, runner_up_plan=None):
    """The trial of the fastest device alone (``--try_alone``; a
    :class:`hmp.run.alone_trial.AloneTrial`, with ``runner_up_plan`` when not None), with
    what ``recorded`` (its record before a resume) measured, or None when it does not
    apply: a mesh or plan given, a plan on one device, fewer epochs left than it still
    needs (3 fresh, 4 with a runner-up)."""
    recipe_settings = settings.recipe
    if not _trial_on(settings) or fastest is None or len(plan.devices) < 2:
        return None
    alone = planning.plan_layout(spec, [fastest], [1.0], recipe_settings.batch_size, AUTO)
    alone = dataclasses.replace(alone, reason="the fastest device alone (%s), on trial "
                                "against the plan (--try_alone)" % fastest)
    # what the rates depend on: what a speed measurement does, and the two layouts
    key = {**_measurement_key(settings, hardware, model_config, plan.devices, recipe),
           "mesh": plan.mesh, "splits": plan.splits, "alone": fastest}
    if runner_up_plan is not None:
        runner_up_plan = dataclasses.replace(
            runner_up_plan, reason="the runner-up, on trial against the plan (--try_alone): "
            + runner_up_plan.reason)
        key["runner_up"] = {"mesh": runner_up_plan.mesh, "devices": runner_up_plan.devices,
                            "splits": runner_up_plan.splits}
    trial = AloneTrial(plan, alone, key, runner_up_plan)
    line = trial.take_up(recorded, first_epoch)
    if recipe_settings.epochs - first_epoch < trial.epochs_needed:
        return None
    if line:
        print(line, flush=True)
    return trial
