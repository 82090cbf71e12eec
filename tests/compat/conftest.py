"""The compatibility tests run Temporal-style code (only the imports changed) on the engines of the SDK scenarios.

The `env` fixture (and the `async def` runner hook) is the scenarios' own, imported rather than copied: a test that
takes `env` runs on the time-skipping environment and on a real broker (an `ostinato server` on the session's
Kafka, started once per session). Tests that touch no engine are plain functions.
"""

from tests.e2e.sdk_scenarios.conftest import env, pytest_pyfunc_call  # noqa: F401 - a fixture and a hook, used here
from tests.e2e.sdk_scenarios.kafka_backend import scenario_server  # noqa: F401 - the fixture `env` asks for
