"""Entry point of ``sf`` and its one error boundary.

A StarForge error is one red line and a hint on stderr, exit code 1 (2 for usage errors and
rejections); a traceback only with ``--debug``. Usage errors found by the parser (unknown command
or option, missing or bad argument, a group called without a command) take the same shape, with
click's did-you-mean kept, and exit 2.

typer 0.29 ships its own copy of click: its exceptions derive from ``typer.TyperException``, not
from ``click.ClickException``, so the boundary catches typer's public classes and never imports
``click`` (a separate package that typer no longer uses).

``sf job logs RUN -n N --no-follow`` runs first as :mod:`starforge.cli.fastpath`, before typer is
imported: that module handles its one strict grammar with the standard library, or answers None
and the full command runs (so every error message stays with the full command).

``sf submit`` and ``sf job ls`` in a real ``sf`` process go first to
:mod:`starforge.cli.warm_client`: a background process that has done the imports forks a child
that runs this same ``main`` with the caller's argv, terminal, directory and environment; without
one, the command runs here and one is started for the next (``STARFORGE_WARM_CLIENT=0``: never).
"""

from __future__ import annotations

import contextlib
import os
import sys

TYPE_CHECKING = False  # typing, and every import below, only after the fast path declined
if TYPE_CHECKING:
    from typing import Any

    import typer

    from starforge.cli.output import Output
    from starforge.contract.errors import StarForgeError


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    try:
        if argv is None and (code := _warm(args)) is not None:
            return code
        if (code := _fast(args)) is not None:
            return code
    except OSError as exc:  # stdout closed (`| head`): as the full command reports it
        return _os_error(exc, debug)
    except KeyboardInterrupt:
        _out().stderr.print("interrupted")
        return 130
    import typer

    from starforge.contract.errors import StarForgeError

    if argv is None:  # a real `sf` process: build only the models this command uses
        from starforge.contract import buildmode

        buildmode.DEFER = True  # without importing pydantic: `sf --help` uses no model
        _no_pydantic_plugins()
    from starforge.cli.app import app

    loaded = sys.modules.get("starforge.cli.output")  # rich: imported by the commands that print
    if loaded is not None:
        loaded.out.set_json(False)  # a previous main() in this process may have set it
    try:
        result = app(args=args, prog_name="sf", standalone_mode=False)
        return int(result or 0)
    except StarForgeError as err:
        if debug:
            raise
        _out().error(err)
        return err.exit_code
    except typer.Exit as exc:
        return exc.exit_code
    except typer.TyperException as exc:
        # A usage error is the user's, never a bug: no traceback, even with --debug.
        err = parser_error(exc)
        _out().error(err)
        return int(getattr(exc, "exit_code", 2))
    except (typer.Abort, KeyboardInterrupt):
        _out().stderr.print("interrupted")
        return 130
    except OSError as exc:
        return _os_error(exc, debug)
    except Exception as exc:
        unreadable = None if debug else _unreadable(exc)
        if unreadable is None:
            raise
        _out().error(unreadable)
        return unreadable.exit_code


def _no_pydantic_plugins() -> None:
    """Keep pydantic's plugin loader out of a real ``sf`` process (httpx's command line is kept
    out by :mod:`starforge.client`): on the first validator built it imports
    ``importlib.metadata`` and reads every installed package's entry points (~40 ms of ``sf job
    ls``). The loader put here finds no plugin, as ``PYDANTIC_DISABLE_PLUGINS`` would, without a
    variable that the server and the commands ``sf`` starts would inherit."""
    import types

    loader = types.ModuleType("pydantic.plugin._loader", "sf: pydantic plugins are not loaded")
    loader.get_plugins = tuple  # type: ignore[attr-defined]  # () : no plugin
    sys.modules.setdefault("pydantic.plugin._loader", loader)


def _unreadable(exc: Exception) -> StarForgeError | None:
    """pydantic's ValidationError escaping a command as one line: what user input builds is
    checked into our own errors first, so this is an answer (or a file) another release wrote
    that this one cannot read (docs/releases.md). None for any other exception (a bug)."""
    core = sys.modules.get("pydantic_core")
    if core is None or not isinstance(exc, core.ValidationError):
        return None
    from starforge import __version__
    from starforge.contract.errors import UnreadableAnswer

    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "(the whole answer)"
    value = first.get("input")
    sent = f" (it holds {value!r:.60})" if isinstance(value, str | int | float) else ""
    return UnreadableAnswer(
        f"sf {__version__} cannot read this {exc.title}: {where}: {first['msg']}{sent}",
        hint="the server is likely of a release this client cannot read: `sf server status` shows "
        "its version and the oldest client it accepts (pip install -U starforge upgrades this one)",
        details={"model": exc.title, "errors": exc.error_count(), "client": __version__},
    )


def _os_error(exc: OSError, debug: bool) -> int:
    if isinstance(exc, BrokenPipeError):  # its reader closed stdout (`| head -1`): exit quietly
        with contextlib.suppress(OSError):  # and let no later flush of stdout complain either
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    if debug:
        raise exc
    from starforge.contract.errors import StarForgeError

    _out().error(StarForgeError(str(exc), hint="rerun with --debug for details"))
    return 1


def _fast(args: list[str]) -> int | None:
    """Print what the fast path read and return 0, or None when the full command must run."""
    if args[:2] != ["job", "logs"]:  # other commands import nothing of it (`sf --help`)
        return None
    from starforge.cli import fastpath

    text = fastpath.job_logs(args)
    if text is None:
        return None
    sys.stdout.write(text)  # as `out.raw` writes a log: no markup, no wrapping
    sys.stdout.flush()
    return 0


def _warm(args: list[str]) -> int | None:
    """The exit code of the command run by the warm daemon, or None to run it here."""
    if args[:1] != ["submit"] and args[:2] != ["job", "ls"]:  # the others import nothing of it
        return None
    from starforge.cli import warm_client

    return warm_client.run(args)


def _out() -> Output:
    from starforge.cli.output import out

    return out


def parser_error(exc: typer.TyperException) -> StarForgeError:
    """The parser's exception as our one-line error, with a hint naming the command's help."""
    from starforge.contract.errors import UsageError

    ctx: Any = getattr(exc, "ctx", None)
    path = ctx.command_path if ctx is not None else "sf"
    # By name: the class lives only in typer's private `_click` package.
    if type(exc).__name__ == "NoArgsIsHelpError":
        # typer's rich help has printed itself; a plain help (the root's) is the message.
        if text := exc.format_message().strip():
            print(text)
        commands = ", ".join(ctx.command.list_commands(ctx)) if ctx is not None else ""
        return UsageError(f"`{path}` needs a command", hint=f"one of: {commands}")
    message = exc.format_message().strip() or f"bad usage of `{path}`"
    return UsageError(message, hint=f"`{path} --help` shows its usage")


if __name__ == "__main__":
    sys.exit(main())
