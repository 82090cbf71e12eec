"""Exporters and ingress: visibility to OpenSearch or SQLite, archival to S3, Kafka ingress."""
