"""loopwatch import on hostile input: truncated JSON, wrong types, deep nesting, odd layouts,
and a large file streamed in bounded memory (peak RSS measured in a child process)."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from loopwatch.queries import jsonstream
from loopwatch.queries.ingest.chatlogs import ChatLogOptions
from loopwatch.queries.ingest.importer import ImportOptions, import_chat_log
from loopwatch.queries.ingest.jsonstream import BadRecord, JsonRecord, RecordReader
from loopwatch.queries.store.database import Store


def _conv(n: int, **extra: Any) -> dict[str, Any]:
    return {
        "id": f"c{n}",
        "messages": [
            {"role": "user", "content": f"question {n}"},
            {"role": "assistant", "content": f"answer {n}"},
        ],
        **extra,
    }


def _read(path: Path, **kw: Any) -> list[JsonRecord | BadRecord]:
    return list(RecordReader(path, **kw))


@pytest.fixture(params=[7, 1 << 20], ids=["tiny-chunks", "default-chunks"])
def chunk(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> int:
    # Tiny chunks cut every record and string at the buffer's end: the refill paths run.
    monkeypatch.setattr(jsonstream, "CHUNK_CHARS", request.param)
    return int(request.param)


def test_a_malformed_record_in_an_array_is_skipped_and_the_rest_read(
    tmp_path: Path, chunk: int
) -> None:
    good = [json.dumps(_conv(i)) for i in range(4)]
    text = "[\n" + ",\n".join(
        [good[0], good[1], '{"id": "bad", "messages": [1, 2}', good[2], good[3]]
    )
    text += "\n]\n"
    path = tmp_path / "log.json"
    path.write_text(text)
    items = _read(path)
    assert [type(i).__name__ for i in items] == ["JsonRecord"] * 2 + ["BadRecord"] + [
        "JsonRecord"
    ] * 2
    bad = items[2]
    assert isinstance(bad, BadRecord)
    assert bad.index == 3 and bad.line == 4 and not bad.fatal
    assert "Expecting" in bad.reason
    assert [i.value["id"] for i in items if isinstance(i, JsonRecord)] == ["c0", "c1", "c2", "c3"]


def test_a_truncated_array_keeps_every_whole_record(tmp_path: Path, chunk: int) -> None:
    text = json.dumps([_conv(i) for i in range(5)])
    path = tmp_path / "log.json"
    path.write_text(text[: len(text) - 40])
    items = _read(path)
    assert [type(i).__name__ for i in items] == ["JsonRecord"] * 4 + ["BadRecord"]
    last = items[-1]
    assert isinstance(last, BadRecord) and last.fatal and last.index == 5
    assert last.reason == "the file ends inside this record (truncated?)"


def test_a_truncated_import_reports_and_keeps_the_rest(tmp_path: Path) -> None:
    text = json.dumps([_conv(i) for i in range(5)])
    path = tmp_path / "log.json"
    path.write_text(text[:-30])
    with Store(tmp_path / "lw.duckdb") as store:
        summary = import_chat_log(path, store)
        assert summary.conversations == 4 and summary.bad == 1 and summary.truncated
        assert summary.bad_records == [
            "record 5 (line 1): the file ends inside this record (truncated?)"
        ]
        assert store.connection.execute("SELECT count(*) FROM runs").fetchone() == (4,)


def test_jsonl_with_bad_lines_and_bad_bytes(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    lines = [json.dumps(_conv(0)).encode(), b"{not json", b"", json.dumps(_conv(1)).encode()]
    lines.append(b'{"id": "\xff\xfe", "messages": []}')
    lines.append(json.dumps(_conv(2)).encode())
    path.write_bytes(b"\n".join(lines) + b"\n")
    items = _read(path)
    kinds = [(type(i).__name__, i.index, i.line) for i in items]
    assert kinds == [
        ("JsonRecord", 1, 1),
        ("BadRecord", 2, 2),
        ("JsonRecord", 3, 4),
        ("BadRecord", 4, 5),
        ("JsonRecord", 5, 6),
    ]
    assert "not UTF-8" in items[3].reason  # type: ignore[union-attr]


def test_wrong_types_are_reported_per_record(tmp_path: Path) -> None:
    records: list[Any] = [
        _conv(0, success=True),  # the first conversation names the --success field
        "just a string",
        {"id": "no-messages"},
        {"id": "str-messages", "messages": "hello"},
        {"id": "bad-message", "messages": [{"role": "user", "content": "x"}, 42]},
        {"id": "bad-calls", "messages": [{"role": "assistant", "tool_calls": {"a": 1}}]},
        {"id": "bad-content", "messages": [{"role": "user", "content": {"weird": True}}]},
        _conv(1, success=[1]),
        None,
        _conv(2),
    ]
    path = tmp_path / "log.json"
    path.write_text(json.dumps(records))
    with Store(tmp_path / "lw.duckdb") as store:
        summary = import_chat_log(
            path, store, ImportOptions(chat=ChatLogOptions(success="success"))
        )
    assert summary.conversations == 4  # c0, bad-content (content kept as JSON text), c1, c2
    assert summary.bad == 6
    reasons = "\n".join(summary.bad_records)
    assert "record 2 (line 1): the record is a string, not a conversation" in reasons
    assert "record 3 (line 1): no 'messages' key (keys: 'id')" in reasons
    assert "record 4 (line 1): 'messages' is a string, not a list" in reasons
    assert "record 5 (line 1): message 2 is a number, not an object" in reasons
    assert "record 6 (line 1): message 1: tool_calls is an object, not a list" in reasons
    assert "record 9 (line 1): the record is null" in reasons
    assert summary.labels["unlabeled"] == 3  # bad-content, c1 (a list is no label), c2


def test_deeply_nested_json_is_one_bad_record(tmp_path: Path, chunk: int) -> None:
    deep = "[" * 200_000 + "]" * 200_000
    path = tmp_path / "log.json"
    path.write_text("[" + deep + "," + json.dumps(_conv(1)) + "]")
    items = _read(path)
    assert isinstance(items[0], BadRecord) and items[0].reason == "nested too deeply to parse"
    assert isinstance(items[1], JsonRecord) and items[1].value["id"] == "c1"
    jsonl = tmp_path / "log.jsonl"
    jsonl.write_text('{"a": ' + deep + "}\n" + json.dumps(_conv(2)) + "\n")
    items = _read(jsonl)
    assert isinstance(items[0], BadRecord) and "nested too deeply" in items[0].reason
    assert isinstance(items[1], JsonRecord)


def test_deep_nesting_inside_a_conversation_does_not_crash_the_import(tmp_path: Path) -> None:
    nested: Any = "leaf"
    for _ in range(900):  # parses, but walking it recursively would not
        nested = {"x": nested}
    conv = {
        "messages": [
            {"role": "user", "content": "go"},
            {
                "role": "assistant",
                "tool_calls": [{"id": "a", "function": {"name": "f", "arguments": nested}}],
            },
            {"role": "tool", "tool_call_id": "a", "content": "ok"},
            {"role": "assistant", "content": "done"},
        ]
    }
    path = tmp_path / "log.json"
    path.write_text(json.dumps([conv, _conv(1)]))
    with Store(tmp_path / "lw.duckdb") as store:
        summary = import_chat_log(path, store)
    assert summary.conversations + summary.bad == 2
    assert summary.conversations >= 1


def test_layouts_object_single_and_gzip(tmp_path: Path, chunk: int) -> None:
    obj = tmp_path / "map.json"
    obj.write_text(json.dumps({"k1": _conv(1), "k2": _conv(2)["messages"], "k3": 7}))
    items = _read(obj, record_keys=frozenset({"messages"}))
    assert [(type(i).__name__, i.key) for i in items] == [
        ("JsonRecord", "k1"),
        ("JsonRecord", "k2"),
        ("JsonRecord", "k3"),
    ]
    single = tmp_path / "one.json"
    single.write_text(json.dumps({"id": "solo", "messages": _conv(3)["messages"]}, indent=2))
    (one,) = _read(single, record_keys=frozenset({"messages"}))
    assert isinstance(one, JsonRecord) and one.value["id"] == "solo"
    first_key = tmp_path / "first.json"
    first_key.write_text(json.dumps({"messages": _conv(4)["messages"], "success": True}))
    (two,) = _read(first_key, record_keys=frozenset({"messages"}))
    assert isinstance(two, JsonRecord) and two.value["success"] is True
    gz = tmp_path / "log.jsonl.gz"
    with gzip.open(gz, "wt") as f:
        for i in range(3):
            f.write(json.dumps(_conv(i)) + "\n")
    assert [i.value["id"] for i in _read(gz) if isinstance(i, JsonRecord)] == ["c0", "c1", "c2"]
    bom = tmp_path / "bom.json"
    bom.write_bytes(b"\xef\xbb\xbf" + json.dumps([_conv(5)]).encode())
    assert [i.value["id"] for i in _read(bom) if isinstance(i, JsonRecord)] == ["c5"]


def test_not_json_at_all(tmp_path: Path) -> None:
    path = tmp_path / "log.json"
    path.write_text("<html>oops</html>")
    (bad,) = _read(path)
    assert isinstance(bad, BadRecord) and bad.index == 1


def test_the_same_record_gives_the_same_digest(tmp_path: Path) -> None:
    a = tmp_path / "a.json"
    a.write_text(json.dumps([_conv(1), _conv(2)]))
    b = tmp_path / "b.jsonl"
    b.write_text(json.dumps(_conv(2)) + "\n" + json.dumps(_conv(1)) + "\n")
    da = {i.value["id"]: i.digest for i in _read(a) if isinstance(i, JsonRecord)}
    db = {i.value["id"]: i.digest for i in _read(b) if isinstance(i, JsonRecord)}
    assert da == db


# --- a large file, streamed ---------------------------------------------------------------------

_CHILD = """
import json, resource, sys
from loopwatch.queries.ingest.importer import ImportOptions, import_chat_log
from loopwatch.queries.store.database import Store
with Store(sys.argv[2]) as store:
    s = import_chat_log(sys.argv[1], store, ImportOptions(memory_mb=32, checkpoint_mb=16))
rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"conversations": s.conversations, "runs": s.runs, "messages": s.messages,
                  "bad": s.bad, "rss_mb": rss_mb}))
"""

# One conversation of ~40 kB: a long system prompt, two user messages, each answered after two
# tool calls with long results. Few records per GB keep the test's import short; the reading,
# parsing, digesting and replaying are those of any file.
_PAD = "z" * 8_000


def _conversation(i: int) -> str:
    messages: list[dict[str, Any]] = [{"role": "system", "content": _PAD}]
    for u in range(2):
        messages.append({"role": "user", "content": f"question {i}.{u}"})
        for k in range(2):
            call = f"t{u}{k}"
            messages.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": call, "function": {"name": "search", "arguments": f'{{"q": {k}}}'}}
                    ],
                    "usage": {"prompt_tokens": 900, "completion_tokens": 20},
                }
            )
            messages.append({"role": "tool", "tool_call_id": call, "content": f"{i} {_PAD[:7000]}"})
        messages.append({"role": "assistant", "content": f"answer {i}.{u} {_PAD[:900]}"})
    return json.dumps({"id": f"c{i}", "success": i % 3 > 0, "messages": messages})


def _write_log(path: Path, size: int) -> int:
    """A JSON array of conversations, at least ``size`` bytes; returns how many it holds."""
    n = written = 0
    with path.open("w") as f:
        f.write("[")
        while written < size:
            text = ("," if n else "") + _conversation(n) + "\n"
            f.write(text)
            written += len(text)
            n += 1
        f.write("]")
    return n


def _child_import(log: Path, db: Path) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, str(log), str(db)],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "OTEL_SDK_DISABLED": "true"},
    )
    result: dict[str, Any] = json.loads(out.stdout)
    return result


@pytest.mark.slow
def test_a_1_gb_file_is_streamed_in_the_memory_of_a_file_a_tenth_its_size(tmp_path: Path) -> None:
    """Each file imported in a child process, DuckDB's memory limit set to 32 MB: the 1 GB
    file's peak RSS exceeds the 100 MB file's by at most that limit (which the small import does
    not fill) and 16 MB, where loading the file would cost several times its size in Python
    objects; and every conversation of both is imported."""
    small, large = tmp_path / "small.json", tmp_path / "large.json"
    n_small = _write_log(small, 100_000_000)
    n_large = _write_log(large, 1_000_000_000)
    try:
        assert large.stat().st_size >= 1e9
        s = _child_import(small, tmp_path / "s.duckdb")
        big = _child_import(large, tmp_path / "l.duckdb")
    finally:
        large.unlink()
    assert (s["conversations"], s["runs"], s["bad"]) == (n_small, 2 * n_small, 0)
    assert (big["conversations"], big["runs"], big["bad"]) == (n_large, 2 * n_large, 0)
    assert big["messages"] == 13 * n_large
    assert big["rss_mb"] < s["rss_mb"] + 32 + 16, (s, big)


@pytest.mark.parametrize("layout", ["jsonl", "array"])
def test_a_truncated_gz_import_reports_the_runs_it_kept(tmp_path: Path, layout: str) -> None:
    # A .gz cut short (an interrupted download): every record before the cut is imported and
    # committed, the damage is reported like any malformed input, and the exit code is the
    # documented one for a file with skipped records (0), with no traceback.
    convs = [_conv(i) for i in range(3000)]
    if layout == "jsonl":
        name, text = "log.jsonl.gz", "\n".join(json.dumps(c) for c in convs) + "\n"
    else:
        name, text = "log.json.gz", json.dumps(convs)
    whole = gzip.compress(text.encode(), mtime=0)
    path = tmp_path / name
    path.write_bytes(whole[: len(whole) * 2 // 3])
    db = tmp_path / "lw.duckdb"
    cmd = [sys.executable, "-m", "loopwatch.dashboard.cli", "import", str(path), "--db", str(db)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert "the gzip file is truncated" in done.stderr
    with Store(db) as store:
        (kept,) = store.connection.execute("SELECT count(*) FROM runs").fetchone() or (0,)
    assert 1000 < kept < 3000
    assert f"the {kept:,} runs read before that point are kept" in done.stdout


def test_gz_with_several_members_reads_them_all(tmp_path: Path) -> None:
    # `cat a.gz b.gz` is legal gzip: both members' records are read.
    first = "\n".join(json.dumps(_conv(i)) for i in range(3)) + "\n"
    second = "\n".join(json.dumps(_conv(i)) for i in range(3, 5)) + "\n"
    path = tmp_path / "log.jsonl.gz"
    path.write_bytes(gzip.compress(first.encode()) + gzip.compress(second.encode()))
    items = _read(path)
    assert [i.value["id"] for i in items if isinstance(i, JsonRecord)] == [
        f"c{i}" for i in range(5)
    ]
    path.write_bytes(gzip.compress(first.encode()) + b"trailing junk")
    items = _read(path)
    assert [type(i).__name__ for i in items] == ["JsonRecord"] * 3 + ["BadRecord"]
    assert "the gzip file is damaged" in items[-1].reason  # type: ignore[union-attr]
