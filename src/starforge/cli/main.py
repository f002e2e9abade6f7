"""Entry point of ``sf`` and its one error boundary.

A StarForge error is one red line and a hint on stderr, exit code 1 (2 for usage errors and
rejections); a traceback only with ``--debug``.
"""

from __future__ import annotations

import sys

import click

from starforge.contract.errors import StarForgeError


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    from starforge.cli.app import app
    from starforge.cli.output import out

    out.set_json(False)
    try:
        result = app(args=args, prog_name="sf", standalone_mode=False)
        return int(result or 0)
    except StarForgeError as err:
        if debug:
            raise
        out.error(err)
        return err.exit_code
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.ClickException as exc:
        exc.show()
        return 2
    except (click.exceptions.Abort, KeyboardInterrupt):
        out.stderr.print("interrupted")
        return 130
    except OSError as exc:
        if debug:
            raise
        out.error(StarForgeError(str(exc), hint="rerun with --debug for details"))
        return 1


if __name__ == "__main__":
    sys.exit(main())
