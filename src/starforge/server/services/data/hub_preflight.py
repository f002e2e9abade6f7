"""The gated-model preflight: is a hub ``--model`` there, and may this user download it?

Asked at admission with the real ``huggingface_hub`` client against the server's endpoint
(``hf_endpoint``, else ``$HF_ENDPOINT``, else the library's default), authenticated with the
submitting user's ``HF_TOKEN`` secret when they have one and with no token otherwise (never the
server's own). Three answers: not found (rejected), gated without access (rejected, with the page
where access is requested), fine. A hub that cannot be reached is a warning, unless the settings
say ``strict``.

When it runs (``hub_preflight``): ``off`` never; ``on``/``strict`` always; ``auto`` (the default)
only when jobs reach the hub (``hf_offline: false``) and the server is not in huggingface_hub's
offline mode (``HF_HUB_OFFLINE=1``), so offline demos and air-gapped sites are untouched. Under
``on`` a server in offline mode skips the check with a warning (``strict``: rejects).
"""

from __future__ import annotations

import os
from typing import Any

from starforge.contract.errors import Rejected
from starforge.contract.jobspec import InputKind, JobSpec
from starforge.server.settings import Settings

DEFAULT_ENDPOINT = "https://huggingface.co"


def enabled(settings: Settings) -> bool:
    if settings.hub_preflight == "off":
        return False
    if settings.hub_preflight == "auto":
        return not settings.hf_offline and not _offline_mode()
    return True


def _offline_mode() -> bool:
    try:
        from huggingface_hub import constants
    except ImportError:
        return os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0")
    return bool(constants.is_offline_mode())


def endpoint_of(settings: Settings) -> str:
    return (settings.hf_endpoint or os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def _unreachable(settings: Settings, repo: str, why: str) -> list[str]:
    message = f"could not check model {repo} on the hub ({why})"
    if settings.hub_preflight == "strict":
        raise Rejected(
            message,
            hint="the server's settings require the check (hub_preflight: strict); retry later "
            "or ask an admin",
            details={"model": repo, "preflight": "unreachable"},
        )
    return [f"{message}; admitted unchecked"]


def applies(settings: Settings, spec: JobSpec) -> bool:
    """Whether :func:`check` asks the hub anything for ``spec`` (a hub ``--model``, enabled)."""
    model = spec.inputs.model
    return model is not None and model.kind is InputKind.HUB and enabled(settings)


def check(settings: Settings, spec: JobSpec, hf_token: str | None) -> list[str]:
    """Raise :class:`Rejected` for a missing or inaccessible hub model; return warnings."""
    model = spec.inputs.model
    if model is None or not applies(settings, spec):
        return []
    repo = model.value
    if _offline_mode():
        return _unreachable(settings, repo, "the server runs with HF_HUB_OFFLINE=1")
    try:
        from huggingface_hub import HfApi
        from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError
    except ImportError:
        return _unreachable(settings, repo, "huggingface_hub is not installed on the server")
    endpoint = endpoint_of(settings)
    api = HfApi(endpoint=endpoint)
    token: Any = hf_token or False  # False: no token at all, never the server's cached one
    try:
        info = api.model_info(repo, token=token, timeout=settings.registry_timeout_s)
        if info.gated:
            api.auth_check(repo, token=token)
    except GatedRepoError:
        raise _gated(endpoint, repo, has_token=bool(hf_token)) from None
    except RepositoryNotFoundError:
        raise _not_found(repo, has_token=bool(hf_token)) from None
    except Exception as exc:  # transport errors, 5xx, an endpoint that is not a hub
        return _unreachable(settings, repo, f"{type(exc).__name__}: {str(exc)[:200]}")
    return []


def _gated(endpoint: str, repo: str, *, has_token: bool) -> Rejected:
    page = f"{endpoint}/{repo}"
    who = "your HF_TOKEN secret has no access" if has_token else "you have no HF_TOKEN secret"
    return Rejected(
        f"model {repo} is gated and {who}",
        hint=f"request access on {page}, then "
        + ("wait for it to be granted" if has_token else "`sf secret set HF_TOKEN`"),
        details={"model": repo, "preflight": "gated", "access_page": page},
    )


def _not_found(repo: str, *, has_token: bool) -> Rejected:
    return Rejected(
        f"model {repo} was not found on the hub"
        + ("" if has_token else " (or it is private and you have no HF_TOKEN secret)"),
        hint="check the id (org/name); for a private model `sf secret set HF_TOKEN`",
        details={"model": repo, "preflight": "not_found"},
    )
