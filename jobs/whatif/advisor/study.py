"""The optimiser (issue 25): optuna's TPE sampler, rebuilt from the stored candidates for every
ask (pure: no Django).

**Reproducible by construction.** Candidate ``n`` (1, 2, …; 0 is today's settings) is drawn by a
fresh in-memory study whose sampler is seeded with ``(seed, n)`` and which is told exactly the
scored candidates ``0 … n − K − 1`` (``K`` = candidates in flight), in number order. Nothing
else — not which worker finished first, not a restart — reaches the sampler, so the same seed
and the same replay results give the same candidates, whatever the number of workers or crashes.
The price: candidate ``n`` waits until candidates below ``n − K`` are scored (with K workers
and similar replay times this never idles a worker for long).

Infeasible candidates are told with optuna's constraint mechanism (the number of violations >
0), so TPE learns the feasible region instead of a made-up penalty value.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from jobs.whatif.advisor.space import Dimension

CONSTRAINTS_KEY = "constraints:violations"  # what Trial.set_constraint("violations", …) stores; TPE reads it


@dataclass(frozen=True)
class Told:
    """A scored candidate as the sampler sees it."""

    number: int
    params: Mapping
    objective: float
    violations: int  # 0 = feasible


def sampler_seed(seed: int, number: int) -> int:
    return (int(seed) * 1_000_003 + int(number)) % 2**32


def history_for(number: int, in_flight: int) -> int:
    """Candidates ``0 … h − 1`` are told to the sampler that draws candidate ``number``."""
    return max(0, number - in_flight)


def _distributions(dims: Sequence[Dimension]):
    import optuna.distributions as od

    out = {}
    for d in dims:
        if d.fixed:
            continue
        if d.choices:
            out[d.name] = od.CategoricalDistribution(list(d.choices))
        elif d.integer:
            out[d.name] = od.IntDistribution(int(d.low), int(d.high))
        else:
            out[d.name] = od.FloatDistribution(float(d.low), float(d.high))
    return out


def _inside(params: Mapping, dists: Mapping) -> bool:
    import optuna.distributions as od

    for name, dist in dists.items():
        v = params.get(name)
        if isinstance(dist, od.CategoricalDistribution):
            if v not in dist.choices:
                return False
        elif v is None or not dist.low <= v <= dist.high:
            return False
    return True


def next_params(seed: int, number: int, dims: Sequence[Dimension], told: Sequence[Told]) -> dict:
    """Params of candidate ``number``: the fixed dimensions' values, the rest from TPE."""
    import optuna

    optuna.logging.set_verbosity(logging.WARNING)
    dists = _distributions(dims)
    fixed = {d.name: (d.choices[0] if d.choices else d.low) for d in dims if d.fixed}
    sampler = optuna.samplers.TPESampler(seed=sampler_seed(seed, number))
    study = optuna.create_study(direction="minimize", sampler=sampler)
    for t in sorted(told, key=lambda t: t.number):
        params = {k: t.params[k] for k in dists if k in t.params}
        if len(params) != len(dists) or not _inside(params, dists):
            continue  # outside today's bounds (today's settings can be): nothing to learn from
        study.add_trial(optuna.trial.create_trial(
            params=params, distributions=dists, value=float(t.objective),
            system_attrs={CONSTRAINTS_KEY: float(t.violations)}))
    trial = study.ask(dists)
    out = {**fixed, **trial.params}
    for d in dims:  # ints stay ints, whatever optuna hands back
        if d.integer and not d.choices:
            out[d.name] = int(out[d.name])
    return out
