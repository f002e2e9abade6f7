"""How Slurm's job states read back into StarForge: squeue's JSON, and the end of a node."""

from __future__ import annotations

import sys

import pytest

from starforge.contract.states import EndReason
from starforge.server.executors.slurm import SlurmError, query_json
from starforge.server.executors.slurm_states import Ending, ending, parse_jobs


@pytest.mark.parametrize(
    ("state", "exit_code", "sig", "expected"),
    [
        ("COMPLETED", 0, None, Ending(False, 0, EndReason.COMPLETED)),
        ("FAILED", 3, None, Ending(False, 3, EndReason.EXIT_NONZERO)),
        ("FAILED", 0, None, Ending(False, 1, EndReason.EXIT_NONZERO)),
        ("FAILED", 0, 9, Ending(False, 137, EndReason.EXIT_NONZERO)),
        ("CANCELLED", 0, None, Ending(False, 143, None)),
        ("CANCELLED", 0, 9, Ending(False, 137, None)),
        ("TIMEOUT", 0, None, Ending(False, 143, EndReason.EXIT_NONZERO)),
        ("OUT_OF_MEMORY", 0, None, Ending(False, 137, EndReason.OOM)),
        ("PREEMPTED", 0, None, Ending(False, 143, EndReason.PREEMPTED)),
        ("NODE_FAIL", 0, None, Ending(True, None, EndReason.NODE_LOST)),
        ("BOOT_FAIL", 0, None, Ending(True, None, EndReason.NODE_LOST)),
        ("DEADLINE", 0, None, Ending(False, 143, EndReason.EXIT_NONZERO)),
        ("SOMETHING_NEW", 0, None, Ending(False, 1, EndReason.EXIT_NONZERO)),
    ],
)
def test_each_final_slurm_state_ends_a_node_with_a_code_and_a_reason(
    state: str, exit_code: int, sig: int | None, expected: Ending
) -> None:
    assert ending(state, exit_code, sig) == expected


def test_squeue_2205_json_is_read_with_its_raw_wait_status() -> None:
    payload = {
        "jobs": [
            {"job_id": 4, "name": "sf.r-1.1", "job_state": "FAILED", "state_reason":
             "NonZeroExitCode", "exit_code": 768, "nodes": "h200-1"},
            {"job_id": 5, "name": "sf.r-2.1", "job_state": "PENDING", "state_reason":
             "Resources", "exit_code": 0, "nodes": ""},
            {"job_id": 6, "name": "x", "job_state": "CANCELLED", "state_reason": "None",
             "exit_code": 15},
        ]
    }  # fmt: skip
    jobs = parse_jobs(payload)
    assert (jobs[4].state, jobs[4].exit_code, jobs[4].signal, jobs[4].alive) == (
        "FAILED",
        3,
        None,
        False,
    )
    assert (jobs[5].alive, jobs[5].pending_reason) == (True, "Resources")
    assert (jobs[6].exit_code, jobs[6].signal) == (0, 15)


def test_squeue_json_of_later_slurm_versions_is_read_too() -> None:
    payload = {
        "jobs": [
            {
                "job_id": 7,
                "name": "sf.r-3.2",
                "job_state": ["RUNNING", "COMPLETING"],
                "state_reason": "None",
                "exit_code": {"return_code": {"number": 0}, "signal": {"id": {"number": 0}}},
            },
            {"job_id": 8, "job_state": ["PENDING"], "state_reason": "Priority"},
        ]
    }
    jobs = parse_jobs(payload)
    assert (jobs[7].state, jobs[7].alive, jobs[7].pending_reason) == ("RUNNING", True, None)
    assert jobs[8].pending_reason == "Priority"


def test_a_pending_job_slurm_has_not_looked_at_yet_still_says_it_waits() -> None:
    jobs = parse_jobs({"jobs": [{"job_id": 9, "job_state": "PENDING", "state_reason": "None"}]})
    assert jobs[9].pending_reason == "waiting in Slurm"


def test_a_json_answer_that_carries_errors_is_a_failure_not_an_empty_cluster() -> None:
    # Slurm 22.05 exits 0 when its controller does not answer, with the failure inside the JSON.
    answer = '{"errors": [{"error": "Unspecified error", "errno": -1}], "nodes": []}'
    with pytest.raises(SlurmError, match="Unspecified error"):
        query_json([sys.executable, "-c", f"print({answer!r})"])
    assert query_json([sys.executable, "-c", 'print(\'{"errors": [], "jobs": []}\')']) == {
        "errors": [],
        "jobs": [],
    }
