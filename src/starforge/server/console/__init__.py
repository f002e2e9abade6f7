"""The web console, served by the control plane at ``/`` (see :mod:`.routes`)."""
