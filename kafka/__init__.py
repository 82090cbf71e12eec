"""The Kafka plumbing every Ostinato process shares: client settings, the replies reader, task-topic creation.

It sits below `services/` and `sdk/` (and beside `schemas/`, whose record vocabulary it carries), so the gateway,
the processor, the Python worker and the tests open Kafka the same way and nothing here is written twice.
"""
