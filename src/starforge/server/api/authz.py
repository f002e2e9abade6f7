"""Authorization as a table: every route declares who may call it and on whose objects.

A route states its rule with one dependency, ``authorize(RULE)``: the calling user (a
:class:`~starforge.server.services.access.users.Caller`) for rules that need a user, nothing for the
public and the runner's routes. The rule is recorded on the dependency itself (``authz_rule``),
so the app's route table *is* the authorization table: ``tests/server/test_authz_matrix.py`` walks
every route × role × owner/other, fails for a route that declares no rule (a new endpoint cannot
ship unguarded) and checks the answer of every cell.

What a rule means:

- ``who``: ``anyone`` (no token), ``runner`` (the job's run token, checked by the service) or
  ``user`` (a user's bearer token, with at least ``role``; below it: 403, whose message names the
  rule's ``action`` and the role it needs). Each admin route has a rule of its own
  (:data:`ADMIN_RULES`), so its refusal says what was refused; the services behind it check no
  role again.
- ``on``: ``nothing`` (the lab as a whole), ``self`` (the caller's own things: tokens, usage) or
  ``run`` (the run named in the path, or each run a ``run`` query parameter names): a viewer or
  member reaches only their own runs, and another user's run answers 404 as if it did not exist;
  an operator or admin reaches everyone's. The services apply it through
  :func:`starforge.server.services.access.users.visible_runs`.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Any

from fastapi import Depends, Header, Request
from starlette.concurrency import run_in_threadpool

from starforge.contract.auth import Role
from starforge.contract.errors import Forbidden
from starforge.server.api.deps import RuntimeDep
from starforge.server.runtime import Runtime
from starforge.server.services.access import users


class Who(StrEnum):
    ANYONE = "anyone"  # no token at all
    RUNNER = "runner"  # the job's own run token (X-StarForge-Run-Token), checked by the service
    USER = "user"  # a user's bearer token


class On(StrEnum):
    NOTHING = "nothing"  # no object, or the lab as a whole
    SELF = "self"  # the caller's own things (tokens, usage)
    RUN = "run"  # the run in the path: one's own (viewer, member) or anyone's (operator, admin)


@dataclass(frozen=True)
class Rule:
    action: str
    who: Who
    role: Role | None = None
    on: On = On.NOTHING
    hint: str = ""  # what a refused caller can do instead (default: ask for another role)

    @property
    def words(self) -> str:
        """The action as a message says it: "act-on-run" as "act on run", a phrase as it is."""
        return self.action if " " in self.action else self.action.replace("-", " ")

    def __str__(self) -> str:
        if self.who is not Who.USER:
            return f"{self.action}: {self.who.value}"
        return f"{self.action}: {self.role} and up, on {self.on.value}"


PUBLIC = Rule("public", Who.ANYONE)
RUNNER = Rule("report", Who.RUNNER)
READ = Rule("read", Who.USER, Role.VIEWER)
READ_SELF = Rule("read-own", Who.USER, Role.VIEWER, On.SELF)
READ_RUN = Rule("read-run", Who.USER, Role.VIEWER, On.RUN)
MANAGE_SELF = Rule("manage-own", Who.USER, Role.VIEWER, On.SELF)
SUBMIT = Rule("submit", Who.USER, Role.MEMBER)
ACT_ON_RUN = Rule("act-on-run", Who.USER, Role.MEMBER, On.RUN)

_OWN_QUOTA = "`sf status` shows your own quota and usage"


def _admin(action: str, hint: str = "") -> Rule:
    return Rule(action, Who.USER, Role.ADMIN, hint=hint)


LIST_USERS = _admin("list users")
ADD_USER = _admin("add users")
SET_ROLE = _admin("change a user's role")
SET_UNIX_USER = _admin("set a user's Unix account")
DISABLE_USER = _admin("disable or enable users")
LIST_QUOTAS = _admin("list quotas", _OWN_QUOTA)
READ_QUOTA = _admin("read another user's quota", _OWN_QUOTA)
SET_QUOTA = _admin("change quotas", _OWN_QUOTA)
USAGE_REPORT = _admin("read the lab's GPU-hour report", "`sf status` shows your own GPU-hours")
SET_DAILY_QUOTA = _admin("set daily GPU-hour quotas", "`sf status` shows your own GPU-hours")
MAINTENANCE_STATUS = _admin("read the maintenance status")
DRAIN = _admin("drain the cluster for maintenance")
END_MAINTENANCE = _admin("end a maintenance drain")
ROTATE_SECRETS_KEY = _admin("rotate the secrets key")
IMAGE_SETTINGS = _admin("read the image settings")
SET_IMAGE_DEFAULT = _admin("set a framework's default image")
SET_REGISTRY = _admin("change the registry allowlist")
LIST_REGISTRY_LOGINS = _admin("list registry logins")
SET_REGISTRY_LOGIN = _admin("store a registry login")
REMOVE_REGISTRY_LOGIN = _admin("remove a registry login")
ADMIN_RULES = (
    LIST_USERS, ADD_USER, SET_ROLE, SET_UNIX_USER, DISABLE_USER, LIST_QUOTAS, READ_QUOTA,
    SET_QUOTA, USAGE_REPORT, SET_DAILY_QUOTA, MAINTENANCE_STATUS, DRAIN, END_MAINTENANCE,
    ROTATE_SECRETS_KEY, IMAGE_SETTINGS, SET_IMAGE_DEFAULT, SET_REGISTRY, LIST_REGISTRY_LOGINS,
    SET_REGISTRY_LOGIN, REMOVE_REGISTRY_LOGIN,
)  # fmt: skip

# What a console link's token may do: read (runs, logs, curves, the caller's own usage).
CONSOLE_RULES = frozenset({READ, READ_SELF, READ_RUN})

_WHAT = {
    Role.VIEWER: "any signed-in user",
    Role.MEMBER: "members, operators and admins",
    Role.OPERATOR: "operators and admins",
    Role.ADMIN: "admins",
}


def permit(rule: Rule, caller: users.Caller) -> users.Caller:
    """``caller`` if ``rule`` lets them in; 403 otherwise (no I/O: the caller is known)."""
    need = rule.role or Role.VIEWER
    if caller.console_only and rule not in CONSOLE_RULES:
        raise Forbidden(
            f"a console link's token only reads; {rule.words} needs one of your API tokens",
            hint="use the CLI (`sf job stop|pause|…`), which signs in with your own token",
            details={"scope": users.CONSOLE_SCOPE, "action": rule.action},
        )
    if not caller.role.at_least(need):
        raise Forbidden(
            f"only {_WHAT[need]} may {rule.words}; {caller.name}'s role is {caller.role.value}",
            hint=rule.hint or "ask an admin for another role (`sf admin user set-role`)",
            details={"action": rule.action, "role": caller.role.value, "needs": need.value},
        )
    return caller


def check(rule: Rule, rt: Runtime, authorization: str | None) -> users.Caller:
    """The caller named by ``authorization`` if ``rule`` lets them in; 401 or 403 otherwise."""
    return permit(rule, users.authenticate_request(rt, authorization))


CALLER_KEY = "starforge.caller"  # in the request's scope state: who :mod:`.gate` let in


def _user_dependency(rule: Rule) -> Callable[..., Awaitable[users.Caller]]:
    async def authorized(
        request: Request, rt: RuntimeDep, authorization: Annotated[str | None, Header()] = None
    ) -> users.Caller:
        known = request.scope.get("state", {}).get(CALLER_KEY)
        if known is not None:  # authenticated by the gate before the body was read
            return permit(rule, known)
        return await run_in_threadpool(check, rule, rt, authorization)

    return authorized


RunnerCheck = Callable[[Runtime, str, "str | None"], None]


def _runner_dependency(token_check: RunnerCheck) -> Callable[[], Awaitable[None]]:
    """The runner rule with the check of its run token (``token_check(rt, run_id, token)``),
    which the gate runs from the headers before the body is read."""

    async def runner() -> None:
        return None

    runner.token_check = token_check  # type: ignore[attr-defined]
    return runner


def _no_user() -> Callable[[], Awaitable[None]]:
    """A fresh function per rule: the rule is recorded on it, so each needs its own. A
    coroutine: FastAPI would hand a plain function to a worker thread, for nothing."""

    async def nobody() -> None:
        return None

    return nobody


_DEPENDENCIES: dict[Rule | RunnerCheck, Any] = {}


def authorize(rule: Rule) -> Any:
    """The route's dependency for ``rule`` (one per rule, so FastAPI runs it once a request).
    The runner rule takes :func:`runner` instead: it names how its token is checked."""
    assert rule.who is not Who.RUNNER, "a runner route declares authz.runner(token_check)"
    if rule not in _DEPENDENCIES:
        call: Callable[..., Any] = _user_dependency(rule) if rule.who is Who.USER else _no_user()
        call.authz_rule = rule  # type: ignore[attr-defined]
        call.__name__ = "authorize_" + re.sub(r"\W+", "_", rule.action)
        _DEPENDENCIES[rule] = Depends(call)
    return _DEPENDENCIES[rule]


def runner(token_check: RunnerCheck) -> Any:
    """The dependency of a runner route whose run token ``token_check`` verifies (it raises
    401/403/404 for a request that may not reach the run in the path's ``run_id``)."""
    if token_check not in _DEPENDENCIES:
        call = _runner_dependency(token_check)
        call.authz_rule = RUNNER  # type: ignore[attr-defined]
        call.__name__ = f"authorize_runner_{token_check.__module__.rsplit('.', 1)[-1]}"
        _DEPENDENCIES[token_check] = Depends(call)
    return _DEPENDENCIES[token_check]


# The calling user under each rule, for route signatures: ``user: ReadRun``.
Reader = Annotated[users.Caller, authorize(READ)]
ReadSelf = Annotated[users.Caller, authorize(READ_SELF)]
ReadRun = Annotated[users.Caller, authorize(READ_RUN)]
ManageSelf = Annotated[users.Caller, authorize(MANAGE_SELF)]
Submitter = Annotated[users.Caller, authorize(SUBMIT)]
ActOnRun = Annotated[users.Caller, authorize(ACT_ON_RUN)]
# Admins, one alias per admin action (see ADMIN_RULES).
ListsUsers = Annotated[users.Caller, authorize(LIST_USERS)]
AddsUser = Annotated[users.Caller, authorize(ADD_USER)]
SetsRole = Annotated[users.Caller, authorize(SET_ROLE)]
SetsUnixUser = Annotated[users.Caller, authorize(SET_UNIX_USER)]
DisablesUser = Annotated[users.Caller, authorize(DISABLE_USER)]
ListsQuotas = Annotated[users.Caller, authorize(LIST_QUOTAS)]
ReadsQuota = Annotated[users.Caller, authorize(READ_QUOTA)]
SetsQuota = Annotated[users.Caller, authorize(SET_QUOTA)]
ReadsUsageReport = Annotated[users.Caller, authorize(USAGE_REPORT)]
SetsDailyQuota = Annotated[users.Caller, authorize(SET_DAILY_QUOTA)]
ReadsMaintenance = Annotated[users.Caller, authorize(MAINTENANCE_STATUS)]
Drains = Annotated[users.Caller, authorize(DRAIN)]
EndsMaintenance = Annotated[users.Caller, authorize(END_MAINTENANCE)]
RotatesSecretsKey = Annotated[users.Caller, authorize(ROTATE_SECRETS_KEY)]
ReadsImageSettings = Annotated[users.Caller, authorize(IMAGE_SETTINGS)]
SetsImageDefault = Annotated[users.Caller, authorize(SET_IMAGE_DEFAULT)]
SetsRegistry = Annotated[users.Caller, authorize(SET_REGISTRY)]
ListsRegistryLogins = Annotated[users.Caller, authorize(LIST_REGISTRY_LOGINS)]
SetsRegistryLogin = Annotated[users.Caller, authorize(SET_REGISTRY_LOGIN)]
RemovesRegistryLogin = Annotated[users.Caller, authorize(REMOVE_REGISTRY_LOGIN)]
