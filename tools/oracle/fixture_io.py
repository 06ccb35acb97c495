"""How the oracle scripts write arrays into fixtures: f32 values as the
exact decimals of their bits (null for NaN), or as the bits themselves
where infinities must survive JSON; int32 arrays as integers, the shape
beside them; nested dicts of arrays flattened to '/'-joined paths; or
expected results as bits, with a SHA-1 digest for large ones."""

import hashlib

import numpy as np

# The NaN every NaN is hashed as: XLA does not promise a NaN's payload or sign.
CANONICAL_NAN = 0x7FC00000


def enc(x):
    """An array as {"shape": [...], "data": [...]} (or "int" for integers)."""
    x = np.asarray(x)
    if x.dtype.kind in "iu":
        return {"shape": list(x.shape), "int": [int(v) for v in x.reshape(-1)]}
    x = x.astype(np.float32)
    return {"shape": list(x.shape), "data": [None if np.isnan(v) else float(v) for v in x.reshape(-1)]}


def flat(tree, prefix=""):
    """A nested dict of arrays as {"a/b/c": enc(array)}."""
    out = {}
    for k, v in tree.items():
        p = f"{prefix}/{k}" if prefix else k
        if isinstance(v, dict):
            out.update(flat(v, p))
        else:
            out[p] = enc(v)
    return out


def enc_bits(x):
    """An f32 array as {"shape": [...], "bits": [...]}: every value's bit
    pattern, so infinities, signed zeros and NaNs survive JSON."""
    x = np.asarray(x, dtype=np.float32)
    return {"shape": list(x.shape), "bits": [int(v) for v in x.reshape(-1).view(np.uint32)]}


def expected(x, limit=4096):
    """An expected array: its u32 bits, or beyond `limit` elements the SHA-1
    of its bits (little-endian, every NaN as 0x7fc00000) and its length,
    so that the fixture stays small; the tests hash flaxen's values the
    same way (tests/common's `digest`)."""
    bits = np.asarray(x, dtype=np.float32).reshape(-1).view(np.uint32).copy()
    if bits.size <= limit:
        return bits.tolist()
    nan = np.isnan(bits.view(np.float32))
    bits[nan] = CANONICAL_NAN
    return {"n": int(bits.size), "sha1": hashlib.sha1(bits.astype("<u4").tobytes()).hexdigest()}
