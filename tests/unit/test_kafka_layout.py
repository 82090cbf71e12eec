"""Broker configuration of the local clusters, checked without starting one."""

from __future__ import annotations

from pathlib import Path

import pytest

from ostinato.infra.errors import InfraError
from ostinato.infra.kafka import KafkaCluster


def test_single_node_is_transaction_ready(tmp_path: Path) -> None:
    cluster = KafkaCluster(tmp_path, nodes=1, port=19092)
    props = cluster.properties(cluster.nodes[0])
    assert cluster.bootstrap == "127.0.0.1:19092"
    assert props["process.roles"] == "broker,controller"
    assert props["controller.quorum.voters"] == "1@127.0.0.1:19093"
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093"
    for key in ("offsets.topic.replication.factor", "transaction.state.log.replication.factor",
                "transaction.state.log.min.isr", "default.replication.factor", "min.insync.replicas"):
        assert props[key] == "1", key


def test_three_nodes_replicate_three_ways_with_min_isr_two(tmp_path: Path) -> None:
    cluster = KafkaCluster(tmp_path, nodes=3, port=29092)
    assert cluster.bootstrap == "127.0.0.1:29092,127.0.0.1:29093,127.0.0.1:29094"
    voters = "1@127.0.0.1:29192,2@127.0.0.1:29193,3@127.0.0.1:29194"
    for node in cluster.nodes:
        props = cluster.properties(node)
        assert props["controller.quorum.voters"] == voters
        assert props["node.id"] == str(node.node_id)
        assert props["default.replication.factor"] == "3"
        assert props["min.insync.replicas"] == "2"
        assert props["transaction.state.log.replication.factor"] == "3"
        assert props["transaction.state.log.min.isr"] == "2"
    assert len({cluster.properties(n)["log.dirs"] for n in cluster.nodes}) == 3


def test_free_ports_are_distinct(tmp_path: Path) -> None:
    cluster = KafkaCluster(tmp_path, nodes=3, port=None)
    ports = [p for n in cluster.nodes for p in (n.port, n.controller_port)]
    assert len(set(ports)) == 6


def test_layout_is_recorded_for_other_processes(tmp_path: Path) -> None:
    cluster = KafkaCluster(tmp_path, nodes=3, port=None)
    cluster.layout.save(tmp_path / "cluster.json")
    found = KafkaCluster.existing(tmp_path)
    assert found is not None
    assert found.bootstrap == cluster.bootstrap
    assert found.layout.cluster_id == cluster.layout.cluster_id
    assert KafkaCluster.existing(tmp_path / "nothing-here") is None
    with pytest.raises(InfraError, match="holds a 3-node cluster, not 1"):
        KafkaCluster(tmp_path, nodes=1)


def test_a_pid_file_names_one_process_not_a_number(tmp_path: Path) -> None:
    import os

    from ostinato.infra import process

    pid_file = tmp_path / "pid"
    process.write_pid_file(pid_file, os.getpid())
    assert process.read_pid(pid_file, "python") == os.getpid()
    assert process.read_pid(pid_file, "no-such-marker") is None
    pid, started = pid_file.read_text().split()
    pid_file.write_text(f"{pid} {int(started) + 1}\n")  # the same number, another process (reused pid)
    assert process.read_pid(pid_file, "python") is None
    assert process.read_pid(tmp_path / "missing", "python") is None
