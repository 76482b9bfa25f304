"""Per-configuration seeds: a config's random streams depend on (seed, its id, stream) only."""

from __future__ import annotations

import hashlib
import json

STREAMS = ("init", "dropout", "noise", "eval_noise", "predict", "sample")


def config_id(method: str, params: dict) -> str:
    """A stable hash of the method and its hyperparameters (key order and int/float spelling ignored)."""
    canon = {k: (float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v)
             for k, v in sorted(params.items())}
    blob = json.dumps({"method": method, "params": canon}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def stream_key(seed: int, cfg_id: str, stream: str) -> str:
    """The name a config's stream key is hashed from (``_rng.PackStream.from_names``)."""
    if stream not in STREAMS:
        raise ValueError(f"unknown random stream {stream!r}")
    return f"{seed}/{cfg_id}/{stream}"


def stream_seed(seed: int, cfg_id: str, stream: str) -> int:
    """A 63-bit seed for a seeded generator of the stream, for the methods that draw outside a
    pack's streams (Random's predictions, the reductions' NumPy draws): the first 8 bytes of
    the key name's SHA-256."""
    digest = hashlib.sha256(stream_key(seed, cfg_id, stream).encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)
