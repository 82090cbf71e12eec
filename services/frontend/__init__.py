"""The HTTP frontend: the JSON and Avro command API, the owner's read API, visibility and namespaces, auth and
the OpenAPI document. It reaches the processor only through the read interface (`history.store`, `history.waiters`)."""
