"""The submission path on the researcher's machine, step by step.

1. find the lab and the experiment (``--upgrade-recipe`` rewrites its lock first); 2. validate
locally: profile grammar (parsed once), the lock's state, the composed config, ``-s`` values
against the method's typed parameters, the framework's static checks, the given inputs' files;
3. provenance (full commit, dirty tree refused unless ``--allow-dirty``, untracked files warned);
4. pack (git's file list + inputs, secrets refused, sha256 manifest), then the submission check
admission runs too (:func:`contract.submission.check_submission`: roles, required inputs, image,
entrypoint, parameters); 5. resolve the parsed profiles against the server's registry (the
profile's env comes with the pools) and rerun the checks that depend on the data-parallel size;
6. upload only the blobs the server lacks; 7. ``POST /jobs`` with spec + manifest + idempotency
key. Every check that can fail runs before a byte is uploaded, and nothing is created on the
server unless admission accepts the whole request.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from starforge import __version__
from starforge.catalog.checks import CheckContext, run_checks
from starforge.catalog.loader import Method, get_method
from starforge.client import pending, uploads
from starforge.client.http import Client
from starforge.contract import datasets, lineage, observability
from starforge.contract import profiles as profile_grammar
from starforge.contract.api import ProfilesResponse, SubmitRequest, SubmitResponse
from starforge.contract.config import MISSING, get_path
from starforge.contract.errors import LockError, ServerUnreachable, StarForgeError, UsageError
from starforge.contract.images import check_image
from starforge.contract.jobspec import (
    InputKind,
    InputRef,
    Inputs,
    JobSpec,
    Manifest,
    Provenance,
    check_relpath,
)
from starforge.contract.profiles import Pool, ProfileRequest
from starforge.contract.secrets import (
    SecretRequest,
    merge_requests,
    parse_config_secrets,
    refuse_reserved,
    request_of,
)
from starforge.contract.steps import check_steps
from starforge.contract.submission import INPUT_FLAGS, check_submission
from starforge.project import experiments, git, packer
from starforge.project.lab import Lab, find_lab
from starforge.project.validate import Validated, validate
from starforge.steps import gate


@dataclass
class SubmitOptions:
    experiment: str
    profiles: list[str]
    model: str | None = None
    train_data: str | None = None
    validation_data: str | None = None
    sets: list[str] = field(default_factory=list)
    image: str | None = None
    allow_dirty: bool = False
    no_validate: bool = False
    upgrade_recipe: bool = False
    framework_version: str | None = None
    cwd: Path | None = None
    observability_url: str | None = None
    max_retries: int | None = None  # automatic requeues after a lost node (None: method default)
    secrets: list[str] = field(default_factory=list)  # --secret NAME: names only, never values
    steps: list[str] = field(default_factory=list)  # --then ACTION, in order
    init_from: str | None = None  # --init-from run/RUN_ID/KIND[@step=N] (contract.lineage)
    train_dataset: str | None = None  # OWNER/NAME[@VERSION]; overrides data.train.dataset
    validation_dataset: str | None = None  # overrides data.validation.dataset
    output_dataset: str | None = None  # OWNER/NAME@VERSION to publish FORGE_DATASET_OUT_DIR as


@dataclass
class Prepared:
    """Everything known before the server is contacted."""

    spec: JobSpec
    manifest: Manifest
    root: Path
    validated: Validated
    requests: list[ProfileRequest]  # --profile, parsed once
    strict: bool = True
    warnings: list[str] = field(default_factory=list)
    pools: list[Pool] = field(default_factory=list)  # known after check_profiles
    hf_offline: bool = True  # the server's, known after check_profiles
    max_retries: int | None = None
    contents: dict[str, bytes] = field(default_factory=dict)  # small files read while packing

    @property
    def method(self) -> Method:
        return self.validated.method


@dataclass
class Submitted:
    response: SubmitResponse
    files_uploaded: int
    bytes_uploaded: int
    files_skipped: int
    bytes_skipped: int
    warnings: list[str]


def _inputs(
    root: Path, opts: SubmitOptions, datasets: dict[str, str] | None = None
) -> tuple[Inputs, list[str]]:
    """The given inputs resolved on this machine (their files must exist); which inputs a
    method requires is checked with the rest of the submission (``check_submission``).
    An input with a dataset (``datasets``) is a path inside it, checked at admission."""
    given = {
        "model": opts.model,
        "train_data": opts.train_data,
        "validation_data": opts.validation_data,
    }
    refs, files = {}, []
    for key, value in given.items():
        if datasets and key in datasets:
            refs[key] = dataset_input(INPUT_FLAGS[key], value, datasets[key])
            continue
        if not value:
            continue
        if key != "model":
            packer.check_data_format(INPUT_FLAGS[key], value)
        resolved = packer.resolve_input(root, INPUT_FLAGS[key], value, hub_ok=key == "model")
        refs[key] = resolved.ref
        files.extend(resolved.files)
    return Inputs(**refs), files


def dataset_refs(opts: SubmitOptions, config: dict[str, Any]) -> dict[str, str]:
    """Input -> dataset reference: the flag, else the config's ``data.<split>.dataset``; the
    validation data falls back to the training dataset. Malformed references: exit 2."""
    given = {"train_data": opts.train_dataset, "validation_data": opts.validation_dataset}
    refs: dict[str, str] = {}
    for key, path in datasets.CONFIG_PATHS.items():
        value = given[key] or get_path(config, path)
        if value is MISSING or value is None:
            continue
        where = datasets.FLAGS[key] if given[key] else path
        refs[key] = str(datasets.parse_ref(str(value), where))
    if "train_data" in refs and "validation_data" not in refs and opts.validation_data:
        refs["validation_data"] = refs["train_data"]
    return refs


def output_dataset_ref(value: str | None) -> str:
    """``--output-dataset`` checked: a full ``OWNER/NAME@VERSION`` (exit 2 otherwise)."""
    if not value:
        return ""
    ref = datasets.parse_ref(value, "--output-dataset")
    if not ref.version:
        raise UsageError(
            f"--output-dataset {value}: name the version to publish",
            hint=f"e.g. --output-dataset {ref}@v1",
        )
    return str(ref)


def dataset_input(flag: str, value: str | None, ref: str) -> InputRef:
    """``--train-data`` inside a dataset (the whole dataset when not given)."""
    if not value:
        return InputRef(kind=InputKind.DATASET, value=".", dataset=ref)
    packer.check_data_format(flag, value)
    try:
        check_relpath(value)
    except ValueError:
        raise UsageError(
            f"{flag} {value}: with a dataset, give a path inside it (e.g. train.jsonl)",
            hint=f"`sf dataset show {ref}` lists its files",
        ) from None
    return InputRef(kind=InputKind.DATASET, value=value, dataset=ref)


def _upgrade(lab: Lab, name: str, framework_version: str | None) -> str:
    exp = experiments.load_experiment(lab, name)
    if exp.method is None:
        raise LockError(
            f"cannot upgrade {name!r}: {exp.lock_error}",
            hint="recreate the experiment with `sf new`",
        )
    method = get_method(exp.method.id)
    ref = experiments.lock_experiment(lab, name, method, framework_version)
    return (
        f"upgraded {exp.relpath}/{experiments.LOCK_FILE} to {ref.id} {ref.version} "
        f"(framework {ref.framework_version}); commit it"
    )


def requested_secrets(config: dict[str, Any], flags: list[str]) -> list[SecretRequest]:
    """The secrets a run asks for: the config's ``secrets:`` and ``--secret`` (names only)."""
    try:
        from_config = parse_config_secrets(config)
        from_flags = [request_of(name) for name in flags]
    except ValueError as exc:
        raise UsageError(str(exc), hint="a secret is named like an environment variable") from None
    merged = merge_requests(from_config, from_flags)
    try:
        refuse_reserved(merged)  # the same rule as admission's
    except ValueError as exc:
        raise UsageError(str(exc), hint="rename the secret (`sf secret set MY_NAME`)") from None
    return merged


def prepare(opts: SubmitOptions) -> Prepared:
    """Everything local: lock, validation, inputs, provenance, pack. Raises before upload."""
    lab = find_lab(opts.cwd)
    experiments.load_experiment(lab, opts.experiment)  # a clear error for an unknown name
    warnings = (
        [_upgrade(lab, opts.experiment, opts.framework_version)] if opts.upgrade_recipe else []
    )
    exp = experiments.load_experiment(lab, opts.experiment)
    requests = profile_grammar.parse_profile_args(opts.profiles)
    init_from = lineage.parse_init_from(opts.init_from) if opts.init_from else None
    validated = validate(  # the framework checks run with the profile (resolve_profiles)
        lab,
        exp,
        opts.sets,
        framework_version=opts.framework_version,
        strict=not opts.no_validate,
        checks=False,
    )
    warnings += validated.warnings
    method = validated.method
    check_steps(opts.steps, method.actions, method.id)  # before packing: nothing is made
    image = check_image(opts.image) if opts.image else ""
    inputs, input_files = _inputs(lab.root, opts, dataset_refs(opts, validated.run_config))
    state = git.read_state(lab.root, [exp.relpath, *packer.SHARED_DIRS])
    git.require_clean(state, allow_dirty=opts.allow_dirty)
    warnings += [
        f"untracked file will travel with the run but is not in commit {state.commit[:12]}: {p}"
        for p in state.untracked
    ]
    if state.dirty:
        warnings.append(
            f"submitting uncommitted changes (--allow-dirty): {', '.join(state.changed)}"
        )
    contents: dict[str, bytes] = {}  # sha256 -> what was hashed: uploaded without a reread
    manifest = packer.build_manifest(
        lab.root, [*state.tracked, *state.untracked, *input_files], keep=contents
    )
    assert exp.method is not None
    spec = JobSpec(
        project=lab.name,
        experiment=exp.name,
        method=exp.method,
        profiles=opts.profiles,
        inputs=inputs,
        hyperparams=validated.hyperparams,
        image=image,
        provenance=Provenance(
            git_commit=state.commit,
            git_dirty=state.dirty,
            untracked=state.untracked,
            client_version=__version__,
        ),
        observability_url=opts.observability_url or "",
        secrets=requested_secrets(validated.run_config, opts.secrets),
        steps=opts.steps,
        output_dataset=output_dataset_ref(opts.output_dataset),
    )
    if init_from is not None:  # the parent's artifact is the model (resolved by admission)
        spec = spec.model_copy(update={"init_from": init_from})
    check_submission(
        spec,
        method,
        requests=requests,
        package={f.path for f in manifest.files},
        validate_params=not opts.no_validate,
    )
    # After the shared check, in admission's order (a custom method asks for --image first).
    mode = observability.mode_of(method.observability, validated.run_config)
    observability.check_url(mode, spec.observability_url, method.id)
    gate.check_gate_config(method.id, validated.run_config)  # admission's check, before upload
    return Prepared(
        spec=spec,
        manifest=manifest,
        root=lab.root,
        validated=validated,
        requests=requests,
        strict=not opts.no_validate,
        warnings=warnings,
        max_retries=opts.max_retries,
        contents=contents,
    )


def check_profiles(client: Client, prepared: Prepared) -> list[Pool]:
    """The profiles resolved against the server's registry, and the profile-aware checks."""
    return resolve_profiles(client.profiles(), prepared)


@contextmanager
def connected(opts: SubmitOptions) -> Iterator[tuple[Client, Prepared]]:
    """What ``sf submit`` and ``sf sweep`` both do first: prepare (its warnings said), connect,
    and check the profiles with the server; the client is open while the caller sends."""
    from starforge.cli.connect import connect
    from starforge.cli.output import out

    prepared = prepare(opts)
    for warning in prepared.warnings:
        out.warn(warning)
    with connect() as client:
        check_profiles(client, prepared)
        yield client, prepared


def resolve_profiles(registry: ProfilesResponse, prepared: Prepared) -> list[Pool]:
    """The parsed profiles resolved against ``registry`` (profile env included) and rechecked."""
    pools = profile_grammar.resolve(prepared.requests, registry.profiles, prepared.method.roles)
    if prepared.strict:
        run_checks(CheckContext(prepared.method, prepared.validated.run_config, pools))
    prepared.pools = pools
    prepared.hf_offline = registry.hf_offline
    return pools


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
    uploads.upload_files(client, prepared.root, todo, on_progress, prepared.contents)
    # A key of this invocation's own (an identical submit started meanwhile makes its own run);
    # a rerun after a lost answer or Ctrl-C takes it over: the server returns its run.
    content = {
        "spec": prepared.spec.model_dump(mode="json"),
        "manifest": prepared.manifest.model_dump(mode="json"),
        "max_retries": prepared.max_retries,
    }
    with pending.open_pending(content) as key:
        request = SubmitRequest(
            spec=prepared.spec,
            manifest=prepared.manifest,
            idempotency_key=key.key,
            max_retries=prepared.max_retries,
        )
        try:
            response = _submit_with_retry(client, request)
        except ServerUnreachable:
            raise  # no answer: the record stays (unlocked), and the next try reuses the key
        except StarForgeError:
            key.clear()  # the server answered with a refusal
            raise
        key.clear()
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
