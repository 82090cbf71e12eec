"""`ostinato.worker.workflow_sandbox`: the public name of `ostinato.sdk.workflow_sandbox` (Temporal's
`temporalio.worker.workflow_sandbox`)."""

from ostinato.sdk.workflow_sandbox import *  # noqa: F403
from ostinato.sdk.workflow_sandbox import __all__  # noqa: F401
