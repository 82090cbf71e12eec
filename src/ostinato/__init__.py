"""Ostinato: durable workflows on Apache Kafka."""

__version__ = "0.1.0"
