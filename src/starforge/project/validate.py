"""Local validation of an experiment, the same rules admission applies again.

Order: the lock (current / drifted / incompatible / malformed), the config (composed from its
``defaults``; no platform-owned key), the parameters (``-s`` and config values against the typed
declaration), the framework's static checks (profile-aware when pools are known). Everything
raises before a byte leaves the machine.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from starforge.catalog.checks import CheckContext, run_checks
from starforge.catalog.loader import Method
from starforge.catalog.locks import LockState, LockStatus, lock_state
from starforge.contract import params
from starforge.contract.config import MISSING, get_path
from starforge.contract.errors import ConfigError, LockError, UsageError
from starforge.contract.profiles import Pool
from starforge.project.experiments import Experiment, composed_config
from starforge.project.lab import Lab


@dataclass
class Validated:
    experiment: Experiment
    method: Method
    lock: LockStatus
    config: dict[str, Any]  # composed, before parameters are applied
    hyperparams: dict[str, Any]
    warnings: list[str] = field(default_factory=list)

    @property
    def run_config(self) -> dict[str, Any]:
        return params.apply(self.method.params, self.config, self.hyperparams)


def check_lock(exp: Experiment, *, strict: bool = True) -> LockStatus:
    status = lock_state(exp.method)
    if status.state is LockState.MALFORMED:
        raise LockError(
            f"experiment {exp.name!r}: {exp.lock_error or '; '.join(status.reasons)}",
            hint=f"recreate it with `sf new {exp.name}-2 --from ...` or `sf new` with a method",
        )
    if status.state is LockState.INCOMPATIBLE and strict:
        raise LockError(
            f"experiment {exp.name!r} is locked to a declaration the catalog no longer "
            f"matches: {'; '.join(status.reasons)}",
            hint=f"upgrade the lock: sf submit {exp.name} --upgrade-recipe ... (then commit "
            "method.lock.json)",
            details={"reasons": status.reasons},
        )
    return status


def check_reserved(method: Method, config: dict[str, Any], exp: Experiment) -> None:
    owned = [key for key in method.config.reserved if get_path(config, key) is not MISSING]
    if owned:
        raise ConfigError(
            f"{exp.relpath}/{method.config.file} sets {', '.join(owned)}: the platform owns "
            "these (outputs and topology are decided per run)",
            hint="remove them from the config; the job receives them from the platform",
            details={"keys": owned},
        )


def validate(
    lab: Lab,
    exp: Experiment,
    sets: list[str] | None = None,
    *,
    pools: list[Pool] | None = None,
    framework_version: str | None = None,
    strict: bool = True,
    checks: bool = True,
) -> Validated:
    """Validate ``exp`` with the submission's ``-s`` values; ``strict=False`` is --no-validate.
    ``checks=False`` leaves the framework checks to a caller that runs them once the profile is
    known (``sf submit``): a rule on the world size cannot be judged without it."""
    status = check_lock(exp, strict=strict)
    assert exp.method is not None and status.method is not None
    method = status.method
    locked = exp.method.framework_version
    if framework_version and locked and framework_version != locked:
        raise UsageError(
            f"experiment {exp.name!r} is locked to {method.id} framework version {locked}, "
            f"not {framework_version}",
            hint=f"to switch: sf submit {exp.name} --upgrade-recipe --framework-version "
            f"{framework_version}",
        )
    warnings = [f"lock: {r}" for r in status.reasons]
    config = composed_config(lab, exp.name, method)
    if strict:
        check_reserved(method, config, exp)
    hyperparams = params.resolve(
        method.params,
        config,
        sets or [],
        config_name=f"{exp.relpath}/{method.config.file}",
        strict=strict,
    )
    result = Validated(exp, method, status, config, hyperparams, warnings)
    if strict and checks:
        run_checks(CheckContext(method, result.run_config, pools))
    return result
