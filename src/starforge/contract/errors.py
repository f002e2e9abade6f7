"""The one error hierarchy of StarForge, shared by the CLI, the client, the server and the runner.

Every error has a stable ``code`` (dotted, never reused for another meaning), a message that says
what was wrong and where, and a hint that says what to do. On the wire an error is
``{"code", "message", "hint", "details"}``; :func:`from_wire` turns it back into the same class,
so a rejection raised in the server reaches the CLI's error boundary as the class it started as.

``exit_code`` is what the CLI exits with: 2 for usage errors and rejections, 1 for the rest.
"""

from __future__ import annotations

from typing import Any, ClassVar

# Every error class by its code, filled as the classes are defined (``__init_subclass__``).
REGISTRY: dict[str, type[StarForgeError]] = {}


class StarForgeError(Exception):
    """Base of every error StarForge raises on purpose."""

    code: ClassVar[str] = "error"
    http_status: ClassVar[int] = 500
    exit_code: ClassVar[int] = 1

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Register every class that names its own code; a code already taken is a bug."""
        super().__init_subclass__(**kwargs)
        if "code" not in cls.__dict__:
            return  # inherits its parent's code and travels as its parent on the wire
        taken = REGISTRY.get(cls.code)
        if taken is not None:
            raise TypeError(
                f"error code {cls.code!r} of {cls.__qualname__} is already taken by "
                f"{taken.__module__}.{taken.__qualname__}; codes are never reused"
            )
        REGISTRY[cls.code] = cls

    def __init__(
        self, message: str, *, hint: str | None = None, details: dict[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.details = details or {}

    def to_wire(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "message": self.message,
            "hint": self.hint,
            "details": self.details,
        }


# ---- usage and local validation (exit 2) -------------------------------------------------------


class UsageError(StarForgeError):
    code = "usage"
    http_status = 400
    exit_code = 2


class InvalidName(UsageError):
    code = "usage.invalid_name"


class ProfileError(UsageError):
    code = "usage.profile"


class MissingInput(UsageError):
    code = "usage.missing_input"


class InvalidSpec(UsageError):
    code = "usage.invalid_spec"


class ConfigError(UsageError):
    """An experiment config that cannot be read or composed (YAML, defaults chain)."""

    code = "usage.config"


class ParamError(UsageError):
    """A -s override or a config value that breaks the method's declaration."""

    code = "usage.param"


class ImageError(UsageError):
    code = "usage.image"


class MissingEntrypoint(UsageError):
    """The method runs a file of the experiment that the package does not hold."""

    code = "usage.missing_entrypoint"


class BatchValidation(UsageError):
    """The seed's "batch size validation failure": a framework rule across several keys."""

    code = "validation.batch"


class LockError(UsageError):
    """The experiment's method lock is malformed or incompatible with the catalog."""

    code = "project.lock"


# ---- the researcher's workspace (exit 1) ------------------------------------------------------


class ProjectError(StarForgeError):
    code = "project"
    http_status = 400


class NotInLab(ProjectError):
    code = "project.not_in_lab"


class LabExists(ProjectError):
    code = "project.lab_exists"


class ExperimentNotFound(ProjectError):
    code = "project.experiment_not_found"


class ExperimentExists(ProjectError):
    code = "project.experiment_exists"


class GitError(ProjectError):
    code = "project.git"


class DirtyTree(ProjectError):
    code = "project.dirty_tree"
    exit_code = 2


class SensitiveFiles(ProjectError):
    code = "project.sensitive_files"
    exit_code = 2


class InputNotFound(ProjectError):
    code = "project.input_not_found"
    exit_code = 2


# ---- catalog ----------------------------------------------------------------------------------


class MethodNotFound(StarForgeError):
    code = "catalog.method_not_found"
    http_status = 400
    exit_code = 2


class CatalogMismatch(StarForgeError):
    """The client's method declaration differs from the server's (a stale lock)."""

    code = "catalog.mismatch"
    http_status = 409
    exit_code = 2


# ---- server answers ---------------------------------------------------------------------------


class Rejected(StarForgeError):
    """Admission refused the submission; nothing was created."""

    code = "admission.rejected"
    http_status = 422
    exit_code = 2


class MissingBlobs(Rejected):
    code = "admission.missing_blobs"


class QuotaRejected(Rejected):
    """The user's quota can never allow the run (a profile it excludes, more than its limits)."""

    code = "admission.quota"


class RegistryLoginNeeded(Rejected):
    """The image's registry answers only with credentials, and the server holds none for it."""

    code = "admission.registry_login_needed"


class RegistryLoginRefused(Rejected):
    """The registry (or its token service) refused the login the server holds for it."""

    code = "admission.registry_login_refused"


class RegistryAuthUnreachable(Rejected):
    """The registry's token service (the ``realm`` of its challenge) could not be reached."""

    code = "admission.registry_auth_unreachable"


class BlobDigestMismatch(StarForgeError):
    code = "blobs.digest_mismatch"
    http_status = 400


class BodyTooLarge(StarForgeError):
    """A request body beyond the server's configured limit for its route (nothing was kept)."""

    code = "request.too_large"
    http_status = 413
    exit_code = 2


class UnsupportedMediaType(StarForgeError):
    code = "request.unsupported_media_type"
    http_status = 415
    exit_code = 2


class IdempotencyConflict(StarForgeError):
    """An idempotency key already used by a submission with a different body."""

    code = "submit.idempotency_conflict"
    http_status = 409
    exit_code = 2


class NotFound(StarForgeError):
    code = "not_found"
    http_status = 404


class RunNotFound(NotFound):
    code = "runs.not_found"


class UserNotFound(NotFound):
    code = "users.not_found"


class AmbiguousRun(StarForgeError):
    code = "runs.ambiguous"
    http_status = 409
    exit_code = 2


class Unauthorized(StarForgeError):
    code = "auth.unauthorized"
    http_status = 401


class Forbidden(StarForgeError):
    code = "auth.forbidden"
    http_status = 403


class ClientTooOld(StarForgeError):
    code = "version.client_too_old"
    http_status = 426


class UnreadableAnswer(StarForgeError):
    """An answer of the server this client cannot read (a value a newer release added, a field
    an older one lacks): ``sf`` says so in one line instead of a traceback."""

    code = "version.unreadable_answer"
    http_status = 502


class InvalidTransition(StarForgeError):
    """A status write the transition table does not allow (a bug, never a user's mistake)."""

    code = "state.invalid_transition"
    http_status = 409


# ---- connectivity -----------------------------------------------------------------------------


class ServerUnreachable(StarForgeError):
    code = "server.unreachable"
    http_status = 503


class UntrustedCertificate(ServerUnreachable):
    """The server answered TLS with a certificate no CA this side trusts signed (a lab's own CA
    not given): waiting does not help, so callers that retry an unreachable server stop here."""

    code = "server.untrusted_certificate"


class DatabaseUnreachable(ServerUnreachable):
    """The server answers but its database does not (down, restarting, the network to it cut):
    a wait helps, so it is a ``ServerUnreachable`` and callers that retry one retry it too."""

    code = "server.database_unreachable"


class ServerError(StarForgeError):
    code = "server.internal"
    http_status = 500


class RunnerError(StarForgeError):
    code = "runner.failed"


REGISTRY[StarForgeError.code] = StarForgeError


def from_wire(payload: dict[str, Any], *, status: int = 500) -> StarForgeError:
    """Rebuild the error a server sent; unknown codes keep their text under the base class."""
    code = str(payload.get("code") or "")
    cls = REGISTRY.get(code)
    message = str(payload.get("message") or payload.get("detail") or f"HTTP {status}")
    hint = payload.get("hint")
    details = payload.get("details") or {}
    if cls is None:
        cls = UsageError if 400 <= status < 500 else ServerError
    err = cls(message, hint=hint, details=details)
    return err


# ---- platform datasets -------------------------------------------------------------------------


class DatasetNotFound(NotFound):
    """An unknown dataset or version, or another user's private one (the same answer)."""

    code = "datasets.not_found"
    exit_code = 2


class DatasetVersionExists(StarForgeError):
    """A dataset version is immutable: pushing different files under its name is refused."""

    code = "datasets.version_exists"
    http_status = 409
    exit_code = 2


# ---- comparing runs ----------------------------------------------------------------------------


class CompareRefused(StarForgeError):
    """A comparison of runs that cannot be made as asked (too few or too many runs)."""

    code = "compare.refused"
    http_status = 422
    exit_code = 2
