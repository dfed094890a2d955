"""``loopwatch serve`` under the faults an operator meets: odd gzip bodies, a full disk, a
corrupt store, slow senders, a killed server. Real server processes, real files."""

from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import Iterator

import pytest

from tests.serving import ServeProcess, get, post_traces
from tests.test_serve import json_body, make_spans, protobuf_body

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def shared_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    process = ServeProcess(tmp_path_factory.mktemp("faults") / "live.duckdb")
    try:
        yield process
    finally:
        process.kill()


def _stored_ids(server: ServeProcess, prefix: str) -> list[str]:
    status, body = get(server.otlp, "/api/v1/runs?max_rows=10000")
    assert status == 200, body
    rows = json.loads(body)["rows"]
    return [r["run_id"] for r in rows if r["run_id"].startswith(prefix + "-")]


@pytest.mark.parametrize("kind", ["protobuf", "json"])
def test_a_two_member_gzip_body_stores_every_span(shared_server: ServeProcess, kind: str) -> None:
    encode, media = (
        (protobuf_body, "application/x-protobuf")
        if kind == "protobuf"
        else (json_body, "application/json")
    )
    if kind == "protobuf":
        # Two serialized requests one after the other are one request holding both (protobuf
        # merges repeated fields): each member carries half the runs.
        first, second = encode(make_spans(3, prefix="pa")), encode(make_spans(2, prefix="pb"))
        body = gzip.compress(first) + gzip.compress(second)
        expected = {f"pa-{n}" for n in range(3)} | {f"pb-{n}" for n in range(2)}
    else:
        # JSON split across the two members mid-text: only reading both gives the document.
        whole = encode(make_spans(4, prefix="ja"))
        half = len(whole) // 2
        body = gzip.compress(whole[:half]) + gzip.compress(whole[half:])
        expected = {f"ja-{n}" for n in range(4)}
    status, _, answer = post_traces(shared_server.otlp, body, media, Content_Encoding="gzip")
    assert status == 200, answer
    ids = set(_stored_ids(shared_server, "pa") + _stored_ids(shared_server, "pb"))
    ids |= set(_stored_ids(shared_server, "ja"))
    assert expected <= ids


@pytest.mark.parametrize(
    "tail", [b"trailing garbage", b"\x00" * 8, gzip.compress(b"not otlp")[:10]]
)
def test_bytes_after_the_gzip_stream_are_refused_not_ignored(
    shared_server: ServeProcess, tail: bytes
) -> None:
    before = shared_server.health()["spans"]
    body = gzip.compress(protobuf_body(make_spans(2, prefix="tail"))) + tail
    status, _, answer = post_traces(shared_server.otlp, body, Content_Encoding="gzip")
    assert status == 400, answer
    assert shared_server.health()["spans"] == before


def test_bytes_after_a_deflate_stream_are_refused(shared_server: ServeProcess) -> None:
    before = shared_server.health()["spans"]
    body = zlib.compress(protobuf_body(make_spans(2, prefix="defl"))) + b"more"
    status, _, answer = post_traces(shared_server.otlp, body, Content_Encoding="deflate")
    assert status == 400 and b"follow the end of the deflate stream" in answer
    assert shared_server.health()["spans"] == before
