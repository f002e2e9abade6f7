"""The one check of a submission that both the CLI and admission run.

:func:`check_submission` is pure: it looks only at the :class:`JobSpec`, the method's declaration,
the parsed ``--profile`` requests and the paths of the package. The CLI runs it before a byte is
uploaded and admission runs it again (the client is not trusted), so a submission is refused with
the same error class, code and exit status (2) on either side. Rules, in order:

1. profile against roles: named pools carry exactly the method's roles;
2. required inputs: the one table :data:`INPUT_FLAGS` says which flag sets which input;
3. the image rule: a method that runs the researcher's own code (``requires: [image]``, e.g.
   custom/custom) needs ``--image``, and any image must be a well-formed reference;
4. the entrypoint: a python/bash entrypoint must travel in the package;
5. parameters: every recorded value is declared and valid, every required one is given.

What only one side can know stays there: that a local file exists (CLI), that a shared path
exists or the blobs are stored (admission).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Protocol

from starforge.contract import params
from starforge.contract.errors import MissingEntrypoint, MissingInput, ParamError
from starforge.contract.images import check_image
from starforge.contract.jobspec import JobSpec
from starforge.contract.params import Param
from starforge.contract.profiles import ProfileRequest, check_roles

# method.requires entry -> the ``sf submit`` flag that sets it (JobSpec.inputs has the same name)
INPUT_FLAGS: dict[str, str] = {
    "model": "--model",
    "train_data": "--train-data",
    "validation_data": "--validation-data",
}
# Entrypoint kinds whose file is the experiment's own and so must be in the package; module and
# file entrypoints ship with the framework's image.
PACKAGED_ENTRYPOINTS = frozenset({"python", "bash"})


class EntrypointRule(Protocol):
    @property
    def kind(self) -> str: ...
    @property
    def file(self) -> str: ...


class MethodRules(Protocol):
    """What a submission is checked against (``catalog.loader.Method`` has this shape)."""

    @property
    def id(self) -> str: ...
    @property
    def requires(self) -> Sequence[str]: ...
    @property
    def roles(self) -> Sequence[str]: ...
    @property
    def params(self) -> Mapping[str, Param]: ...
    @property
    def entrypoint(self) -> EntrypointRule: ...


def check_submission(
    spec: JobSpec,
    method: MethodRules,
    *,
    requests: Sequence[ProfileRequest],
    package: Collection[str],
    validate_params: bool = True,
) -> None:
    """Raise the first broken rule (see the module's docstring); return when all hold.

    ``validate_params=False`` is the CLI's ``--no-validate`` (admission always validates).
    """
    check_roles(requests, method.roles)
    check_inputs(spec, method)
    check_image_rule(spec, method)
    check_entrypoint(spec, method, package)
    if validate_params:
        check_params(spec.hyperparams, method)


def entrypoint_path(spec: JobSpec, method: MethodRules) -> str | None:
    """The package path of the method's entrypoint, None when the image ships it."""
    if str(method.entrypoint.kind) not in PACKAGED_ENTRYPOINTS:
        return None
    return f"{spec.exp_dir}/{method.entrypoint.file}"


def check_inputs(spec: JobSpec, method: MethodRules) -> None:
    missing = [
        name
        for name in method.requires
        if name in INPUT_FLAGS
        and getattr(spec.inputs, name, None) is None
        and not (name == "model" and spec.init_from is not None)  # the parent's artifact
    ]
    if missing:
        flags = [INPUT_FLAGS[name] for name in missing]
        raise MissingInput(
            f"method {method.id} needs {', '.join(flags)}",
            hint=f"add {' '.join(f + ' ...' for f in flags)} to `sf submit`, e.g. --model "
            "models/tiny-llama --train-data data/train.jsonl (paths relative to the lab root)",
            details={"missing": flags, "inputs": missing},
        )


def check_image_rule(spec: JobSpec, method: MethodRules) -> None:
    if spec.image:
        check_image(spec.image)
    elif "image" in method.requires:
        raise MissingInput(
            f"method {method.id} needs --image: it runs your own code in your own image",
            hint="e.g. --image myregistry.io/train:v1",
            details={"missing": ["--image"], "inputs": ["image"]},
        )


def check_entrypoint(spec: JobSpec, method: MethodRules, package: Collection[str]) -> None:
    entry = entrypoint_path(spec, method)
    if entry is not None and entry not in package:
        raise MissingEntrypoint(
            f"{entry} is missing: method {method.id} runs it as its entrypoint",
            hint=f"restore {entry} and commit it, or recreate the experiment with `sf new`",
            details={"entrypoint": entry},
        )


def check_params(hyperparams: Mapping[str, object], method: MethodRules) -> None:
    """Every value declared and valid (did-you-mean for a typo); every required one given."""
    for name, value in hyperparams.items():
        param = method.params.get(name)
        if param is None:
            raise ParamError(
                f"parameter {name!r} is not declared by {method.id}",
                hint=params.suggest(name, sorted(method.params)),
                details={"param": name},
            )
        params.check_value(name, param, value, f"hyperparams.{name}")
    missing = [n for n, p in method.params.items() if p.required and n not in hyperparams]
    if missing:
        raise ParamError(
            f"required parameter(s) without a value: {', '.join(missing)}",
            hint=" ".join(f"-s {n}=..." for n in missing),
            details={"missing": missing},
        )
