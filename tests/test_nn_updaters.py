"""ndws.nn.updaters: updater configurations and learning-rate schedules, against NumPy
formulas (the kernels themselves are tested in test_updaters.py)."""
import math

import numpy as np
import pytest

from ndws.nn import (AdaGrad, Adam, AdamW, CycleSchedule, ExponentialSchedule, Nesterovs,
                     RmsProp, Schedule, ScheduleType, Sgd, StepSchedule, Updater)

IT, EP = ScheduleType.ITERATION, ScheduleType.EPOCH


def test_schedules_follow_dl4j_formulas():
    step = StepSchedule(IT, 0.1, decay_rate=0.5, step=3)
    assert [step.value_at(i, 99) for i in range(7)] == [0.1, 0.1, 0.1, 0.05, 0.05, 0.05, 0.025]
    by_epoch = ExponentialSchedule(EP, 2.0, gamma=0.5)
    assert [by_epoch.value_at(99, e) for e in range(4)] == [2.0, 1.0, 0.5, 0.25]
    cyc = CycleSchedule(IT, 0.1, 1.0, cycle_length=10, annealing_length=2, annealing_decay=0.1)
    got = [cyc.value_at(i, 0) for i in range(11)]
    want = [0.1, 0.325, 0.55, 0.775, 1.0, 0.775, 0.55, 0.325, 0.1, 0.01, 0.1]
    assert np.allclose(got, want, rtol=0, atol=1e-12)


@pytest.mark.parametrize("updater", [
    Sgd(0.1), Nesterovs(0.05, momentum=0.5), Adam(1e-2), AdamW(1e-2, weight_decay=0.1),
    RmsProp(0.01, rms_decay=0.9), AdaGrad(0.1, epsilon=1e-6),
    Sgd(StepSchedule(IT, 0.2, 0.5, 2)), Adam(CycleSchedule(EP, 0.01, 0.1, 6, 2, 0.5)),
])
def test_round_trip_and_apply_match_numpy(updater, rng):
    assert type(updater).from_dict(updater.to_dict()) == updater
    assert Updater.from_dict(updater.to_dict()) == updater
    p = rng.standard_normal(257)
    p0 = p.copy()
    state = [np.zeros_like(p) for _ in range(updater.n_state)]
    ref_state = [np.zeros_like(p) for _ in range(updater.n_state)]
    for it in range(3):
        g = rng.standard_normal(257)
        lr = updater.learning_rate_at(it, 0)
        updater.apply(p, g, state, it, 0)
        _numpy_step(updater, p0, g, ref_state, lr, it + 1)
        np.testing.assert_allclose(p, p0, rtol=1e-12, atol=1e-12)


def _numpy_step(u, p, g, s, lr, t):
    # the formulas of docs/porting-from-dl4j.md's updater rows (torch's, in float64)
    if isinstance(u, Sgd):
        p -= lr * g
    elif isinstance(u, Nesterovs):
        s[0][:] = u.momentum * s[0] + g
        p -= lr * (g + u.momentum * s[0])
    elif isinstance(u, Adam):
        if isinstance(u, AdamW):
            p *= 1 - lr * u.weight_decay
        s[0][:] = u.beta1 * s[0] + (1 - u.beta1) * g
        s[1][:] = u.beta2 * s[1] + (1 - u.beta2) * g * g
        p -= lr / (1 - u.beta1 ** t) * s[0] / (np.sqrt(s[1]) / math.sqrt(1 - u.beta2 ** t)
                                               + u.epsilon)
    elif isinstance(u, RmsProp):
        s[0][:] = u.rms_decay * s[0] + (1 - u.rms_decay) * g * g
        p -= lr * g / (np.sqrt(s[0]) + u.epsilon)
    elif isinstance(u, AdaGrad):
        s[0][:] += g * g
        p -= lr * g / (np.sqrt(s[0]) + u.epsilon)


def test_learning_rate_comes_first_and_defaults_are_dl4j():
    assert Sgd(0.1).learning_rate == 0.1 and Adam(0.5).learning_rate == 0.5
    assert Sgd().learning_rate == 1e-3
    assert (Adam().beta1, Adam().beta2, Adam().epsilon) == (0.9, 0.999, 1e-8)
    assert RmsProp().rms_decay == 0.95 and Nesterovs().momentum == 0.9
    assert (Sgd.n_state, Nesterovs.n_state, Adam.n_state, AdamW.n_state, RmsProp.n_state,
            AdaGrad.n_state) == (0, 1, 2, 2, 1, 1)


@pytest.mark.parametrize("make, exc, msg", [
    (lambda: Sgd(-0.1), ValueError, r"^Sgd.learning_rate: must be in \[0, inf\], got -0.1$"),
    (lambda: Sgd(float("nan")), ValueError, r"^Sgd.learning_rate: must be in"),
    (lambda: Sgd(float("inf")), ValueError, r"^Sgd.learning_rate: must be in"),
    (lambda: Sgd("0.1"), TypeError, r"^Sgd.learning_rate: expected a real number, got str"),
    (lambda: Sgd(True), TypeError, r"^Sgd.learning_rate: expected a real number, got bool"),
    (lambda: Sgd(None), TypeError, r"^Sgd.learning_rate: expected a real number, got NoneType"),
    (lambda: Adam(beta1=1.0), ValueError, r"^Adam.beta1: must be in \[0, 1\), got 1.0$"),
    (lambda: AdamW(beta2=-1), ValueError, r"^AdamW.beta2: must be in \[0, 1\)"),
    (lambda: AdamW(weight_decay=-1), ValueError, r"^AdamW.weight_decay: must be in"),
    (lambda: Nesterovs(momentum=2), ValueError, r"^Nesterovs.momentum: must be in \[0, 1\]"),
    (lambda: RmsProp(rms_decay=1.5), ValueError, r"^RmsProp.rms_decay: must be in \[0, 1\]"),
    (lambda: AdaGrad(epsilon=-1e-9), ValueError, r"^AdaGrad.epsilon: must be in"),
    (lambda: StepSchedule("ITERATION", 0.1, 0.5, 2), TypeError,
     r"^StepSchedule.schedule_type: expected a ScheduleType"),
    (lambda: StepSchedule(IT, 0.1, 0.5, 0), ValueError, r"^StepSchedule.step: expected an int >= 1, got 0$"),
    (lambda: StepSchedule(IT, 0.1, 0.5, 2.5), TypeError, r"^StepSchedule.step: expected an int >= 1, got float"),
    (lambda: ExponentialSchedule(EP, 0.1, -1), ValueError, r"^ExponentialSchedule.gamma: must be in"),
    (lambda: CycleSchedule(IT, 0.1, 1.0, 10, 9, 0.1), ValueError,
     r"^CycleSchedule.annealing_length: expected an int in \[0, cycle_length - 1\), got 9$"),
    (lambda: CycleSchedule(IT, 0.1, 1.0, 10, 2, 1.5), ValueError,
     r"^CycleSchedule.annealing_decay: must be in \[0, 1\]"),
])
def test_hostile_hyperparameters(make, exc, msg):
    with pytest.raises(exc, match=msg):
        make()


@pytest.mark.parametrize("data, msg", [
    ({"learning_rate": 0.1}, r"expected a dict with an '@class' entry"),
    ("Sgd", r"expected a dict with an '@class' entry"),
    ({"@class": "os.system"}, r"unknown class 'os.system'"),
    ({"@class": "Sgd", "learning_rate": 0.1, "momentum": 0.9}, r"^Sgd.from_dict: unknown fields \['momentum'\]$"),
    ({"@class": "StepSchedule", "schedule_type": "ITERATION", "initial_value": 1,
      "decay_rate": 0.5, "step": 2}, r"^Updater.from_dict: unknown class 'StepSchedule'$"),
])
def test_from_dict_refuses_what_it_does_not_know(data, msg):
    with pytest.raises(ValueError, match=msg):
        Updater.from_dict(data)
    with pytest.raises(ValueError):
        Schedule.from_dict({"@class": "Sgd", "learning_rate": 0.1})


def test_configurations_are_frozen():
    u = Adam(1e-3)
    with pytest.raises(AttributeError):
        u.learning_rate = 0.1
    assert hash(u) == hash(Adam(1e-3))
