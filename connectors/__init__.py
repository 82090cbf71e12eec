"""Connectors: visibility to OpenSearch or embedded SQLite (one query language), archival of closed runs to S3,
and Kafka ingress.

Kafka ingress (`ingress.py`): records of any topic start and signal workflows, exactly once.
"""
