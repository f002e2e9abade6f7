"""The submission path on the researcher's machine, step by step.

1. find the lab and the experiment; 2. validate flags locally (profile grammar, required inputs);
3. provenance (full commit, dirty tree refused unless ``--allow-dirty``, untracked files warned);
4. pack (git's file list + inputs, secrets refused, sha256 manifest); 5. resolve the profiles
against the server's registry; 6. upload only the blobs the server lacks; 7. ``POST /jobs`` with
spec + manifest + idempotency key. Every check that can fail runs before a byte is uploaded, and
nothing is created on the server unless admission accepts the whole request.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from starforge import __version__
from starforge.catalog.loader import Method, get_method
from starforge.client.http import Client
from starforge.contract import profiles as profile_grammar
from starforge.contract.api import SubmitRequest, SubmitResponse
from starforge.contract.errors import MissingInput, ServerUnreachable, StarForgeError
from starforge.contract.jobspec import Inputs, JobSpec, Manifest, Provenance
from starforge.project import experiments, git, packer
from starforge.project.lab import find_lab

FLAG_OF = {"model": "--model", "train_data": "--train-data", "validation_data": "--validation-data"}


@dataclass
class SubmitOptions:
    experiment: str
    profiles: list[str]
    model: str | None = None
    train_data: str | None = None
    validation_data: str | None = None
    allow_dirty: bool = False
    cwd: Path | None = None


@dataclass
class Prepared:
    """Everything known before the server is contacted."""

    spec: JobSpec
    manifest: Manifest
    root: Path
    method: Method
    warnings: list[str] = field(default_factory=list)


@dataclass
class Submitted:
    response: SubmitResponse
    files_uploaded: int
    bytes_uploaded: int
    files_skipped: int
    bytes_skipped: int
    warnings: list[str]


def _inputs(root: Path, opts: SubmitOptions, method: Method) -> tuple[Inputs, list[str]]:
    given = {
        "model": opts.model,
        "train_data": opts.train_data,
        "validation_data": opts.validation_data,
    }
    missing = [FLAG_OF[k] for k in method.requires if not given.get(k)]
    if missing:
        raise MissingInput(
            f"method {method.id} needs {', '.join(missing)}",
            hint="e.g. --model models/tiny-llama --train-data data/train.jsonl "
            "--validation-data data/val.jsonl (paths relative to the lab root)",
            details={"missing": missing},
        )
    refs, files = {}, []
    for key, value in given.items():
        if not value:
            continue
        if key != "model":
            packer.check_data_format(FLAG_OF[key], value)
        resolved = packer.resolve_input(root, FLAG_OF[key], value, hub_ok=key == "model")
        refs[key] = resolved.ref
        files.extend(resolved.files)
    return Inputs(**refs), files


def prepare(opts: SubmitOptions) -> Prepared:
    """Steps 1-4: everything local. Raises before anything leaves the machine."""
    lab = find_lab(opts.cwd)
    exp = experiments.load_experiment(lab, opts.experiment)
    method = get_method(exp.method.id)
    profile_grammar.parse_profile_args(opts.profiles)
    inputs, input_files = _inputs(lab.root, opts, method)
    state = git.read_state(lab.root, [exp.relpath, *packer.SHARED_DIRS])
    git.require_clean(state, allow_dirty=opts.allow_dirty)
    warnings = [
        f"untracked file will travel with the run but is not in commit {state.commit[:12]}: {p}"
        for p in state.untracked
    ]
    if state.dirty:
        warnings.append(
            f"submitting uncommitted changes (--allow-dirty): {', '.join(state.changed)}"
        )
    manifest = packer.build_manifest(lab.root, [*state.tracked, *state.untracked, *input_files])
    entry = f"{exp.relpath}/{method.entrypoint.file}"
    if entry not in {f.path for f in manifest.files}:
        raise StarForgeError(
            f"{entry} is missing: {method.id} runs it",
            hint="restore it, or recreate the experiment with `sf new`",
        )
    spec = JobSpec(
        project=lab.name,
        experiment=exp.name,
        method=exp.method,
        profiles=opts.profiles,
        inputs=inputs,
        provenance=Provenance(
            git_commit=state.commit,
            git_dirty=state.dirty,
            untracked=state.untracked,
            client_version=__version__,
        ),
    )
    return Prepared(spec=spec, manifest=manifest, root=lab.root, method=method, warnings=warnings)


def check_profiles(client: Client, prepared: Prepared) -> None:
    """Step 5: the profiles must resolve against the server's registry before any upload."""
    registry = client.profiles().profiles
    requests = profile_grammar.parse_profile_args(prepared.spec.profiles)
    profile_grammar.resolve(requests, registry, prepared.method.roles)


def upload_and_submit(
    client: Client,
    prepared: Prepared,
    on_upload_start: Callable[[int, int], None] | None = None,
    on_progress: Callable[[int], None] | None = None,
) -> Submitted:
    """Steps 6-7: upload the blobs the server lacks, then ask it to admit the run."""
    by_digest = {f.sha256: f for f in prepared.manifest.files}
    missing = set(client.missing_blobs(sorted(by_digest)))
    todo = [by_digest[d] for d in sorted(missing)]
    todo_bytes = sum(f.size for f in todo)
    if on_upload_start:
        on_upload_start(len(todo), todo_bytes)
    for entry in todo:
        client.upload_blob(entry.sha256, prepared.root / entry.path, on_progress)
    request = SubmitRequest(
        spec=prepared.spec, manifest=prepared.manifest, idempotency_key=uuid.uuid4().hex
    )
    response = _submit_with_retry(client, request)
    unique = len(by_digest)
    total = sum(f.size for f in by_digest.values())
    return Submitted(
        response=response,
        files_uploaded=len(todo),
        bytes_uploaded=todo_bytes,
        files_skipped=unique - len(todo),
        bytes_skipped=total - todo_bytes,
        warnings=[*prepared.warnings, *response.warnings],
    )


def _submit_with_retry(client: Client, request: SubmitRequest) -> SubmitResponse:
    """A lost response is retried with the same idempotency key: never two runs for one submit."""
    try:
        return client.submit(request)
    except ServerUnreachable:
        return client.submit(request)
