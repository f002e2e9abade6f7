"""Positions in a multi-node log (one offset per node, a single node's as before) and labels."""

from __future__ import annotations

import pytest

from starforge.contract.logcursor import LogPosition, label, merge, parse


def test_a_single_node_position_is_spelled_as_it_always_was() -> None:
    assert LogPosition(3, [1024]).format() == "3:1024"
    assert parse("3:1024") == LogPosition(3, [1024])
    assert LogPosition(2).format() == "2:0"  # an attempt's start


def test_a_multi_node_position_carries_every_nodes_offset() -> None:
    position = parse("1:2048,77,0")
    assert [position.offset(r) for r in range(4)] == [2048, 77, 0, 0]
    assert position.format() == "1:2048,77,0"
    assert position.moved(1, 90).format() == "1:2048,90,0"


def test_a_position_naming_fewer_nodes_is_read_with_the_others_at_their_start() -> None:
    # An id from before multi-node logs, or an attempt event's "<attempt>:0".
    assert parse("1:500").for_nodes(3) == LogPosition(1, [500, 0, 0])
    assert parse("1:5,6,7").for_nodes(2) == LogPosition(1, [5, 6])
    assert LogPosition(1).moved(2, 9) == LogPosition(1, [0, 0, 9])


@pytest.mark.parametrize(
    "text", ["", "1", "1:", "0:5", "-1:5", "1:-5", "a:b", "1:2,,3", "1:2,x", "1:5,-1"]
)
def test_a_malformed_position_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="invalid log position"):
        parse(text)


def test_every_line_of_a_node_after_the_first_is_labelled_where_it_starts() -> None:
    assert label("a\nb\n", 1) == "[node 1] a\n[node 1] b\n"
    assert label("a\nb", 2) == "[node 2] a\n[node 2] b"
    assert (
        label("rest of a line\nnext\n", 1, at_line_start=False) == "rest of a line\n[node 1] next\n"
    )
    assert label("a\nb\n", 0) == "a\nb\n"  # node 0 reads as its file
    assert label("", 3) == ""
    assert label("\n", 1) == "[node 1] \n"  # an empty line is still a line of that node


def test_merged_nodes_read_node_by_node_and_a_single_node_reads_as_its_file() -> None:
    assert merge(["x\ny"]) == "x\ny"
    assert merge(["a\nunfinished", "b\n", "", "c"]) == ("a\nunfinished\n[node 1] b\n[node 3] c\n")
