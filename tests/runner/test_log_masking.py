"""The runner masks the job's secrets in its log, wherever the reads of the output split them."""

from __future__ import annotations

import io
import os
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from starforge.contract.env import Binding
from starforge.contract.secrets import Mount, SecretValue
from starforge.runner.secrets import Masker, deliver, hide_in_argv, pump

TOKEN = "hf_abcdefghij0123456789"


def stream(masker: Masker, chunks: list[bytes]) -> bytes:
    return b"".join(masker.feed(c) for c in chunks) + masker.flush()


def test_a_value_in_one_line_is_replaced_by_stars() -> None:
    out = stream(Masker([TOKEN]), [f"token is {TOKEN}\nnext line\n".encode()])
    assert out == b"token is ***\nnext line\n"


def test_a_value_split_across_reads_at_every_point_is_still_masked() -> None:
    text = f"a {TOKEN} b {TOKEN}\n".encode()
    for cut in range(1, len(text)):
        assert stream(Masker([TOKEN]), [text[:cut], text[cut:]]) == b"a *** b ***\n"


def test_output_without_a_value_passes_through_as_soon_as_it_cannot_start_one() -> None:
    masker = Masker([TOKEN])
    assert masker.feed(b"step 1/3 loss=0.5\r") == b"step 1/3 loss=0.5\r"  # no newline, no wait
    assert masker.feed(b"progress hf_abc") == b"progress "  # might begin the token: held
    assert masker.feed(b"d done\n") == b"hf_abcd done\n"  # it did not: released


def test_the_longest_of_overlapping_values_is_masked_whole() -> None:
    out = stream(Masker(["secret-one", "secret-one-and-more"]), [b"x secret-one-and-more y\n"])
    assert out == b"x *** y\n"


def test_values_too_short_to_mask_are_left_alone() -> None:
    assert stream(Masker(["ab"]), [b"abc\n"]) == b"abc\n"


@given(st.lists(st.integers(min_value=1, max_value=7), min_size=1, max_size=40))
def test_no_way_of_chunking_the_output_lets_a_value_through(sizes: list[int]) -> None:
    text = f"start {TOKEN}{TOKEN} mid {TOKEN[:5]} end {TOKEN}".encode()
    chunks, i = [], 0
    for n in sizes * 10:
        if i >= len(text):
            break
        chunks.append(text[i : i + n])
        i += n
    chunks.append(text[i:])
    out = stream(Masker([TOKEN]), chunks)
    assert TOKEN.encode() not in out
    assert out == f"start ****** mid {TOKEN[:5]} end ***".encode()


def test_the_pump_copies_a_pipe_into_the_log_masked(tmp_path: Path) -> None:
    read, write = os.pipe()
    log = io.BytesIO()
    thread = pump(os.fdopen(read, "rb"), log, Masker([TOKEN]))
    with os.fdopen(write, "wb") as job:
        job.write(f"HF_TOKEN={TOKEN[:7]}".encode())
        job.flush()
        job.write(f"{TOKEN[7:]}\nbye\n".encode())
    thread.join(timeout=10)
    assert log.getvalue() == b"HF_TOKEN=***\nbye\n"


def test_a_container_gets_secret_values_through_its_environment_not_its_argv() -> None:
    argv = ["podman", "run", "-e", "A=1", "-e", f"HF_TOKEN={TOKEN}", "img", "echo", "HF_TOKEN=x"]
    clean, env = hide_in_argv(argv, {"HF_TOKEN"})
    assert clean == ["podman", "run", "-e", "A=1", "-e", "HF_TOKEN", "img", "echo", "HF_TOKEN=x"]
    assert env == {"HF_TOKEN": TOKEN}


def test_a_file_secret_is_a_0600_file_whose_path_is_in_name_file(tmp_path: Path) -> None:
    b = Binding(
        run_id="r1",
        attempt=1,
        user="alice",
        storage_root=str(tmp_path),
        run_dir=str(tmp_path / "run"),
        work_dir=str(tmp_path / "run" / "work"),
        out_dir=str(tmp_path / "run" / "out"),
        log_path=str(tmp_path / "log"),
    )
    env: dict[str, str] = {}
    values = [
        SecretValue(name="KEY_JSON", mount=Mount.FILE, value='{"k": 1}'),
        SecretValue(name="HF_TOKEN", value=TOKEN),
    ]
    deliver(values, env, b)
    path = Path(env["KEY_JSON_FILE"])
    assert path.read_text() == '{"k": 1}' and (path.stat().st_mode & 0o777) == 0o600
    assert (path.parent.stat().st_mode & 0o777) == 0o700
    assert env["HF_TOKEN"] == TOKEN and "KEY_JSON" not in env
