"""Registry logins: one per registry host, the password sealed at rest
(``server/services/data/registries.py`` owns them).

A row holds the username in the clear (``sf admin registry ls`` shows it) and the password only as
ciphertext with the id of the key that sealed it: the secrets' key ring
(``services/access/secret_keys``), bound to the row's host, so a copy of the database reveals no
password and a ciphertext moved to another host does not open.
"""

from __future__ import annotations

from sqlalchemy import String
from sqlalchemy.orm import Mapped, mapped_column

from starforge.server.db.models import Base
from starforge.server.db.secrets import Sealed


class RegistryLogin(Sealed, Base):
    """``sf admin registry login HOST``: the credentials the server uses for that registry."""

    __tablename__ = "registry_logins"

    host: Mapped[str] = mapped_column(String(260), primary_key=True)  # HOST[:PORT], lower case
    username: Mapped[str] = mapped_column(String(256))
