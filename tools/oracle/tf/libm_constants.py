#!/usr/bin/env python3
"""Reads the constants of glibc's logf and sincosf out of the system libm.

TensorFlow's CPU kernels call glibc's `logf` and `sincosf`; flaxen's portable
ports (src/random/tf/libm_f32.rs) need the same table and polynomial
constants to round the same way. This script finds them in the libm binary
(glibc 2.28 and later on x86-64; checked with Debian glibc 2.36) and prints
them as Rust `f64::from_bits` literals:

* logf's data: 16 pairs (invc, logc), then ln2, then 3 polynomial
  coefficients. Found by looking for ln2's bit pattern preceded by 16 pairs
  with logc == -log(invc) (to 1e-12) and one pair equal to (1, 0).
* sincosf's two tables: sign[4], hpi_inv, hpi, then the cosine and sine
  polynomial coefficients in glibc's memory order c0, c1, s1, c2, s2, c3,
  s3, c4 (checked against the Taylor coefficients they approximate). Found
  by looking for hpi_inv = 2^24 * 2/pi followed by hpi = pi/2.
* The bits of 2/pi that sincosf's large-argument reduction uses; these are
  computed here from Machin's formula, not read from the library.

    python3 tools/oracle/tf/libm_constants.py [/path/to/libm.so.6]

These constants are glibc's, which takes them from Arm's optimized-routines
(MIT licence).
"""

import ctypes.util
import math
import struct
import sys


def doubles(blob, off, n):
    return list(struct.unpack_from("<%dd" % n, blob, off))


def bits(x):
    return struct.unpack("<Q", struct.pack("<d", x))[0]


def find_all(blob, pat):
    i = blob.find(pat)
    while i >= 0:
        yield i
        i = blob.find(pat, i + 1)


def logf_data(blob):
    ln2 = struct.pack("<d", math.log(2.0))
    for at in find_all(blob, ln2):
        start = at - 32 * 8
        if start < 0:
            continue
        tab = doubles(blob, start, 32)
        pairs = list(zip(tab[0::2], tab[1::2]))
        if not all(0.5 < invc < 2.0 and abs(logc + math.log(invc)) < 1e-12 for invc, logc in pairs):
            continue
        if (1.0, 0.0) not in pairs:
            continue
        poly = doubles(blob, at + 8, 3)
        if not (abs(poly[0] + 0.25) < 0.01 and abs(poly[1] - 1 / 3) < 0.01 and abs(poly[2] + 0.5) < 0.01):
            continue
        return pairs, poly
    sys.exit("logf data not found")


def sincosf_tables(blob):
    hpi_inv = struct.pack("<d", float.fromhex("0x1.45F306DC9C883p+23"))
    hpi = struct.pack("<d", float.fromhex("0x1.921FB54442D18p0"))
    for at in find_all(blob, hpi_inv + hpi):
        start = at - 4 * 8
        t0 = doubles(blob, start, 14)
        t1 = doubles(blob, start + 14 * 8, 14)
        if t0[:4] == [1.0, -1.0, -1.0, 1.0] and t1[4:6] == t0[4:6]:
            return t0, t1
    sys.exit("sincosf tables not found")


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else "/lib/x86_64-linux-gnu/libm.so.6"
    blob = open(path, "rb").read()
    pairs, poly = logf_data(blob)
    print("// logf: (invc, logc) for each of the 16 subintervals.")
    print("const LOGF_TABLE: [(u64, u64); 16] = [")
    for invc, logc in pairs:
        print(f"    (0x{bits(invc):016x}, 0x{bits(logc):016x}), // {invc.hex()}, {logc.hex()}")
    print("];")
    print("// logf: A[0], A[1], A[2].")
    print("const LOGF_POLY: [u64; 3] = [" + ", ".join(f"0x{bits(a):016x}" for a in poly) + "];")
    for a in poly:
        print(f"//   {a.hex()}")
    t0, t1 = sincosf_tables(blob)
    names = ["sign0", "sign1", "sign2", "sign3", "hpi_inv", "hpi", "c0", "c1", "s1", "c2", "s2", "c3", "s3", "c4"]
    taylor = {"c0": 1, "c1": -1 / 2, "c2": 1 / 24, "c3": -1 / 720, "c4": 1 / 40320,
              "s1": -1 / 6, "s2": 1 / 120, "s3": -1 / 5040}
    for k, t in enumerate([t0, t1]):
        for name, v in zip(names[6:], t[6:]):
            want = taylor[name] * (-1 if k == 1 and name.startswith("c") else 1)
            assert abs(v / want - 1) < 0.03, (k, name, v, want)
        print(f"// sincosf table {k}: " + ", ".join(names))
        print(f"const SINCOSF_TABLE_{k}: [u64; 14] = [")
        for name, v in zip(names, t):
            print(f"    0x{bits(v):016x}, // {name} = {v.hex()}")
        print("];")
    print("// 2/pi bits for the large-argument reduction.")
    print("const INV_PIO4: [u32; 24] = [")
    w = inv_pio4_words()
    for i in range(0, 24, 6):
        print("    " + ", ".join(f"0x{x:08x}" for x in w[i:i + 6]) + ",")
    print("];")


def two_over_pi_bytes(nbytes):
    """The first `nbytes` bytes of the binary fraction of 2/pi (Machin's formula)."""
    prec = 8 * nbytes + 64
    one = 1 << prec

    def arctan_inv(m):
        total, term, k, sign = 0, one // m, 1, 1
        while term:
            total += sign * (term // k)
            term //= m * m
            k += 2
            sign = -sign
        return total

    pi = 4 * (4 * arctan_inv(5) - arctan_inv(239))
    frac = (2 * one * one // pi) >> 64  # 2/pi with 8*nbytes fraction bits
    return frac.to_bytes(nbytes, "big")


def inv_pio4_words():
    """Word j holds bytes j-3..j of 2/pi's fraction (missing bytes are zero)."""
    b = two_over_pi_bytes(24)
    words = []
    for j in range(24):
        w = 0
        for i in range(j - 3, j + 1):
            w = (w << 8) | (b[i] if i >= 0 else 0)
        words.append(w)
    return words


if __name__ == "__main__":
    main()
