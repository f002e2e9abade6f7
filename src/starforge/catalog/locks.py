"""Lock states: how an experiment's ``method.lock.json`` relates to the catalog.

* current: the lock names this exact declaration (version and digest);
* drifted: the declaration changed, but nothing this experiment binds did (submittable, with a
  warning);
* incompatible: a bound parameter was removed, moved or retyped, or the locked runtime is gone;
* malformed: unreadable, or it names a method the catalog does not have.

The same function decides on the laptop (``sf ls``, ``sf validate``, ``sf submit``) and at
admission (the catalog handshake), from the lock the submission carries.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from starforge.catalog.loader import Method, find_method
from starforge.contract.jobspec import MethodRef, ParamBinding
from starforge.contract.params import bound_names


class LockState(StrEnum):
    CURRENT = "current"
    DRIFTED = "drifted"
    INCOMPATIBLE = "incompatible"
    MALFORMED = "malformed"

    @property
    def submittable(self) -> bool:
        return self in (LockState.CURRENT, LockState.DRIFTED)


@dataclass
class LockStatus:
    state: LockState
    reasons: list[str] = field(default_factory=list)
    method: Method | None = None


def lock_state(ref: MethodRef | None) -> LockStatus:
    if ref is None:
        return LockStatus(LockState.MALFORMED, ["the lock is missing or unreadable"])
    method = find_method(ref.id)
    if method is None:
        return LockStatus(LockState.MALFORMED, [f"the catalog has no method {ref.id!r}"])
    reasons = []
    if ref.framework_version and ref.framework_version not in method.runtime.versions:
        reasons.append(
            f"framework version {ref.framework_version} was removed from {ref.id} "
            f"(available: {', '.join(method.runtime.versions)})"
        )
    elif ref.framework_version:
        runtime = method.runtime.versions[ref.framework_version]
        if ref.runtime_id and runtime.runtime_id != ref.runtime_id:
            reasons.append(f"runtime {ref.runtime_id} is now {runtime.runtime_id}")
    for name, bound in sorted(ref.bindings.items()):
        param = method.params.get(name)
        if param is None:
            reasons.append(f"bound parameter {name!r} was removed")
        elif param.path != bound.path:
            reasons.append(f"bound parameter {name!r} moved from {bound.path} to {param.path}")
        elif str(param.type) != bound.type:
            reasons.append(
                f"bound parameter {name!r} changed type from {bound.type} to {param.type}"
            )
    if reasons:
        return LockStatus(LockState.INCOMPATIBLE, reasons, method)
    if ref.version == method.version and ref.digest == method.digest:
        return LockStatus(LockState.CURRENT, [], method)
    return LockStatus(
        LockState.DRIFTED,
        [
            f"locked to {ref.id} {ref.version} ({ref.digest[:19]}), the catalog has "
            f"{method.version} ({method.digest[:19]}); nothing this experiment binds changed"
        ],
        method,
    )


def new_lock(
    method: Method, config: dict[str, object], framework_version: str | None = None
) -> MethodRef:
    """The lock for an experiment whose composed config is ``config``."""
    ref = method.ref(framework_version)
    bindings = {
        name: ParamBinding(path=str(method.params[name].path), type=str(method.params[name].type))
        for name in bound_names(method.params, config)
    }  # type: ignore[arg-type]
    return ref.model_copy(update={"bindings": bindings})
