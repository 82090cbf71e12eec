"""Exporters: visibility to OpenSearch or embedded SQLite (one query language), archival of closed runs to S3.

Kafka ingress (start and signal workflows from any topic) is planned (issue 22); nothing here does it yet.
"""
