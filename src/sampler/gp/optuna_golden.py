#!/usr/bin/env python3
"""What Optuna 5.0's GPSampler computes, for the tests in ``tests.rs`` to compare sweepd's with.

Optuna's GP needs ``torch`` and ``scipy``, which the test venv does not have (``make test`` never
needs them): run this with a Python that has Optuna 5.0.0, scipy and torch (the CPU build is
enough; see ``docs/benchmarks.md`` for the bench's venv, ``make bench-venv-gp``) and write the
result next to this script::

    PYTHON src/sampler/gp/optuna_golden.py > src/sampler/gp/optuna_golden.json

What is recorded, each computed by Optuna's own functions (``optuna._gp``):

- ``normalize``: distributions, values and their normalized form (``SearchSpace``), the grids
  of the discrete params (``get_choices_of_discrete_params``) and points mapped back
  (``get_unnormalized_param``).
- ``standard_logei``: ``log E[max(0, z + N(0, 1))]`` and its derivative (autograd) at points
  across both of its branches.
- ``gps``: data sets (continuous, mixed with an int and a categorical, and one with
  constraints), each with the kernel matrix at given hyperparameters, the loss Optuna's fit
  minimises (minus the marginal log likelihood minus the log prior) and its gradient with
  respect to the log hyperparameters, at a few points, with and without
  ``deterministic_objective``; the hyperparameters ``fit_kernel_params`` finds from its default
  start (``fit``) and with a tight tolerance (``fit_tight``, the optimum itself); the posterior
  mean and variance at test points; ``LogEI`` (or ``LogCEI`` with constraints) and ``qLogEI``
  (or ``qLogCEI``) with running trials, values and gradients at test points, with the QMC base
  samples Optuna drew (sweepd's tests hand them to sweepd's acquisition, whose own draws
  differ); and the best acquisition value ``optimize_acqf_mixed`` finds (sweepd's optimizer,
  with its own random starts, must find one at least as high, within a tolerance).
"""

import json
import math
import sys
import warnings

import numpy as np
import torch

import optuna
from optuna._gp import acqf as acqf_module
from optuna._gp import gp
from optuna._gp import optim_mixed
from optuna._gp import prior
from optuna._gp.qmc import sample_from_normal_sobol
from optuna._gp.search_space import SearchSpace
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

optuna.logging.set_verbosity(optuna.logging.ERROR)
warnings.simplefilter("ignore")
torch.set_default_dtype(torch.float64)


def dist_json(d):
    return json.loads(optuna.distributions.distribution_to_json(d))


def normalize_cases():
    rng = np.random.RandomState(7)
    space = {
        "f": FloatDistribution(-2.0, 3.0),
        "lf": FloatDistribution(1e-5, 1e-1, log=True),
        "sf": FloatDistribution(0.0, 1.0, step=0.25),
        "sf_off": FloatDistribution(0.0, 1.0, step=0.4),  # high lowered to 0.8 by Optuna
        "i": IntDistribution(-3, 7),
        "si": IntDistribution(2, 11, step=3),
        "li": IntDistribution(1, 1000, log=True),
        "c": CategoricalDistribution(["a", "b", "c", "d"]),
        "one": FloatDistribution(0.5, 0.5),
    }
    ss = SearchSpace(space)
    trials_params = []
    for _ in range(6):
        p = {}
        for name, d in space.items():
            if isinstance(d, CategoricalDistribution):
                p[name] = d.choices[rng.randint(len(d.choices))]
            elif isinstance(d, IntDistribution):
                if d.log:
                    p[name] = int(round(math.exp(rng.uniform(math.log(d.low), math.log(d.high)))))
                else:
                    p[name] = int(d.low + d.step * rng.randint((d.high - d.low) // d.step + 1))
            elif d.step is not None:
                p[name] = d.low + d.step * rng.randint(int(round((d.high - d.low) / d.step)) + 1)
            elif d.log:
                p[name] = math.exp(rng.uniform(math.log(d.low), math.log(d.high)))
            else:
                p[name] = rng.uniform(d.low, d.high)
        trials_params.append(p)
    normalized = ss.get_normalized_params([None] * len(trials_params), trials_params)
    back = [
        {
            "x": list(map(float, x)),
            "params": ss.get_unnormalized_param(np.asarray(x)),
        }
        for x in [rng.uniform(0, 1, len(space)) * np.array([1] * 7 + [4, 1]) for _ in range(6)]
    ]
    for b in back:
        b["x"][7] = float(math.floor(b["x"][7]))
        b["params"] = ss.get_unnormalized_param(np.asarray(b["x"]))
    return {
        "space": {k: dist_json(d) for k, d in space.items()},
        "params": trials_params,
        "normalized": normalized.tolist(),
        "choices": {
            name: list(map(float, c))
            for name, c in zip(
                [list(space)[i] for i in ss.discrete_indices], ss.get_choices_of_discrete_params()
            )
        },
        "unnormalized": back,
    }


def standard_logei_cases():
    out = []
    for z in [-40.0, -30.0, -25.5, -24.5, -10.0, -3.0, -0.5, 0.0, 0.7, 2.0, 8.0]:
        t = torch.tensor([z], requires_grad=True)
        v = acqf_module.standard_logei(t)
        v.sum().backward()
        out.append([z, v.item(), t.grad.item()])
    return out


def loss_and_grad(X, y, is_cat, raw, deterministic):
    """The function `GPRegressor._fit_kernel_params` hands scipy, at `raw`."""
    n_params = X.shape[1]
    raw_t = torch.tensor(raw, requires_grad=True)
    g = gp.GPRegressor(
        is_categorical=torch.from_numpy(is_cat),
        X_train=torch.from_numpy(X),
        y_train=torch.from_numpy(y),
        inverse_squared_lengthscales=torch.exp(raw_t[:n_params]),
        kernel_scale=torch.exp(raw_t[n_params]),
        noise_var=(
            torch.tensor(prior.DEFAULT_MINIMUM_NOISE_VAR)
            if deterministic
            else torch.exp(raw_t[n_params + 1]) + prior.DEFAULT_MINIMUM_NOISE_VAR
        ),
    )
    loss = -g.marginal_log_likelihood() - prior.default_log_prior(g)
    loss.backward()
    return loss.item(), raw_t.grad.tolist()


def hyper(g):
    return {
        "ils": g.inverse_squared_lengthscales.tolist(),
        "scale": g.kernel_scale.item(),
        "noise": g.noise_var.item(),
    }


def fit(X, y, is_cat, gtol=1e-2, deterministic=False):
    return gp.fit_kernel_params(
        X=X,
        Y=y,
        is_categorical=is_cat,
        log_prior=prior.default_log_prior,
        minimum_noise=prior.DEFAULT_MINIMUM_NOISE_VAR,
        deterministic_objective=deterministic,
        gtol=gtol,
    )


def regressor(X, y, is_cat, h):
    g = gp.GPRegressor(
        is_categorical=torch.from_numpy(is_cat),
        X_train=torch.from_numpy(X),
        y_train=torch.from_numpy(y),
        inverse_squared_lengthscales=torch.tensor(h["ils"]),
        kernel_scale=torch.tensor(h["scale"]),
        noise_var=torch.tensor(h["noise"]),
    )
    g._cache_matrix()
    return g


def standardize(v):
    return (v - v.mean()) / max(1e-10, v.std())


def values_and_grads(acqf, xs):
    out = []
    for x in xs:
        v, g = acqf.eval_acqf_with_grad(np.asarray(x, dtype=float))
        out.append({"x": list(map(float, x)), "value": v, "grad": g.tolist()})
    return out


def gp_case(name, space, f, n, n_test, seed, n_constraints=0, constraint=None, n_running=3):
    rng = np.random.RandomState(seed)
    ss = SearchSpace(space)
    X = ss.sample_normalized_params(n, rng)
    Xt = ss.sample_normalized_params(n_test, rng)
    Xr = ss.sample_normalized_params(n_running, rng)
    is_cat = ss.is_categorical
    raw_values = np.array([f(x) for x in X])
    y = standardize(-raw_values)  # minimised, so Optuna's y is its negation
    dim = X.shape[1]
    case = {
        "name": name,
        "space": {k: dist_json(d) for k, d in space.items()},
        "X": X.tolist(),
        "values": raw_values.tolist(),
        "y": y.tolist(),
        "is_categorical": is_cat.tolist(),
        "X_test": Xt.tolist(),
        "X_running": Xr.tolist(),
    }
    # The kernel at arbitrary hyperparameters.
    h0 = {"ils": list(rng.uniform(0.3, 3.0, dim)), "scale": 1.7, "noise": 0.05}
    g0 = regressor(X, y, is_cat, h0)
    with torch.no_grad():
        case["kernel"] = {
            **h0,
            "K": g0.kernel().tolist(),
            "K_test": g0.kernel(torch.from_numpy(Xt)).tolist(),
        }
    # The loss and its gradient.
    losses = []
    for raw in [
        [0.0] * dim + [0.0, math.log(1.0 - 0.99e-6)],
        list(rng.normal(0, 1, dim)) + [0.4, -3.0],
        list(rng.normal(-1, 1, dim)) + [-0.5, -8.0],
    ]:
        for det in (False, True):
            loss, grad = loss_and_grad(X, y, is_cat, raw, det)
            losses.append({"raw": raw, "deterministic": det, "loss": loss, "grad": grad})
    case["loss"] = losses
    # Fits.
    gpr = fit(X, y, is_cat)
    case["fit"] = hyper(gpr)
    tight = fit(X, y, is_cat, gtol=1e-7)
    case["fit_tight"] = hyper(tight)
    raw_t = (
        list(np.log(tight.inverse_squared_lengthscales.numpy()))
        + [math.log(tight.kernel_scale.item()), math.log(tight.noise_var.item() - 1e-6)]
    )
    case["fit_tight"]["loss"] = loss_and_grad(X, y, is_cat, raw_t, False)[0]
    det = fit(X, y, is_cat, deterministic=True)
    case["fit_deterministic"] = hyper(det)
    # The posterior with the default fit.
    with torch.no_grad():
        mean, var = gpr.posterior(torch.from_numpy(Xt))
    case["posterior"] = {"mean": mean.tolist(), "var": var.tolist()}
    threshold = float(y.max())
    case["threshold"] = threshold
    if n_constraints == 0:
        acqf = acqf_module.LogEI(gpr=gpr, search_space=ss, threshold=threshold)
        case["acqf"] = values_and_grads(acqf, Xt)
        qmc_seed = int(rng.randint(1 << 30))
        qacqf = acqf_module.qLogEI(
            gpr=gpr,
            search_space=ss,
            threshold=threshold,
            n_qmc_samples=128,
            qmc_seed=qmc_seed,
            normalized_params_of_running_trials=Xr,
        )
        case["qmc_samples"] = [sample_from_normal_sobol(n_running + 1, 128, qmc_seed).tolist()]
    else:
        cvals = np.array([constraint(x) for x in X])  # (n, n_constraints)
        case["constraints"] = cvals.tolist()
        feasible = np.all(cvals <= 0, axis=1)
        y_feasible = np.where(feasible, y, -np.inf)
        threshold = float(y_feasible.max())
        case["threshold"] = threshold
        sc = -cvals
        cmean, cstd = sc.mean(axis=0), sc.std(axis=0)
        cstd = np.maximum(1e-10, cstd)
        cy = (sc - cmean) / cstd
        cthr = (-cmean / cstd).tolist()
        cgprs = [fit(X, cy[:, i], is_cat) for i in range(n_constraints)]
        case["constraint_gps"] = [
            {"y": cy[:, i].tolist(), "threshold": cthr[i], "fit": hyper(g)}
            for i, g in enumerate(cgprs)
        ]
        acqf = acqf_module.LogCEI(
            gpr=gpr,
            search_space=ss,
            threshold=threshold,
            constraints_gpr_list=cgprs,
            constraints_threshold_list=cthr,
        )
        case["acqf"] = values_and_grads(acqf, Xt)
        qmc_seed = int(rng.randint(1 << 30))
        qacqf = acqf_module.qLogCEI(
            gpr=gpr,
            search_space=ss,
            threshold=threshold,
            n_qmc_samples=128,
            qmc_seed=qmc_seed,
            constraints_gpr_list=cgprs,
            constraints_threshold_list=cthr,
            normalized_params_of_running_trials=Xr,
        )
        case["qmc_samples"] = [
            sample_from_normal_sobol(n_running + 1, 128, qmc_seed + i).tolist()
            for i in range(n_constraints + 1)
        ]
    case["qacqf"] = values_and_grads(qacqf, Xt)
    # The optimizer: the best value Optuna finds, over a few seeds.
    best = []
    for s in range(3):
        _, v = optim_mixed.optimize_acqf_mixed(
            acqf, warmstart_normalized_params_array=None, rng=np.random.RandomState(s)
        )
        best.append(float(v))
    case["optimize_best"] = best
    return case


def main():
    cont = {"x%d" % i: FloatDistribution(-2.0, 2.0) for i in range(3)}

    def f_cont(x):
        return float(np.sum((x - 0.3) ** 2) + 0.3 * math.sin(7 * x[0]))

    mixed = {
        "c": CategoricalDistribution(["p", "q", "r"]),
        "f": FloatDistribution(0.0, 1.0),
        "i": IntDistribution(0, 40),
        "lf": FloatDistribution(1e-4, 1.0, log=True),
        "si": IntDistribution(0, 5),
    }

    def f_mixed(x):
        # x is normalized: c index, f, i, lf, si in [0, 1] (ints widened by half a step).
        return float(
            [0.4, 0.0, 0.2][int(x[0])]
            + (x[1] - 0.6) ** 2
            + 0.5 * (x[2] - 0.3) ** 2
            + (x[3] - 0.5) ** 2
            + 0.2 * abs(x[4] - 0.5)
        )

    def c_mixed(x):
        return [float(x[1] - 0.7), float(0.2 - x[3])]

    out = {
        "optuna": optuna.__version__,
        "torch": torch.__version__,
        "normalize": normalize_cases(),
        "standard_logei": standard_logei_cases(),
        "gps": [
            gp_case("continuous", cont, f_cont, 14, 6, 1),
            gp_case("mixed", mixed, f_mixed, 24, 6, 2),
            gp_case("constrained", mixed, f_mixed, 24, 6, 3, 2, c_mixed),
        ],
    }
    json.dump(clean(out), sys.stdout, indent=1, allow_nan=False)
    sys.stdout.write("\n")


def clean(o):
    """JSON has no NaN nor infinities: they are written as null (a threshold of -inf, when no
    trial is feasible; torch's NaN gradient of `standard_logei` far in its tail)."""
    if isinstance(o, float):
        return o if math.isfinite(o) else None
    if isinstance(o, dict):
        return {k: clean(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [clean(v) for v in o]
    return o


if __name__ == "__main__":
    main()
