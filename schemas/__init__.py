"""The wire contract: Avro schemas, the topic catalogue, the partitioner and the codec."""
