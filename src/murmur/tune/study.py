"""The Optuna study of each member: its trials, stored as they finish, and resumed.

Every member has one study, named by its label, in the tune folder's SQLite file
``tune.db``. A trial ends in one of three states:

- complete: each seed's run finished; the trial scores their mean
  (:mod:`murmur.tune.objective`);
- pruned: a run that a rule of ``[collapse]`` stopped (diverged, collapsed), or a
  trial that fell behind the median of the trials before it at the same evaluation
  (Optuna's MedianPruner, from :data:`PRUNE_AFTER` complete trials on and past the
  first :data:`PRUNING_WARMUP` of its first seed's run);
- failed: a run failed (a loss that is no longer a number where no rule watches it).

A pruned or failed trial scores nothing, so it is never the chosen point; nor is a
complete trial that sent more than ``--max-bytes-vs-dsgd`` allows
(:mod:`murmur.tune.bytes_limit`). A trial
that an interrupt (Ctrl-C) or a kill cut short is none of these: running the same
command again marks it failed without counting it, runs its point again first,
then as many new trials as the member's budget has left. The study keeps what it
was started with (config, ranges, seeds, sampler); a command that asks for other
settings in the same folder is refused.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from murmur.config import same_config
from murmur.errors import RunFailed, UsageError
from murmur.training.setup import prepare
from murmur.tune.bytes_limit import BYTES, CONSTRAINT, OWN_TRIAL, mean_share, over_limit
from murmur.tune.members import Member, Search
from murmur.tune.objective import Stopped, score_point
from murmur.tune.space import as_record, describe, with_point

DATABASE = "tune.db"
SAMPLER_SEED = 0
"""The TPE and grid samplers' seed; a resumed study's TPE sampler adds the trials it
holds, so that it does not propose the first points again."""
PRUNE_AFTER = 3
"""Complete trials before the pruner judges any."""
PRUNING_WARMUP = 0.3
"""Share of the first seed's iterations before the pruner judges a trial."""
SETTINGS = "murmur"
"""The study's user attribute holding what it was started with."""


@dataclass(frozen=True)
class Tuned:
    """A member's study once this command is done with it."""

    member: Member
    trials: tuple[FrozenTrial, ...]
    chosen: FrozenTrial | None
    """The complete trial of the best score within the bytes limit (the first of ties);
    None: none completed within it."""

    @property
    def seconds(self) -> float:
        """Wall time of its trials, over every command that ran some."""
        return sum(trial_seconds(trial) for trial in self.trials)

    def count(self, state: str) -> int:
        return sum(1 for trial in self.trials if state_of(trial) == state)


def open_storage(folder: Path) -> optuna.storages.RDBStorage:
    """The SQLite storage of the tune folder ``folder``."""
    return optuna.storages.RDBStorage(f"sqlite:///{(folder / DATABASE).resolve()}")


def settings_of(search: Search, member: Member) -> dict[str, Any]:
    """What a study of ``member`` is started with, and must be resumed with."""
    return {
        "config": member.config.to_toml(),
        "space": as_record(member.space),
        "seeds": list(search.seeds),
        "sampler": search.sampler,
        "max_bytes": search.max_bytes,
    }


def check_resumable(storage: optuna.storages.RDBStorage, search: Search, folder: Path) -> None:
    """UsageError where ``folder`` holds a study of a member of ``search`` started with
    other settings."""
    names = set(optuna.study.get_all_study_names(storage))
    for member in search.members:
        if member.label not in names:
            continue
        study = optuna.load_study(study_name=member.label, storage=storage)
        different = _difference(study.user_attrs.get(SETTINGS), search, member)
        if different is not None:
            raise UsageError(
                f"{folder} holds a tune of {member.label} with other {different}; run the same "
                "command to resume it, or give another --out"
            )


def _difference(stored: Any, search: Search, member: Member) -> str | None:
    """What differs between a study's settings and those ``search`` gives ``member``, in
    words; None: nothing."""
    if not isinstance(stored, dict):
        return "settings"
    config = stored.get("config")
    if not isinstance(config, str) or not same_config(config, member.config):
        return "config (target or --set)"
    wanted = settings_of(search, member)
    words = {
        "space": "ranges (--range)",
        "seeds": "seeds (--seeds)",
        "sampler": "--sampler",
        "max_bytes": "--max-bytes-vs-dsgd",
    }
    for key, word in words.items():
        if stored.get(key) != wanted[key]:
            return word
    return None


def tune_member(
    storage: optuna.storages.RDBStorage, search: Search, member: Member, progress: bool
) -> Tuned:
    """Run what is left of ``member``'s budget of trials in its study; the study after."""
    study = optuna.create_study(
        storage=storage,
        study_name=member.label,
        direction=member.objective.direction,
        load_if_exists=True,
    )
    if SETTINGS not in study.user_attrs:
        study.set_user_attr(SETTINGS, settings_of(search, member))
        if search.sampler == "tpe":
            _start_at_own_steps(study, member)
    _requeue_cut_short(study)
    budget = search.trials_of(member)
    left = budget - sum(1 for trial in study.trials if counted(trial))
    if progress:
        _say_start(search, member, budget, left)
    if left > 0:
        study.sampler = _sampler(search, member, len(study.trials))
        study.pruner = _pruner(search, member)
        study.optimize(
            _objective(search, member),
            n_trials=left,
            timeout=search.timeout,
            catch=(RunFailed,),
            callbacks=[_progress_line(search, member, budget)] if progress else [],
        )
    trials = tuple(study.get_trials(deepcopy=False))
    return Tuned(member, trials, chosen(trials, member))


def _objective(search: Search, member: Member) -> Callable[[optuna.Trial], float]:
    """The trial function: suggest a point, score its runs, say how it ended."""

    def objective(trial: optuna.Trial) -> float:
        point = {
            searched.key: trial.suggest_float(
                searched.key, searched.low, searched.high, log=searched.log
            )
            for searched in member.space
        }

        def report(step: int, value: float) -> bool:
            trial.report(value, step)
            return search.pruning and trial.should_prune()

        started = time.perf_counter()
        try:
            scores = score_point(
                with_point(member.config, point), search.seeds, member.objective, report
            )
        except Stopped as stop:
            trial.set_user_attr("stopped", stop.reason)
            trial.set_user_attr("stopped_at", stop.iteration)
            if stop.rule is not None:
                trial.set_user_attr("rule", stop.rule)
            _hold_to_limit(search, trial, stop.bytes_vs_dsgd)
            raise optuna.TrialPruned(stop.reason) from None
        except RunFailed as error:
            trial.set_user_attr("failure", str(error))
            raise
        finally:
            trial.set_user_attr("seconds", time.perf_counter() - started)
        trial.set_user_attr("scores", [seed.score for seed in scores])
        _hold_to_limit(search, trial, mean_share([seed.bytes_vs_dsgd for seed in scores]))
        return sum(seed.score for seed in scores) / len(scores)

    return objective


def _hold_to_limit(search: Search, trial: optuna.Trial, share: float | None) -> None:
    """Record the trial's bytes over DSGD's, and its constraint where a limit applies:
    the search's share, or (``own``) what the member's own-steps trial sent."""
    if share is None:
        return
    trial.set_user_attr(BYTES, share)
    limit = search.max_bytes
    if limit == "own":
        limit = own_bytes(trial.study.get_trials(deepcopy=False))
        if trial.user_attrs.get(OWN_TRIAL):
            limit = share
    if limit is not None:
        trial.set_user_attr("bytes_limit", limit)
        trial.set_constraint(CONSTRAINT, over_limit(share, limit))


def own_bytes(trials: list[FrozenTrial]) -> float | None:
    """What the trial of the member's own steps sent, over DSGD's; None: no such trial
    has ended with a figure."""
    for trial in trials:
        if trial.user_attrs.get(OWN_TRIAL) and BYTES in trial.user_attrs:
            return float(trial.user_attrs[BYTES])
    return None


def _sampler(search: Search, member: Member, held: int) -> optuna.samplers.BaseSampler:
    if search.sampler == "grid":
        grid = {searched.key: list(searched.grid()) for searched in member.space}
        return optuna.samplers.GridSampler(grid, seed=SAMPLER_SEED)
    startup = max(2, min(10, search.trials_of(member) // 3))
    return optuna.samplers.TPESampler(seed=SAMPLER_SEED + held, n_startup_trials=startup)


def _pruner(search: Search, member: Member) -> optuna.pruners.BasePruner:
    if not search.pruning:
        return optuna.pruners.NopPruner()
    warmup = math.ceil(PRUNING_WARMUP * member.config.run.iterations)
    return optuna.pruners.MedianPruner(n_startup_trials=PRUNE_AFTER, n_warmup_steps=warmup)


def _start_at_own_steps(study: optuna.Study, member: Member) -> None:
    """Queue the member's own steps (its preset's) as the new study's first trial, each
    key within its range: TPE then never chooses a point that scores below the steps the
    member came with. A key set to ``"auto"`` takes the value its run chooses on the
    graph of the first seed (CHOCO-SGD's gamma)."""
    own = {}
    for key, value in own_steps(member).items():
        searched = next(searched for searched in member.space if searched.key == key)
        if searched.low <= value <= searched.high:
            own[key] = value
    if own:
        study.enqueue_trial(own, user_attrs={OWN_TRIAL: True})


def own_steps(member: Member) -> dict[str, float]:
    """The value of each searched key in the member's own config, ``"auto"`` resolved;
    keys that are neither a number nor resolved are left out."""
    own: dict[str, float] = {}
    automatic = []
    for searched in member.space:
        value = getattr(member.config.algorithm, searched.key, None)
        if isinstance(value, int | float) and not isinstance(value, bool):
            own[searched.key] = float(value)
        elif value == "auto":
            automatic.append(searched.key)
    if automatic:
        chosen = prepare(member.config).steps
        own.update({key: float(chosen[key]) for key in automatic if key in chosen})
    return own


def _requeue_cut_short(study: optuna.Study) -> None:
    """Mark the trials an interrupt or a kill left running as failed, and queue each
    cut-short trial's point once to run again first."""
    for trial in study.trials:
        if trial.state == TrialState.RUNNING:
            study.tell(trial.number, state=TrialState.FAIL)
    requeued = list(study.user_attrs.get("requeued", []))
    for trial in study.get_trials(deepcopy=False):
        if state_of(trial) == "interrupted" and trial.number not in requeued and trial.params:
            own = {OWN_TRIAL: True} if trial.user_attrs.get(OWN_TRIAL) else None
            study.enqueue_trial(trial.params, user_attrs=own)
            requeued.append(trial.number)
    study.set_user_attr("requeued", requeued)


def counted(trial: FrozenTrial) -> bool:
    """Whether ``trial`` uses one of its member's budget: it completed, was pruned or
    failed (not one that an interrupt cut short, nor one still queued)."""
    return state_of(trial) in ("complete", "pruned", "failed")


def state_of(trial: FrozenTrial) -> str:
    """``complete``, ``pruned``, ``failed``, ``interrupted`` (cut short: run again),
    ``waiting`` (queued) or ``running``."""
    if trial.state == TrialState.COMPLETE:
        return "complete"
    if trial.state == TrialState.PRUNED:
        return "pruned"
    if trial.state == TrialState.FAIL:
        return "failed" if "failure" in trial.user_attrs else "interrupted"
    return "waiting" if trial.state == TrialState.WAITING else "running"


def within_limit(trial: FrozenTrial) -> bool:
    """Whether ``trial`` sent no more than ``--max-bytes-vs-dsgd`` allowed (True where
    no limit applied)."""
    return all(value <= 0 for value in trial.constraints.values())


def chosen(trials: tuple[FrozenTrial, ...], member: Member) -> FrozenTrial | None:
    """The complete trial of the best score within the bytes limit, the first of ties;
    None where none completed within it."""
    complete = [
        trial for trial in trials if trial.state == TrialState.COMPLETE and within_limit(trial)
    ]
    if not complete:
        return None
    sign = 1.0 if member.objective.direction == "maximize" else -1.0
    return max(complete, key=lambda trial: (sign * float(trial.value or 0.0), -trial.number))


def trial_seconds(trial: FrozenTrial) -> float:
    """The trial's wall time: its runs' (stored), else its start to its end."""
    stored = trial.user_attrs.get("seconds")
    if isinstance(stored, int | float):
        return float(stored)
    if trial.datetime_start is None or trial.datetime_complete is None:
        return 0.0
    return (trial.datetime_complete - trial.datetime_start).total_seconds()


def point_text(trial: FrozenTrial) -> str:
    """``a = 0.0412, v0 = 3.1``."""
    return ", ".join(f"{key} = {value:.4g}" for key, value in trial.params.items())


def _say_start(search: Search, member: Member, budget: int, left: int) -> None:
    searched = "; ".join(describe(searched) for searched in member.space)
    done = f" ({budget - left} done, {max(left, 0)} to run)" if left < budget else ""
    seeds = ", ".join(map(str, search.seeds))
    print(
        f"{member.label}: {searched}; {search.sampler}, {budget} trials{done}, "
        f"seed{'s' * (len(search.seeds) > 1)} {seeds}",
        file=sys.stderr,
    )


def _progress_line(
    search: Search, member: Member, budget: int
) -> Callable[[optuna.Study, FrozenTrial], None]:
    """One line on stderr as each trial ends."""

    def line(study: optuna.Study, trial: FrozenTrial) -> None:
        done = sum(1 for other in study.get_trials(deepcopy=False) if counted(other))
        state = state_of(trial)
        if state == "complete":
            outcome = f"validation {member.objective.shown(float(trial.value or 0.0))}"
        elif state == "pruned":
            outcome = f"pruned: {trial.user_attrs.get('stopped', '')}"
        else:
            outcome = f"{state}: {trial.user_attrs.get('failure', '')}"
        print(
            f"{member.label} trial {done}/{budget}: {point_text(trial)} -> {outcome} "
            f"({trial_seconds(trial):.1f} s)",
            file=sys.stderr,
        )

    return line
