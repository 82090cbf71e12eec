"""`ostinato.common`: the public name of `ostinato.sdk.common` (DESIGN.md §9), plus `Payload`: a header's value
(`client.StartWorkflowInput.headers`, the worker interceptors' `headers`), as Temporal's
`temporalio.api.common.v1.Payload` (`metadata` and `data`, made by a payload converter's `to_payload`)."""

from ostinato.schemas.payloads import Payload
from ostinato.sdk.common import *  # noqa: F403
from ostinato.sdk.common import __all__ as _names
from ostinato.sdk.versioning import VersioningBehavior, WorkerDeploymentVersion

__all__ = [*_names, "Payload", "VersioningBehavior", "WorkerDeploymentVersion"]
