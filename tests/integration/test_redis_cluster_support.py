"""The test Redis Cluster forms even when a port picked for it is taken before its node binds it,
and says why when it cannot form at all.

`free_port` returns a port that was free a moment ago; on a busy machine another test's outgoing
connection can take it as its source port before the node binds it. One full loaded run saw
`redis-cli --cluster create` fail that way with nothing in the error to say why.
"""

from __future__ import annotations

import pathlib
import socket
from collections.abc import Iterator

import pytest

from tests.support.redis_cluster import RedisCluster


@pytest.fixture
def held() -> Iterator[int]:
    """A port another program listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield int(s.getsockname()[1])


class TakenOnce(RedisCluster):
    """A cluster whose first placement gives one node a bus port that is already taken."""

    def __init__(self, folder: pathlib.Path, taken: int, always: bool = False) -> None:
        self.taken = taken
        self.always = always
        self.placements = 0
        super().__init__(folder, masters=3, replicas=0)

    def _place_nodes(self) -> None:
        super()._place_nodes()
        self.placements += 1
        if self.placements == 1 or self.always:
            self.nodes[1].bus_port = self.taken


def test_a_node_whose_port_was_taken_is_started_again_on_fresh_ports(
    tmp_path: pathlib.Path, held: int
) -> None:
    cluster = TakenOnce(tmp_path / "cluster", held)
    try:
        cluster.start()
        assert cluster.placements == 2
        assert held not in {n.bus_port for n in cluster.nodes}
        info = cluster.cli(cluster.nodes[0].port, "cluster", "info")
        assert "cluster_state:ok" in info
        assert "cluster_known_nodes:3" in info
    finally:
        cluster.stop()


def test_a_cluster_that_cannot_form_says_what_redis_said(tmp_path: pathlib.Path, held: int) -> None:
    cluster = TakenOnce(tmp_path / "cluster", held, always=True)
    try:
        with pytest.raises(AssertionError) as failed:
            cluster.start()
    finally:
        cluster.stop()
    message = str(failed.value)
    assert "did not form in 3 attempts" in message
    assert message.count(f"(bus {held}) exited") == 3
    assert "Address already in use" in message
