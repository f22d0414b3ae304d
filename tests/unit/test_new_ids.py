"""lifecycle.new_ids and connector.uuid_array (issue 23): the ids a plain bulk enqueue sends, 16
bytes a job from one os.urandom, each a version-4 RFC 4122 UUID as gen_random_uuid() makes them,
laid out as PostgreSQL's binary uuid[]."""

from __future__ import annotations

import struct
import uuid

from jobkit.connector import uuid_array
from jobkit.lifecycle import new_ids


def test_sixteen_bytes_a_job_each_a_version_4_uuid() -> None:
    raw = new_ids(5000)
    assert len(raw) == 16 * 5000
    ids = [uuid.UUID(bytes=raw[k:k + 16]) for k in range(0, len(raw), 16)]
    assert all(i.version == 4 and i.variant == uuid.RFC_4122 for i in ids)
    assert len(set(ids)) == 5000


def test_only_the_version_and_variant_bits_are_fixed() -> None:
    """Every other bit takes both values across a batch (the bytes are not masked beyond the two)."""
    raw = new_ids(4000)
    ors = [0] * 16
    ands = [0xFF] * 16
    for k in range(0, len(raw), 16):
        for j in range(16):
            ors[j] |= raw[k + j]
            ands[j] &= raw[k + j]
    assert ors == [0xFF] * 6 + [0x4F, 0xFF, 0xBF] + [0xFF] * 7
    assert ands == [0] * 6 + [0x40, 0, 0x80] + [0] * 7
    assert new_ids(0) == b""


def test_uuid_array_is_the_binary_array_of_those_uuids() -> None:
    """The layout array_recv reads: ndim 1, no nulls, uuid's oid, length, lower bound 1, then each
    element as a 4-byte length (16) and its bytes."""
    raw = new_ids(300)
    data = uuid_array(raw).data
    assert struct.unpack("!iiIii", data[:20]) == (1, 0, 2950, 300, 1)
    elements = [data[20 + 20 * k:40 + 20 * k] for k in range(300)]
    assert all(e[:4] == b"\x00\x00\x00\x10" for e in elements)
    assert b"".join(e[4:] for e in elements) == raw and len(data) == 20 + 20 * 300
    assert uuid_array(b"").data == struct.pack("!iiI", 0, 0, 2950)
