"""The Python SDK: workflow and activity API, deterministic runtime, worker, client, replayer."""
