#!/usr/bin/env python3
"""Writes the seed corpus of the slot-header fuzzer (corpus/slot/).

Each file is one fuzz input: a SlotHeader (704 bytes, docs/ring_format.md)
followed by the slot's payload. Run from anywhere; rewrites the files.
"""
import os
import struct

HEADER = 704
MAGIC = 0x544F4C53  # "SLOT"
INT32, INT64 = 1, 2
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "slot")


def tensor(name, dtype, ndim, shape, offset, nbytes):
    raw = name.encode() if isinstance(name, str) else name
    return struct.pack("<32sIIqqQQ", raw.ljust(32, b"\0")[:32], dtype, ndim, shape[0], shape[1], offset, nbytes)


def header(tensors, payload_bytes, seq=7, session=3, magic=MAGIC, header_bytes=HEADER, reserved0=0):
    h = struct.pack("<IIQQQIIIIIIQQQ", magic, header_bytes, seq, session, 21, 1, 4, 2, 3,
                    len(tensors), 0, payload_bytes, 0, 5)
    h += bytes([reserved0]) + bytes(7)
    for t in tensors:
        h += t
    h += bytes(88 + 8 * 72 - len(h))
    return h + bytes(HEADER - len(h))


def slot(tensors, payload_bytes, payload_len=None, **kw):
    n = payload_bytes if payload_len is None else payload_len
    return header(tensors, payload_bytes, **kw) + bytes((i * 37) & 0xFF for i in range(n))


def main():
    os.makedirs(OUT, exist_ok=True)
    two = [tensor("input_ids", INT64, 2, (2, 2), HEADER, 32), tensor("labels", INT32, 1, (6, 0), HEADER + 64, 24)]
    cases = {
        "valid_two_tensors": slot(two, 64 + 24),
        "valid_no_tensors": slot([], 0),
        "valid_scalar": slot([tensor("max_seqlen", INT32, 0, (0, 0), HEADER, 4)], 4, 64),
        "valid_empty_tensor": slot([tensor("cu_seqlens", INT32, 1, (0, 0), HEADER, 0)], 0),
        "bad_magic": slot(two, 88, magic=0x544F4C54),
        "bad_header_bytes": slot(two, 88, header_bytes=640),
        "wrong_seq": slot(two, 88, reserved0=3),
        "wrong_session": slot(two, 88, reserved0=1),
        "too_many_tensors": slot(two, 88)[:48] + struct.pack("<I", 9) + slot(two, 88)[52:],
        "payload_past_slot": slot(two, 4096, 88),
        "tensor_past_payload": slot([tensor("input_ids", INT64, 1, (16, 0), HEADER, 128)], 64),
        "shape_overflow": slot([tensor("x", INT64, 2, (1 << 40, 1 << 40), HEADER, 0)], 0),
        "negative_shape": slot([tensor("x", INT32, 1, (-1, 0), HEADER, 0)], 0),
        "nbytes_mismatch": slot([tensor("x", INT32, 1, (4, 0), HEADER, 15)], 64),
        "offset_wraps": slot([tensor("x", INT32, 1, (4, 0), (1 << 64) - 8, 16)], 64),
        "misaligned": slot([tensor("x", INT32, 1, (4, 0), HEADER + 4, 16)], 64),
        "name_unterminated": slot([tensor(b"y" * 32, INT32, 1, (4, 0), HEADER, 16)], 64),
        "name_empty": slot([tensor("", INT32, 1, (4, 0), HEADER, 16)], 64),
        "bad_dtype": slot([tensor("x", 3, 1, (4, 0), HEADER, 16)], 64),
        "bad_ndim": slot([tensor("x", INT32, 3, (4, 1), HEADER, 16)], 64),
        "short_input": slot(two, 88)[:100],
    }
    for name, data in cases.items():
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(data)
    print(f"wrote {len(cases)} inputs to {OUT}")


if __name__ == "__main__":
    main()
