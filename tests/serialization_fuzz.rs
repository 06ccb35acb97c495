//! Thousands of mutated checkpoint files thrown at each loader: every one
//! is read or refused with a typed error — no panic, and no allocation
//! larger than a small multiple of the file (a counting allocator watches).

use std::alloc::{GlobalAlloc, Layout, System};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};

use flaxen::core::Variables;
use flaxen::serialization::{from_bytes, from_safetensors, msgpack_restore, read_safetensors};
use flaxen::tensor::{Tensor, Tree};

/// The largest single allocation requested since the last reset.
static LARGEST: AtomicUsize = AtomicUsize::new(0);

/// The tests take turns, so that one test's allocations are not counted
/// against another's.
static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn turn() -> std::sync::MutexGuard<'static, ()> {
    TURN.lock().unwrap_or_else(|e| e.into_inner())
}

struct Watch;

// SAFETY: every call is forwarded unchanged to the system allocator; the
// wrapper only records the requested size.
unsafe impl GlobalAlloc for Watch {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LARGEST.fetch_max(layout.size(), Ordering::Relaxed);
        // SAFETY: the caller upholds `alloc`'s contract, passed on as is.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LARGEST.fetch_max(new_size, Ordering::Relaxed);
        // SAFETY: as for `dealloc`, and `new_size` is the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Watch = Watch;

fn file(name: &str) -> Vec<u8> {
    std::fs::read(format!(
        "{}/tests/fixtures/checkpoints/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

/// A small deterministic generator (SplitMix64), so failures reproduce.
struct Mix(u64);

impl Mix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// One mutation of `base`: flipped bits, bytes set to boundary values
/// (lengths become huge), a cut, an insertion, a duplicated span.
fn mutate(base: &[u8], r: &mut Mix) -> Vec<u8> {
    let mut v = base.to_vec();
    for _ in 0..1 + r.below(4) {
        match r.below(6) {
            0 if !v.is_empty() => {
                let i = r.below(v.len());
                v[i] ^= 1 << r.below(8);
            }
            1 if !v.is_empty() => {
                let i = r.below(v.len());
                v[i] = [0x00, 0xff, 0x7f, 0x80, 0xdd, 0xdf, 0xc9, 0xc6][r.below(8)];
            }
            2 => {
                let n = r.below(v.len() + 1);
                v.truncate(n);
            }
            3 => {
                let i = r.below(v.len() + 1);
                let b = r.next() as u8;
                v.insert(i, b);
            }
            4 if v.len() > 2 => {
                let i = r.below(v.len() - 1);
                let n = 1 + r.below((v.len() - i).min(64));
                let span: Vec<u8> = v[i..i + n].to_vec();
                let j = r.below(v.len() + 1);
                v.splice(j..j, span);
            }
            _ => {
                // A long run of one byte: deep nesting or huge headers.
                let i = r.below(v.len() + 1);
                let b = [0x91u8, 0x81, 0xdd, 0xff][r.below(4)];
                v.splice(i..i, std::iter::repeat_n(b, 1 + r.below(3000)));
            }
        }
    }
    v
}

/// Runs `load` on `cases` mutations of `base`; panics name the case.
fn fuzz(name: &str, base: &[u8], cases: usize, seed: u64, load: impl Fn(&[u8]) -> bool) {
    let mut r = Mix(seed);
    let mut accepted = 0;
    for case in 0..cases {
        let input = mutate(base, &mut r);
        LARGEST.store(0, Ordering::Relaxed);
        let outcome = catch_unwind(AssertUnwindSafe(|| load(&input)));
        let largest = LARGEST.load(Ordering::Relaxed);
        match outcome {
            Ok(ok) => accepted += usize::from(ok),
            Err(_) => panic!("{name}: case {case} panicked (input {} bytes)", input.len()),
        }
        // Reading never needs more than a few copies of the file at once.
        let bound = 8 * input.len() + (1 << 16);
        assert!(
            largest <= bound,
            "{name}: case {case} allocated {largest} bytes for {} input bytes",
            input.len()
        );
    }
    // Some mutations (a flipped mantissa bit) still read.
    assert!(accepted > 0, "{name}: no mutation was accepted");
}

fn target() -> Variables {
    let dense = |i: usize, o: usize| {
        Tree::new()
            .with("bias", Tensor::zeros(&[o]))
            .with("kernel", Tensor::zeros(&[i, o]))
    };
    Variables::new()
        .with(
            "params",
            Tree::new()
                .with("Dense_0", dense(4, 8))
                .with(
                    "BatchNorm_0",
                    Tree::new()
                        .with("scale", Tensor::zeros(&[8]))
                        .with("bias", Tensor::zeros(&[8])),
                )
                .with("Dense_1", dense(8, 3)),
        )
        .with(
            "batch_stats",
            Tree::new().with(
                "BatchNorm_0",
                Tree::new()
                    .with("mean", Tensor::zeros(&[8]))
                    .with("var", Tensor::zeros(&[8])),
            ),
        )
}

#[test]
fn msgpack_restore_survives_mutated_files() {
    let _turn = turn();
    for (i, name) in ["misc.msgpack", "chunked.msgpack", "bn_train_state.msgpack"]
        .into_iter()
        .enumerate()
    {
        let base = file(name);
        assert!(msgpack_restore(&base).is_ok());
        fuzz(name, &base, 3000, 11 + i as u64, |b| {
            msgpack_restore(b).is_ok()
        });
    }
}

#[test]
fn from_bytes_survives_mutated_files() {
    let _turn = turn();
    let base = file("bn_variables.msgpack");
    let t = target();
    assert!(from_bytes(&t, &base).is_ok());
    fuzz("from_bytes", &base, 3000, 23, |b| from_bytes(&t, b).is_ok());
}

#[test]
fn safetensors_loaders_survive_mutated_files() {
    let _turn = turn();
    let base = file("bn_variables.safetensors");
    let t = target();
    assert!(from_safetensors(&t, &base).is_ok());
    fuzz("read_safetensors", &base, 3000, 37, |b| {
        read_safetensors(b).is_ok()
    });
    fuzz("from_safetensors", &base, 3000, 41, |b| {
        from_safetensors(&t, b).is_ok()
    });
}

#[test]
fn hand_made_hostile_headers() {
    let _turn = turn();
    // A bin32 claiming 4 GiB, a map32 of 2^32 - 1 entries, an ext32 of
    // 4 GiB, nesting far beyond the limit, a reserved byte, trailing bytes.
    let cases: Vec<Vec<u8>> = vec![
        vec![0xc6, 0xff, 0xff, 0xff, 0xff, 0x00],
        vec![0xdf, 0xff, 0xff, 0xff, 0xff],
        vec![0xc9, 0xff, 0xff, 0xff, 0xff, 0x01],
        vec![0x91; 100_000],
        vec![0xc1],
        vec![0xc0, 0xc0],
        // An ndarray claiming shape [2^62, 4] over 4 bytes of data.
        {
            let mut inner = vec![0x93, 0x92, 0xcf];
            inner.extend_from_slice(&(1u64 << 62).to_be_bytes());
            inner.push(0x04);
            inner.extend_from_slice(&[0xa7]);
            inner.extend_from_slice(b"float32");
            inner.extend_from_slice(&[0xc4, 0x04, 0, 0, 0, 0]);
            let mut v = vec![0xc7, inner.len() as u8, 0x01];
            v.extend_from_slice(&inner);
            v
        },
        // safetensors: a header length of 2^64 - 1.
        vec![0xff; 16],
    ];
    for c in &cases {
        LARGEST.store(0, Ordering::Relaxed);
        assert!(msgpack_restore(c).is_err());
        assert!(read_safetensors(c).is_err());
        assert!(LARGEST.load(Ordering::Relaxed) < (1 << 20));
    }
}
