from __future__ import annotations

from starforge.catalog.loader import all_methods, get_method, load_file
from starforge.catalog.locks import LockState, lock_state, new_lock
from starforge.contract.jobspec import ParamBinding


def test_every_builtin_declaration_loads_with_a_digest() -> None:
    for method in all_methods().values():
        assert method.digest.startswith("sha256:")
        assert load_file(method.template_dir.parent / "method.yaml").digest == method.digest


def test_a_fresh_lock_is_current_and_records_what_the_config_binds() -> None:
    method = get_method("trl/grpo")
    ref = new_lock(method, {"learning_rate": 0.02, "unrelated": 1})
    assert lock_state(ref).state is LockState.CURRENT
    assert ref.bindings == {"learning_rate": ParamBinding(path="learning_rate", type="float")}
    assert ref.framework_version == method.runtime.default


def test_a_changed_declaration_that_binds_nothing_different_is_drifted() -> None:
    ref = new_lock(get_method("trl/grpo"), {"learning_rate": 0.02})
    old = ref.model_copy(update={"version": "1.15.0", "digest": "sha256:" + "0" * 64})
    status = lock_state(old)
    assert status.state is LockState.DRIFTED
    assert status.state.submittable
    assert "1.15.0" in status.reasons[0]


def test_a_retyped_bound_parameter_is_incompatible() -> None:
    ref = new_lock(get_method("trl/grpo"), {"learning_rate": 0.02})
    old = ref.model_copy(
        update={"bindings": {"learning_rate": ParamBinding(path="learning_rate", type="int")}}
    )
    status = lock_state(old)
    assert status.state is LockState.INCOMPATIBLE
    assert "changed type from int to float" in status.reasons[0]


def test_a_moved_or_removed_bound_parameter_is_incompatible() -> None:
    ref = new_lock(get_method("trl/grpo"), {})
    moved = ref.model_copy(
        update={"bindings": {"beta": ParamBinding(path="kl.beta", type="float")}}
    )
    removed = ref.model_copy(update={"bindings": {"gone": ParamBinding(path="g", type="int")}})
    assert "moved from kl.beta to beta" in lock_state(moved).reasons[0]
    assert "'gone' was removed" in lock_state(removed).reasons[0]


def test_a_removed_runtime_is_incompatible_and_an_unknown_method_malformed() -> None:
    ref = new_lock(get_method("trl/grpo"), {})
    assert (
        lock_state(ref.model_copy(update={"framework_version": "0.1"})).state
        is LockState.INCOMPATIBLE
    )
    assert lock_state(ref.model_copy(update={"id": "trl/nope"})).state is LockState.MALFORMED
    assert lock_state(None).state is LockState.MALFORMED
