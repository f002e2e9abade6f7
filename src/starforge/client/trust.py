"""Which certificate authorities a client trusts when its server speaks HTTPS.

A lab's server usually has a certificate signed by the lab's own CA, which no default bundle
holds. One CA file is set in one place for each side, and everything that talks to the server
trusts it:

- ``sf`` (the full client and the logs fast path): ``sf --ca-file CA.pem``, else
  ``STARFORGE_CA_FILE``, else the CA file ``sf login`` kept with the server it saved
  (:func:`starforge.client.config.find_server` chooses);
- runners: the server's ``tls_ca_file`` (``server.yaml``), whose PEM text the server puts in
  every binding (a compute node need not have the file);
- jobs (``starforge.report``): ``STARFORGE_CA_FILE``, a copy of that PEM the runner writes into
  the run's ``out`` folder, where the job's own user and its container can read it.

A given CA replaces the default bundle (the lab's server is the one server these clients talk
to); with none, the defaults stay: ``SSL_CERT_FILE``, else ``SSL_CERT_DIR``, else certifi's
bundle, as httpx does. Standard library only: the logs fast path imports this module.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # typing's own costs an import the fast path does without
if TYPE_CHECKING:
    import ssl

CA_ENV = "STARFORGE_CA_FILE"
# Where each side sets its CA, named in the errors that a missing or wrong one causes.
CLI_SETTING = f"--ca-file CA.pem or {CA_ENV}"
SERVER_SETTING = "tls_ca_file in the server's server.yaml"
JOB_SETTING = f"{CA_ENV}, which the platform sets from the server's tls_ca_file"
HINTS = {
    CLI_SETTING: "the CA's certificate in PEM, from the server's admin; "
    "`sf --ca-file CA.pem login --server URL` keeps it with the login",
    SERVER_SETTING: "the PEM file of the CA that signed the server's certificate (docs/deploy.md)",
}


def context(ca_file: str | None = None, ca_pem: str = "") -> ssl.SSLContext:
    """An SSL context trusting ``ca_file`` and/or ``ca_pem`` when given, else the defaults.

    Raises OSError (a file that cannot be read) or ``ssl.SSLError`` (no certificate in it)."""
    import ssl

    if ca_file or ca_pem:
        return ssl.create_default_context(cafile=ca_file or None, cadata=ca_pem or None)
    if os.environ.get("SSL_CERT_FILE"):
        return ssl.create_default_context(cafile=os.environ["SSL_CERT_FILE"])
    if os.environ.get("SSL_CERT_DIR"):
        return ssl.create_default_context(capath=os.environ["SSL_CERT_DIR"])
    import certifi

    return ssl.create_default_context(cafile=certifi.where())


def verify_failure(exc: BaseException) -> str | None:
    """Why the peer's certificate was refused, when that is what ended ``exc`` (httpx wraps the
    ``ssl`` error in its own); else None."""
    import ssl

    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, ssl.SSLCertVerificationError):
            return str(cause.verify_message or cause.reason or cause)
        cause = cause.__cause__ or cause.__context__
    return None
