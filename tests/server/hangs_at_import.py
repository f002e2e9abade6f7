"""A module whose import never ends: a warm trainer told to preload it never gets ready."""

import threading

threading.Event().wait()
