"""Validation's checksum of a few small Parquet files, computed in the driver's Python
(pyarrow and Spark's xxhash64 written out here), with no Spark job.

A tiny compaction's validation was one Spark job reading its one output file: 0.3-0.5 s of
planning and scheduling for a few thousand rows (docs/performance.md, B24). The driver
reads such files in milliseconds. The sums must be exactly Spark's (`validation.row_hash`:
xxhash64, seed 42, over each column and its NULL flag, NULLs skipped), since they are
compared with what Spark observed of the inputs; so this covers only the column types whose
hash is written out below and returns None for anything else (the caller reads with Spark).
A difference it finds is confirmed by Spark's reader before it fails a rewrite
(`validation.compare_spans`), so an error here can cost time but never refuse a good
rewrite; and a bad rewrite passes only if these sums equal the inputs' exactly.
"""

from __future__ import annotations

import struct
from typing import Any

M = (1 << 64) - 1
P1 = 0x9E3779B185EBCA87
P2 = 0xC2B2AE3D27D4EB4F
P3 = 0x165667B19E3779F9
P4 = 0x85EBCA77C2B2AE63
P5 = 0x27D4EB2F165667C5
SEED = 42  # Spark's xxhash64 seed

# Outputs of more rows than this go to Spark. Fixed-width columns are hashed a column at a
# time (Arrow's kernels); strings, binaries and decimals one value at a time in Python,
# about 4 us each (twice that on a loaded machine): at most MAX_VARIABLE_VALUES of them.
MAX_ROWS = 200_000
MAX_VARIABLE_VALUES = 30_000


def affordable(rows: int, spark_types: list[str]) -> bool:
    """Whether `rows` rows of columns of these Spark types are cheap to sum here."""
    variable = sum(t in ("string", "binary") or t.startswith("decimal(") for t in spark_types)
    return rows <= MAX_ROWS and rows * variable <= MAX_VARIABLE_VALUES


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & M


def _fmix(h: int) -> int:
    h ^= h >> 33
    h = (h * P2) & M
    h ^= h >> 29
    h = (h * P3) & M
    return h ^ (h >> 32)


def hash_int(value: int, seed: int) -> int:
    """Spark's XXH64.hashInt (a 4-byte value), unsigned 64-bit."""
    h = (seed + P5 + 4) & M
    h ^= ((value & 0xFFFFFFFF) * P1) & M
    return _fmix((_rotl(h, 23) * P2 + P3) & M)


def hash_long(value: int, seed: int) -> int:
    """Spark's XXH64.hashLong (an 8-byte value), unsigned 64-bit."""
    h = (seed + P5 + 8) & M
    h ^= (_rotl((value * P2) & M, 31) * P1) & M
    return _fmix((_rotl(h, 27) * P1 + P4) & M)


def _round(acc: int, lane: int) -> int:
    return (_rotl((acc + lane * P2) & M, 31) * P1) & M


def hash_bytes(data: bytes, seed: int) -> int:
    """Spark's XXH64.hashUnsafeBytes (XXH64 of the bytes), unsigned 64-bit."""
    n, i = len(data), 0
    if n >= 32:
        v1, v2, v3, v4 = (seed + P1 + P2) & M, (seed + P2) & M, seed, (seed - P1) & M
        while i + 32 <= n:
            a, b, c, d = struct.unpack_from("<4Q", data, i)
            v1, v2, v3, v4 = _round(v1, a), _round(v2, b), _round(v3, c), _round(v4, d)
            i += 32
        h = (_rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)) & M
        for v in (v1, v2, v3, v4):
            h = ((h ^ _round(0, v)) * P1 + P4) & M
    else:
        h = (seed + P5) & M
    h = (h + n) & M
    while i + 8 <= n:
        (k,) = struct.unpack_from("<Q", data, i)
        h = (_rotl(h ^ _round(0, k), 27) * P1 + P4) & M
        i += 8
    if i + 4 <= n:
        (k,) = struct.unpack_from("<I", data, i)
        h = (_rotl(h ^ ((k * P1) & M), 23) * P2 + P3) & M
        i += 4
    while i < n:
        h = (_rotl(h ^ ((data[i] * P5) & M), 11) * P1) & M
        i += 1
    return _fmix(h)


def _float_bits(v: float) -> int:
    return 0 if v == 0.0 else 0x7FC00000 if v != v else struct.unpack("<I", struct.pack("<f", v))[0]


def _double_bits(v: float) -> int:
    if v == 0.0:
        return 0
    return 0x7FF8000000000000 if v != v else struct.unpack("<Q", struct.pack("<d", v))[0]


def _big_decimal(unscaled: int) -> bytes:
    """Java's BigInteger.toByteArray: big-endian two's complement, fewest bytes."""
    return unscaled.to_bytes(
        (unscaled if unscaled >= 0 else ~unscaled).bit_length() // 8 + 1, "big", signed=True
    )


def _unscaled(value: Any, scale: int) -> int:
    """A decimal.Decimal's unscaled integer at `scale`, exactly (no context rounding)."""
    sign, digits, exponent = value.as_tuple()
    n = int("".join(map(str, digits)) or "0")
    shift = int(exponent) + scale
    n = n * 10**shift if shift >= 0 else n // 10**-shift
    return -n if sign else n


class _Vec:
    """Spark's hashInt and hashLong over Arrow uint64 arrays (wrapping arithmetic), so
    fixed-width columns cost no Python per value."""

    def __init__(self) -> None:
        import pyarrow as pa
        import pyarrow.compute as pc

        self.pa, self.pc = pa, pc

    def u(self, v: int) -> Any:
        return self.pa.scalar(v, self.pa.uint64())

    def rotl(self, x: Any, r: int) -> Any:
        pc = self.pc
        return pc.bit_wise_or(pc.shift_left(x, self.u(r)), pc.shift_right(x, self.u(64 - r)))

    def fmix(self, h: Any) -> Any:
        pc, u = self.pc, self.u
        h = pc.bit_wise_xor(h, pc.shift_right(h, u(33)))
        h = pc.multiply(h, u(P2))
        h = pc.bit_wise_xor(h, pc.shift_right(h, u(29)))
        h = pc.multiply(h, u(P3))
        return pc.bit_wise_xor(h, pc.shift_right(h, u(32)))

    def hash_int(self, v: Any, seed: Any) -> Any:  # v: uint64 holding the int's 32 bits
        pc, u = self.pc, self.u
        h = pc.add(seed, u((P5 + 4) & M))
        h = pc.bit_wise_xor(h, pc.multiply(v, u(P1)))
        return self.fmix(pc.add(pc.multiply(self.rotl(h, 23), u(P2)), u(P3)))

    def hash_long(self, v: Any, seed: Any) -> Any:  # v: uint64 holding the long's bits
        pc, u = self.pc, self.u
        h = pc.add(seed, u((P5 + 8) & M))
        k = pc.multiply(self.rotl(pc.multiply(v, u(P2)), 31), u(P1))
        h = pc.bit_wise_xor(h, k)
        return self.fmix(pc.add(pc.multiply(self.rotl(h, 27), u(P1)), u(P4)))


def _bits(column: Any, width: int) -> Any:
    """A float32/float64 array's bit patterns as uint64, Spark's way: 0.0 and -0.0 as 0,
    every NaN as Java's canonical NaN (NULLs as 0: the caller skips them)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    values = column.fill_null(0.0)
    raw = pa.Array.from_buffers(
        pa.uint32() if width == 32 else pa.uint64(),
        len(values),
        [None, values.buffers()[1]],
        offset=values.offset,
    ).cast(pa.uint64())
    nan = 0x7FC00000 if width == 32 else 0x7FF8000000000000
    raw = pc.if_else(pc.is_nan(values), pa.scalar(nan, pa.uint64()), raw)
    return pc.if_else(pc.equal(values, 0.0), pa.scalar(0, pa.uint64()), raw)


def _hasher(spark_type: str, arrow_type: Any) -> Any:
    """("int" | "long", the column as uint64 bits) or ("each", how Spark hashes one value)
    for a Spark type read from an Arrow column of `arrow_type`; None when not covered."""
    import pyarrow as pa

    t = arrow_type
    u64 = pa.uint64()

    def ints(c: Any) -> Any:
        return c.fill_null(0).cast(pa.int32()).cast(pa.uint32(), safe=False).cast(u64)

    def longs(c: Any) -> Any:
        return c.fill_null(0).cast(pa.int64()).cast(u64, safe=False)

    if spark_type == "boolean" and pa.types.is_boolean(t):
        return "int", lambda c: c.fill_null(False).cast(u64)
    if spark_type == "int" and t in (pa.int8(), pa.int16(), pa.int32()):
        return "int", ints
    if spark_type == "bigint" and t == pa.int64():
        return "long", longs
    if spark_type == "date" and t == pa.date32():
        return "int", lambda c: ints(c.cast(pa.int32()))
    timestamp = spark_type in ("timestamp", "timestamp_ntz") and pa.types.is_timestamp(t)
    if timestamp and t.unit == "us" and (t.tz is not None) == (spark_type == "timestamp"):
        return "long", longs  # microseconds since the epoch, as Spark holds them
    if spark_type == "float" and t == pa.float32():
        return "int", lambda c: _bits(c, 32)
    if spark_type == "double" and t == pa.float64():
        return "long", lambda c: _bits(c, 64)
    if spark_type == "string" and (t == pa.string() or t == pa.large_string()):
        return "each", lambda v, s: hash_bytes(v.encode("utf-8"), s)
    if spark_type == "binary" and (pa.types.is_binary(t) or pa.types.is_large_binary(t)):
        return "each", hash_bytes
    if spark_type.startswith("decimal(") and pa.types.is_decimal(t):
        scale = t.scale
        if f"decimal({t.precision},{scale})" != spark_type:
            return None
        if t.precision <= 18:
            return "each", lambda v, s: hash_long(_unscaled(v, scale), s)
        return "each", lambda v, s: hash_bytes(_big_decimal(_unscaled(v, scale)), s)
    return None


def file_sums(path: str, columns: list[tuple[str, str]]) -> tuple[int, int] | None:
    """(rows, checksum) of the Parquet file at the local `path`, over `columns` ((name, Spark
    type's simple string)) exactly as `validation.row_hash` and `checksum_aggregates` sum
    them in Spark; None when a column is missing or of a type not covered here."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    names = [name for name, _ in columns]
    try:
        data = pq.read_table(path, columns=names)
    except (KeyError, ValueError):  # a column the file lacks
        return None
    hows = []
    for name, spark_type in columns:
        if data.schema.get_field_index(name) < 0:
            return None
        how = _hasher(spark_type, data.schema.field(name).type)
        if how is None:
            return None
        hows.append((data.column(name).combine_chunks(), how))
    vec = _Vec()
    h = pa.array([SEED] * data.num_rows, pa.uint64())
    for column, (kind, how) in hows:
        valid = pc.is_valid(column)
        if kind == "each":  # variable width: one value at a time
            seeds = h.to_pylist()
            values = column.to_pylist()
            h = pa.array(
                [s if v is None else how(v, s) for v, s in zip(values, seeds, strict=True)],
                pa.uint64(),
            )
        else:
            bits = how(column)
            hashed = vec.hash_int(bits, h) if kind == "int" else vec.hash_long(bits, h)
            h = pc.if_else(valid, hashed, h)
        # its NULL flag (a boolean, never NULL)
        h = vec.hash_int(pc.invert(valid).cast(pa.uint64()), h)
    signed = h.cast(pa.int64(), safe=False)
    hi = pc.sum(pc.shift_right(signed, 32)).as_py() or 0
    lo = pc.sum(pc.bit_wise_and(signed, 0xFFFFFFFF)).as_py() or 0
    return data.num_rows, (hi << 32) + lo
