"""A reader of W&B's offline run files (``run-<id>.wandb``), written here from the format so
that a test checks what W&B stored, not what fairdp asked: a ``:W&B`` header (7 bytes), then
LevelDB-log records in 32 KiB blocks (crc32, length, type; a record split across blocks as
first / middle / last), each a serialised ``wandb_internal_pb2.Record``."""

from __future__ import annotations

import json
import struct
from pathlib import Path

BLOCK = 32768
HEADER = 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def records(path: Path):
    from wandb.proto import wandb_internal_pb2 as pb

    data = Path(path).read_bytes()
    assert data[:4] == b":W&B", f"{path}: not a W&B run file"
    pos, parts = HEADER, b""
    while pos + HEADER <= len(data):
        left = BLOCK - pos % BLOCK
        if left < HEADER:  # the block's tail is padding
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + HEADER])
        if length == 0 and kind == 0:
            pos += left
            continue
        chunk = data[pos + HEADER:pos + HEADER + length]
        pos += HEADER + length
        if kind == FIRST:
            parts = chunk
            continue
        if kind == MIDDLE:
            parts += chunk
            continue
        record = pb.Record()
        record.ParseFromString(parts + chunk if kind == LAST else chunk)
        yield record


def read_run(path: Path) -> dict:
    """name, config, history (step -> {key: value}), summary and exit code of one offline run."""
    out = {"name": None, "config": {}, "history": {}, "summary": {}, "exit_code": None}
    for r in records(path):
        kind = r.WhichOneof("record_type")
        if kind == "run":
            out["name"] = r.run.display_name
            out["config"].update({u.key: json.loads(u.value_json) for u in r.run.config.update})
        elif kind == "config":
            out["config"].update({u.key: json.loads(u.value_json) for u in r.config.update})
        elif kind == "history":
            items = {"/".join(i.nested_key) or i.key: json.loads(i.value_json) for i in r.history.item}
            out["history"][int(items["_step"])] = items
        elif kind == "summary":
            out["summary"].update({"/".join(u.nested_key) or u.key: json.loads(u.value_json) for u in r.summary.update})
        elif kind == "exit":
            out["exit_code"] = r.exit.exit_code
    return out


def offline_runs(directory: Path) -> list[dict]:
    return [read_run(p) for p in sorted(Path(directory).glob("wandb/offline-run-*/run-*.wandb"))]
