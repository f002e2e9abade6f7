"""When the models of ``starforge.contract`` build their validators: at import (the default, the
server and the warm runner) or on first use (the ``sf`` process and a cold runner, which set
:data:`DEFER` before they import any model). A separate module so that setting it imports
neither pydantic nor a model."""

DEFER = False
