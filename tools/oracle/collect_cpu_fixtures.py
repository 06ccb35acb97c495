"""Records the fixtures that depend on the CPU, for the CPU this runs on.

XLA:CPU's `rsqrt` starts from the CPU's own approximate reciprocal square
root (`rsqrtss`, whose table differs between vendors) and refines it once
on AMD, twice elsewhere (xla/codegen/intrinsic/rsqrt.cc), so every fixture
through `rsqrt` (normalization layers, optax's RMSProp and AdaGrad, the
Flax train state in the checkpoints) holds the recording CPU's bits. The
fixtures in tests/fixtures/ are an AMD EPYC's. This script runs the
generators on this CPU in a scratch git worktree of HEAD, and copies every
fixture that came out different into

    tests/fixtures/cpu/<signature>/<same relative path>

where <signature> is the first 12 hex digits of the SHA-1 of JAX's `rsqrt`
over tensor_ops.json's 1024 `rules.rsqrt` inputs (little-endian u32 bits).
The tests (tests/common's `fixture_path`) compute the same digest from
flaxen's own `rsqrt` and read a fixture from that directory when it holds
one: a CPU whose `rsqrt` flaxen computes as JAX did on the recording CPU
checks against that CPU's bits, any other CPU falls back to the AMD files
(and the tests through `rsqrt` say they did not run).

Every file that differs is copied, whatever the reason, so read the list
it prints: a fixture that differs on the recording CPU too is stale, not
CPU-dependent. From the repository root, with a clean HEAD:

    .venv-oracle/bin/python tools/oracle/collect_cpu_fixtures.py \
        [--exclude FIXTURE ...] [generate_x.py ...]

Without scripts it runs every tools/oracle/generate_*.py (not the
TensorFlow ones, whose integer streams do not depend on the CPU).
`--exclude` leaves a changed fixture out (a path under tests/fixtures/):
the directory is chosen by `rsqrt` alone, so a fixture that changed for
another reason must not be read on every CPU with this `rsqrt`.

Fixtures that depend on a CPU feature rather than on `rsqrt` go to
tests/fixtures/cpu/<feature>/ instead (FEATURE_FIXTURES), where the CPU
has the feature: random_dtypes.json's float16 `uniform` with a range and
`truncated_normal`, which XLA computes natively on CPUs with AVX512-FP16,
a multiply fused into its add (on others: f32, rounded after each
operation).
"""

import glob
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

# Fixture -> (the /proc/cpuinfo flag, the directory under tests/fixtures/cpu/).
FEATURE_FIXTURES = {"random_dtypes.json": ("avx512_fp16", "avx512fp16")}


def signature(tensor_ops_path):
    """The CPU signature: SHA-1 of rules.rsqrt.out's bits, 12 hex digits."""
    with open(tensor_ops_path) as f:
        out = json.load(f)["rules"]["rsqrt"]["out"]
    raw = b"".join(int(b).to_bytes(4, "little") for b in out)
    return hashlib.sha1(raw).hexdigest()[:12]


def cpuinfo():
    """The first CPU's /proc/cpuinfo fields (empty where there is none)."""
    fields = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    return fields


def main():
    args = sys.argv[1:]
    excluded = [args[i + 1] for i, a in enumerate(args) if a == "--exclude"]
    args = [a for i, a in enumerate(args) if a != "--exclude" and (i == 0 or args[i - 1] != "--exclude")]
    scripts = args or sorted(
        os.path.basename(p) for p in glob.glob(os.path.join(ROOT, "tools", "oracle", "generate_*.py"))
    )
    work = tempfile.mkdtemp(prefix="flaxen-collect-")
    tree = os.path.join(work, "tree")
    subprocess.run(["git", "-C", ROOT, "worktree", "add", "--detach", tree, "HEAD"], check=True)
    try:
        for script in scripts:
            start = time.time()
            subprocess.run([sys.executable, os.path.join(tree, "tools", "oracle", script)], cwd=tree, check=True)
            print(f"{script}: {time.time() - start:.0f} s", flush=True)
        changed = subprocess.run(
            ["git", "-C", tree, "status", "--porcelain", "--", "tests/fixtures"],
            check=True, capture_output=True, text=True,
        ).stdout.split("\n")
        changed = [line[3:] for line in changed if line.strip()]
        sig = signature(os.path.join(tree, "tests", "fixtures", "tensor_ops.json"))
        recorded = signature(os.path.join(ROOT, "tests", "fixtures", "tensor_ops.json"))
        if sig == recorded:
            print(f"this CPU's rsqrt is the recording CPU's ({sig}); nothing copied. Changed (stale?):")
            print("\n".join(changed) or "(none)")
            return
        info = cpuinfo()
        flags = set(info.get("flags", "").split())
        dest = os.path.join(ROOT, "tests", "fixtures", "cpu", sig)
        for rel in changed:
            rel_in_fixtures = os.path.relpath(rel, "tests/fixtures")
            if rel_in_fixtures in excluded:
                print(f"left out (--exclude) {rel}")
                continue
            target_dir = dest
            if rel_in_fixtures in FEATURE_FIXTURES:
                flag, feature_dir = FEATURE_FIXTURES[rel_in_fixtures]
                if flag not in flags:
                    print(f"changed without {flag} (not copied; look into it): {rel}")
                    continue
                target_dir = os.path.join(ROOT, "tests", "fixtures", "cpu", feature_dir)
            target = os.path.join(target_dir, rel_in_fixtures)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            shutil.copyfile(os.path.join(tree, rel), target)
            print(f"copied {rel} -> {os.path.relpath(target, ROOT)}")
        vendor = info.get("vendor_id", "?")
        model = info.get("model name", platform.processor())
        run = (
            f"{time.strftime('%Y-%m-%d')}: tools/oracle/collect_cpu_fixtures.py ran "
            f"{', '.join(scripts)}{'; left out: ' + ', '.join(excluded) if excluded else ''}.\n"
        )
        machine = os.path.join(dest, "MACHINE.md")
        if os.path.exists(machine):
            # A directory's provenance stays; each run adds its line.
            with open(machine, "a") as f:
                f.write("\n" + run)
        else:
            with open(machine, "w") as f:
                f.write(
                    f"# Fixtures recorded on {vendor} {model}\n\n"
                    f"rsqrt signature {sig}. Each file here replaces the file of the same path "
                    "under tests/fixtures/ on a CPU whose rsqrt has this signature.\n\n" + run
                )
    finally:
        subprocess.run(["git", "-C", ROOT, "worktree", "remove", "--force", tree], check=False)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
