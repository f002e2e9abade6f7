"""When the models of ``starforge.contract`` build their validators: at import (the default, the
server and the runner) or on first use (the ``sf`` process, which sets :data:`DEFER` before it
imports any model). A separate module so that setting it imports neither pydantic nor a model."""

DEFER = False
