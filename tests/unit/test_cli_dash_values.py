"""A topic id beginning with "-" (base64url: about one in 64) is accepted after --topic-id, as by Kafka's
tools; argparse alone takes it for an option (a clean-clone run failed on one such random id)."""

from __future__ import annotations

from strata.cli import _join_dash_values, build_parser


def test_a_topic_id_starting_with_a_dash_is_a_value() -> None:
    words = _join_dash_values(["topics", "--describe", "--topic-id", "-5zYjFh9RgCwP3hm7qKaKw", "--bootstrap-server",
                               "x:1"])
    args = build_parser().parse_args(words)
    assert args.topic_id == "-5zYjFh9RgCwP3hm7qKaKw"
    assert _join_dash_values(["topics", "--topic-id", "abc"]) == ["topics", "--topic-id", "abc"]
    assert _join_dash_values(["topics", "--topic-id"]) == ["topics", "--topic-id"]
