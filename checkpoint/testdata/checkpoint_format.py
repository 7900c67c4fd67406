#!/usr/bin/env python3
"""Reads and writes dranode checkpoint files without Go, to show (and test)
that the format in ../README.md is complete.

    python3 checkpoint_format.py verify FILE...   print kind, version, payload of File, snapshot or log files
    python3 checkpoint_format.py fixtures         (re)write the File fixtures in this directory
"""
import json
import struct
import sys


def _crc32c_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc32c_table()


def crc32c(data: bytes) -> int:
    c = 0xFFFFFFFF
    for b in data:
        c = _TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def frame(payload: bytes) -> bytes:
    return struct.pack("<II", len(payload), crc32c(payload)) + payload


def read_frames(data: bytes, off: int):
    """Yields (offset, payload); raises ValueError on a damaged frame."""
    while off < len(data):
        if len(data) - off < 8:
            raise ValueError(f"offset {off}: truncated frame header")
        n, crc = struct.unpack_from("<II", data, off)
        if n == 0 or n > len(data) - off - 8:
            raise ValueError(f"offset {off}: bad length {n}")
        payload = data[off + 8 : off + 8 + n]
        if crc32c(payload) != crc:
            raise ValueError(f"offset {off}: checksum mismatch")
        yield off, payload
        off += 8 + n


def uvarint(b: bytes, p: int):
    x = shift = 0
    while True:
        c = b[p]
        p += 1
        x |= (c & 0x7F) << shift
        if c < 0x80:
            return x, p
        shift += 7


def changes(record: bytes):
    p = 0
    while p < len(record):
        op = chr(record[p])
        n, p = uvarint(record, p + 1)
        key = record[p : p + n].decode()
        p += n
        if op == "D":
            yield ("delete", key, None)
            continue
        n, p = uvarint(record, p)
        yield ("put", key, json.loads(record[p : p + n]))
        p += n


def verify(path: str):
    data = open(path, "rb").read()
    magic = data[:8].decode()
    frames = list(read_frames(data, 8))
    hdr = json.loads(frames[0][1])
    print(f"{path}: {magic} {json.dumps(hdr)}")
    if magic == "DRNFILE1":
        assert len(frames) == 2, "a File holds exactly a header and a payload"
        print(json.dumps(json.loads(frames[1][1])))
    else:
        for off, rec in frames[1:]:
            print(off, list(changes(rec)))


def write_file(path: str, kind: str, version: int, payload: dict):
    hdr = json.dumps({"kind": kind, "version": version}, separators=(",", ":")).encode()
    body = json.dumps(payload, separators=(",", ":")).encode()
    with open(path, "wb") as f:
        f.write(b"DRNFILE1" + frame(hdr) + frame(body))


def fixtures():
    kind = "dranode.io/test-devices"
    # Version 0: the layout before the first written format, one GPU and its node.
    write_file("file-v0.ckpt", kind, 0, {"gpu": "gpu-3", "node": 1})
    # Version 1: one device and its NUMA node.
    write_file("file-v1.ckpt", kind, 1, {"device": "gpu-0", "numa": 1})
    # Version 2: a list of devices.
    write_file("file-v2.ckpt", kind, 2, {"devices": [{"name": "gpu-0", "numa": 1}, {"name": "gpu-1", "numa": 0}]})
    # Version 9: from the future.
    write_file("file-v9.ckpt", kind, 9, {"devices": "unknown shape"})


if __name__ == "__main__":
    if sys.argv[1:2] == ["fixtures"]:
        fixtures()
    elif sys.argv[1:2] == ["verify"]:
        for p in sys.argv[2:]:
            verify(p)
    else:
        sys.exit(__doc__)
