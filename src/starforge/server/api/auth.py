"""Users (admins manage them) and each caller's own API tokens."""

from __future__ import annotations

from fastapi import APIRouter

from starforge.contract.auth import (
    RoleUpdate,
    TokenCreate,
    TokenCreated,
    TokenList,
    TokenView,
    UnixUserUpdate,
    UserCreate,
    UserCreated,
    UserList,
    UserView,
)
from starforge.server.api.authz import (
    AddsUser,
    DisablesUser,
    ListsUsers,
    ManageSelf,
    SetsRole,
    SetsUnixUser,
)
from starforge.server.api.deps import RuntimeDep
from starforge.server.services.access import accounts

router = APIRouter()


@router.get("/users", response_model=UserList)
def list_users(rt: RuntimeDep, _: ListsUsers) -> UserList:
    return accounts.list_users(rt)


@router.post("/users", response_model=UserCreated, status_code=201)
def add_user(body: UserCreate, rt: RuntimeDep, _: AddsUser) -> UserCreated:
    return accounts.add_user(rt, body)


@router.put("/users/{name}/role", response_model=UserView)
def set_role(name: str, body: RoleUpdate, rt: RuntimeDep, _: SetsRole) -> UserView:
    return accounts.set_role(rt, name, body.role)


@router.put("/users/{name}/unix", response_model=UserView)
def set_unix_user(name: str, body: UnixUserUpdate, rt: RuntimeDep, _: SetsUnixUser) -> UserView:
    return accounts.set_unix_user(rt, name, body.unix_user)


@router.post("/users/{name}/disable", response_model=UserView)
def disable_user(name: str, rt: RuntimeDep, _: DisablesUser) -> UserView:
    return accounts.set_disabled(rt, name, True)


@router.post("/users/{name}/enable", response_model=UserView)
def enable_user(name: str, rt: RuntimeDep, _: DisablesUser) -> UserView:
    return accounts.set_disabled(rt, name, False)


@router.get("/tokens", response_model=TokenList)
def list_tokens(rt: RuntimeDep, user: ManageSelf) -> TokenList:
    return accounts.list_tokens(rt, user.name)


@router.post("/tokens", response_model=TokenCreated, status_code=201)
def create_token(body: TokenCreate, rt: RuntimeDep, user: ManageSelf) -> TokenCreated:
    return accounts.create_token(rt, user.name, body)


@router.post("/tokens/console", response_model=TokenCreated, status_code=201)
def create_console_token(rt: RuntimeDep, user: ManageSelf) -> TokenCreated:
    """A short-lived token that only reads, for a console link (`sf job console`)."""
    return accounts.create_console_token(rt, user.name)


@router.post("/tokens/{ref}/revoke", response_model=TokenView)
def revoke_token(ref: str, rt: RuntimeDep, user: ManageSelf) -> TokenView:
    return accounts.revoke_token(rt, user.name, ref)
