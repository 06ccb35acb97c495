#!/usr/bin/env python3
"""Writes tests/fixtures/tf_libm.json: SHA-1 digests of glibc's logf and
sincosf on every input TensorFlow's float32 Box-Muller can produce.

glibc's functions are called directly through ctypes (not through numpy,
which has its own SIMD log/sin/cos). Inputs, in order of m = 0 .. 2^23-1:

* logf:    u1 = max(m * 2^-23, 1e-7f)            (Uint32ToFloat, clamped)
* sincosf: v1 = float32(2*pi (double) * m * 2^-23) (the double product, rounded)

Each digest is over the little-endian u32 bit patterns of the outputs.
Takes a minute or two.

    python3 tools/oracle/tf/libm_digests.py [/path/to/libm.so.6]
"""

import ctypes
import hashlib
import json
import math
import os
import platform
import struct
import sys

path = sys.argv[1] if len(sys.argv) > 1 else "libm.so.6"
libm = ctypes.CDLL(path)
libm.logf.restype = ctypes.c_float
libm.logf.argtypes = [ctypes.c_float]
libm.sincosf.restype = None
libm.sincosf.argtypes = [ctypes.c_float, ctypes.POINTER(ctypes.c_float), ctypes.POINTER(ctypes.c_float)]
libc = ctypes.CDLL("libc.so.6")
libc.gnu_get_libc_version.restype = ctypes.c_char_p

f32 = struct.Struct("<f")
u32 = struct.Struct("<I")


def to_f32(x):
    return f32.unpack(f32.pack(x))[0]


def bits(x):
    return f32.pack(x)  # little-endian bytes of the float32


clamp = to_f32(1.0e-7)
two_pi = 2.0 * math.pi
hl, hs, hc = hashlib.sha1(), hashlib.sha1(), hashlib.sha1()
s, c = ctypes.c_float(), ctypes.c_float()
for m in range(1 << 23):
    u = m * 2.0**-23  # exact in float32
    hl.update(bits(libm.logf(max(u, clamp))))
    libm.sincosf(to_f32(two_pi * u), ctypes.byref(s), ctypes.byref(c))
    hs.update(bits(s.value))
    hc.update(bits(c.value))

out = {
    "glibc": libc.gnu_get_libc_version().decode(),
    "machine": platform.machine(),
    "generated_by": "tools/oracle/tf/libm_digests.py",
    "logf_u1": hl.hexdigest(),
    "sinf_v1": hs.hexdigest(),
    "cosf_v1": hc.hexdigest(),
}
dest = os.path.join(os.path.dirname(__file__), "..", "..", "..", "tests", "fixtures", "tf_libm.json")
with open(dest, "w") as f:
    json.dump(out, f, indent=1)
    f.write("\n")
print(out)
