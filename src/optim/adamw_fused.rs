//! AdamW's whole step in one pass per leaf, as XLA fuses the jitted
//! `tx.update` + `apply_updates`: the moments, the bias-corrected update,
//! the weight decay and `p + lr * u`, each element read once and its three
//! results (new moment, new second moment, new parameter) written once.
//! The arithmetic is that of [`ScaleByAdam`], [`AddDecayedWeights`] and the
//! fused learning-rate step run one after the other, element by element, so
//! the bits are the same; only the passes over memory (five, each with its
//! own buffers) become one.

use std::borrow::Cow;

use super::adam::ScaleByAdam;
use super::transform::{count_leaf, moments, read_count, safe_increment, state_error};
use crate::error::Result;
use crate::tensor::{Tensor, Tree};

/// Leaves with at least this many elements are updated on all cores.
const PARALLEL_LEN: usize = 1 << 16;

/// The step's scalars.
#[derive(Clone, Copy)]
struct Consts {
    b1: f32,
    b2: f32,
    d1: f32,
    d2: f32,
    c1: f32,
    c2: f32,
    r1: f32,
    r2: f32,
    eps: f32,
    eps_root: f32,
    wd: f32,
    step: f32,
}

/// One element: returns (new mu, new nu, new parameter). `SHARED`: several
/// leaves (XLA's arrangement of the bias corrections differs, see
/// `ScaleByAdam::update`); `ROOT`: `eps_root` is not zero; `DECAY`: the
/// weight decay is not zero.
#[inline(always)]
fn element<const SHARED: bool, const ROOT: bool, const DECAY: bool>(
    k: &Consts,
    g: f32,
    p: f32,
    m: f32,
    v: f32,
) -> (f32, f32, f32) {
    let m = g.mul_add(k.d1, m * k.b1);
    let v = (g * g).mul_add(k.d2, v * k.b2);
    let v_hat = if SHARED { v / k.c2 } else { v * k.r2 };
    let root = if ROOT {
        (v_hat + k.eps_root).sqrt()
    } else {
        v_hat.sqrt()
    };
    let u = if SHARED {
        m / (k.c1 * (root + k.eps))
    } else {
        m * k.r1 / (root + k.eps)
    };
    let u = if DECAY { p.mul_add(k.wd, u) } else { u };
    (m, v, k.step.mul_add(u, p))
}

/// One chunk of a leaf.
#[inline(always)]
fn chunk<const SHARED: bool, const ROOT: bool, const DECAY: bool>(
    k: &Consts,
    [g, p, m, v]: [&[f32]; 4],
    [mo, vo, po]: [&mut [f32]; 3],
) {
    let ins = g.iter().zip(p).zip(m).zip(v);
    let outs = mo.iter_mut().zip(vo.iter_mut()).zip(po.iter_mut());
    for ((((&g, &p), &m), &v), ((mo, vo), po)) in ins.zip(outs) {
        (*mo, *vo, *po) = element::<SHARED, ROOT, DECAY>(k, g, p, m, v);
    }
}

/// One chunk updated in place: `p`, `m` and `v` hold the old values and
/// receive the new ones (each element is read before it is written).
#[inline(always)]
fn chunk_in_place<const SHARED: bool, const ROOT: bool, const DECAY: bool>(
    k: &Consts,
    g: &[f32],
    [p, m, v]: [&mut [f32]; 3],
) {
    let olds = p.iter_mut().zip(m.iter_mut()).zip(v.iter_mut());
    for (&g, ((p, m), v)) in g.iter().zip(olds) {
        (*m, *v, *p) = element::<SHARED, ROOT, DECAY>(k, g, *p, *m, *v);
    }
}

/// What one chunk computes: into fresh outputs (`[g, p, m, v]` in,
/// `[m, v, p]` out), or over the old values.
enum Work<'a> {
    Fresh([&'a [f32]; 4], [&'a mut [f32]; 3]),
    InPlace(&'a [f32], [&'a mut [f32]; 3]),
}

/// Calls `$f::<SHARED, ROOT, DECAY>($args)` for the step's flags.
macro_rules! by_flags {
    ($flags:expr, $f:ident($($arg:expr),*)) => {
        match $flags {
            (true, false, true) => $f::<true, false, true>($($arg),*),
            (true, false, false) => $f::<true, false, false>($($arg),*),
            (true, true, true) => $f::<true, true, true>($($arg),*),
            (true, true, false) => $f::<true, true, false>($($arg),*),
            (false, false, true) => $f::<false, false, true>($($arg),*),
            (false, false, false) => $f::<false, false, false>($($arg),*),
            (false, true, true) => $f::<false, true, true>($($arg),*),
            (false, true, false) => $f::<false, true, false>($($arg),*),
        }
    };
}

/// A chunk's work for the step's flags.
#[inline(always)]
fn dispatch(k: &Consts, flags: (bool, bool, bool), work: Work<'_>) {
    match work {
        Work::Fresh(ins, outs) => by_flags!(flags, chunk(k, ins, outs)),
        Work::InPlace(g, olds) => by_flags!(flags, chunk_in_place(k, g, olds)),
    }
}

/// [`dispatch`] compiled for FMA (`mul_add` is one instruction instead of
/// a call; it rounds once either way, so the bits do not depend on it).
///
/// # Safety
///
/// The CPU must support FMA and AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "fma,avx2")]
unsafe fn dispatch_fma(k: &Consts, flags: (bool, bool, bool), work: Work<'_>) {
    dispatch(k, flags, work)
}

fn run(k: &Consts, flags: (bool, bool, bool), work: Work<'_>) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("fma") && std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: both features were detected just above; they are the only
        // requirement of `dispatch_fma`, whose body is safe code.
        unsafe { dispatch_fma(k, flags, work) };
        return;
    }
    dispatch(k, flags, work)
}

/// A tensor's values in row-major order, borrowed when contiguous.
fn values(t: &Tensor) -> Cow<'_, [f32]> {
    match t.view().to_slice() {
        Some(s) => Cow::Borrowed(s),
        None => Cow::Owned(t.view().iter().copied().collect()),
    }
}

/// The step's scalars and flags for Adam's `count` after this step.
fn constants(
    adam: &ScaleByAdam,
    weight_decay: f64,
    step: f32,
    count: i32,
    leaves: usize,
) -> (Consts, (bool, bool, bool)) {
    let (b1, b2) = (adam.b1 as f32, adam.b2 as f32);
    let c1 = 1.0 - b1.powf(count as f32);
    let c2 = 1.0 - b2.powf(count as f32);
    let k = Consts {
        b1,
        b2,
        d1: (1.0 - adam.b1) as f32,
        d2: (1.0 - adam.b2) as f32,
        c1,
        c2,
        r1: 1.0 / c1,
        r2: 1.0 / c2,
        eps: adam.eps as f32,
        eps_root: adam.eps_root as f32,
        wd: weight_decay as f32,
        step,
    };
    let flags = (leaves > 1, k.eps_root != 0.0, weight_decay != 0.0);
    (k, flags)
}

/// A typed error unless a gradient, its parameter and its moments have
/// one shape.
fn same_shapes(g: &Tensor, p: &Tensor, m: &Tensor, v: &Tensor) -> Result<()> {
    let shape = g.shape();
    if [p, m, v].iter().any(|t| t.shape() != shape) {
        return Err(state_error(format!(
            "a gradient of shape {shape:?} meets a parameter of shape {:?} and moments of \
             shapes {:?} and {:?}",
            p.shape(),
            m.shape(),
            v.shape()
        )));
    }
    Ok(())
}

/// Runs `work(range, slices)` over a leaf whose three slices `outs` have
/// one length: on all cores in chunks when it is large (each element's
/// arithmetic is the same either way), each call with its range of the
/// leaf and those elements of the three slices.
fn over_leaf(
    [a, b, c]: [&mut [f32]; 3],
    work: impl Fn(std::ops::Range<usize>, [&mut [f32]; 3]) + Sync,
) {
    let n = a.len();
    if n >= PARALLEL_LEN {
        // Shared between the calling thread and the pool (see `share_out`).
        let size = PARALLEL_LEN / 4;
        let chunks = a
            .chunks_mut(size)
            .zip(b.chunks_mut(size))
            .zip(c.chunks_mut(size));
        crate::pool::share_out(chunks.enumerate(), |(i, ((a, b), c))| {
            work(i * size..i * size + a.len(), [a, b, c])
        });
    } else {
        work(0..n, [a, b, c]);
    }
}

/// `chain(scale_by_adam, add_decayed_weights(wd))` then `p + step * u`:
/// the new parameters and Adam's new state (`count`, `mu`, `nu`).
pub(crate) fn apply(
    adam: &ScaleByAdam,
    weight_decay: f64,
    step: f32,
    grads: &Tree,
    state: &Tree,
    params: &Tree,
) -> Result<(Tree, Tree)> {
    let mu = moments(state, "mu", grads)?;
    let nu = moments(state, "nu", grads)?;
    let ps = moments(&Tree::new().with("p", params.clone()), "p", grads)?;
    let count = safe_increment(read_count(state, "count")?);
    let (k, flags) = constants(adam, weight_decay, step, count, grads.leaves().len());
    let (mut new_m, mut new_v, mut new_p) = (Vec::new(), Vec::new(), Vec::new());
    for (((g, p), m), v) in grads
        .leaves()
        .iter()
        .zip(ps.leaves())
        .zip(mu.leaves())
        .zip(nu.leaves())
    {
        same_shapes(g, p, m, v)?;
        let (gs, ps, ms, vs) = (values(g), values(p), values(m), values(v));
        let n = gs.len();
        let (mut mo, mut vo, mut po) = (vec![0.0f32; n], vec![0.0f32; n], vec![0.0f32; n]);
        over_leaf([&mut mo, &mut vo, &mut po], |r, outs| {
            let ins = [&gs[r.clone()], &ps[r.clone()], &ms[r.clone()], &vs[r]];
            run(&k, flags, Work::Fresh(ins, outs));
        });
        let t = |v: Vec<f32>| Tensor::from_vec(v, g.shape()).expect("the leaf's shape");
        new_m.push(t(mo));
        new_v.push(t(vo));
        new_p.push(t(po));
    }
    let adam_state = Tree::new()
        .with("count", count_leaf(count))
        .with("mu", mu.with_leaves(new_m)?)
        .with("nu", nu.with_leaves(new_v)?);
    Ok((params.with_leaves(new_p)?, adam_state))
}

/// [`apply`] over a state and parameters the caller gives up: each leaf's
/// new parameter and moments are written over the old ones where nothing
/// else holds them (copied first where something does: `ArcArray`'s
/// copy-on-write), the same arithmetic, so the same bits.
pub(crate) fn apply_owned(
    adam: &ScaleByAdam,
    weight_decay: f64,
    step: f32,
    grads: &Tree,
    state: Tree,
    mut params: Tree,
) -> Result<(Tree, Tree)> {
    let mut mu = moments(&state, "mu", grads)?;
    let mut nu = moments(&state, "nu", grads)?;
    if !params.same_structure(grads) {
        // The same error as `apply`'s.
        moments(&Tree::new().with("p", params.clone()), "p", grads)?;
    }
    let count = safe_increment(read_count(&state, "count")?);
    // Gone, so that `mu` and `nu` hold the moments' only references.
    drop(state);
    let (k, flags) = constants(adam, weight_decay, step, count, grads.leaves().len());
    let (ps, ms, vs) = (params.leaves_mut(), mu.leaves_mut(), nu.leaves_mut());
    for (i, g) in grads.leaves().iter().enumerate() {
        same_shapes(g, &ps[i], &ms[i], &vs[i])?;
        let gs = values(g);
        // A traced tensor keeps its values for its tape: replace it.
        for t in [&mut ps[i], &mut ms[i], &mut vs[i]] {
            if t.tracer.is_some() {
                *t = t.detached();
            }
        }
        let [p, m, v] = [&mut ps[i], &mut ms[i], &mut vs[i]].map(|t| {
            if t.data.as_slice_mut().is_none() {
                // Not row-major: a row-major copy.
                *t = Tensor::from_vec(t.to_vec(), t.shape()).expect("its own shape");
            }
            t.data.as_slice_mut().expect("row-major, owned")
        });
        over_leaf([p, m, v], |r, olds| {
            run(&k, flags, Work::InPlace(&gs[r], olds))
        });
    }
    let adam_state = Tree::new()
        .with("count", count_leaf(count))
        .with("mu", mu)
        .with("nu", nu);
    Ok((params, adam_state))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::optim::{AddDecayedWeights, GradientTransformation, ScaleByAdam};

    fn leaf(n: usize, seed: u32) -> Tensor {
        let v = (0..n)
            .map(|i| (((i as u32).wrapping_mul(2654435761) ^ seed) % 1000) as f32 / 250.0 - 2.0)
            .collect();
        Tensor::from_vec(v, &[n]).unwrap()
    }

    /// The fused pass equals the three transformations run one after the
    /// other and `p + step * u` as one fused multiply-add, bit for bit, for
    /// one leaf and several, with and without decay and `eps_root`, below
    /// and above the parallel size.
    #[test]
    fn equals_the_transformations_one_after_the_other() {
        for leaves in [1, 3] {
            for (wd, eps_root) in [(1e-4, 0.0), (0.0, 0.0), (1e-2, 1e-8)] {
                let mut params = Tree::new();
                let mut grads = Tree::new();
                for i in 0..leaves {
                    let n = if i == 1 { PARALLEL_LEN + 5 } else { 37 };
                    params.insert(format!("w{i}"), leaf(n, i as u32)).unwrap();
                    grads
                        .insert(format!("w{i}"), leaf(n, 99 + i as u32))
                        .unwrap();
                }
                let adam = ScaleByAdam {
                    eps_root,
                    ..ScaleByAdam::default()
                };
                let decay = AddDecayedWeights { weight_decay: wd };
                let step = -3e-3f32;
                let mut state = adam.init(&params).unwrap();
                let mut p_ref = params.clone();
                let mut p_fused = params.clone();
                let mut s_fused = state.clone();
                for _ in 0..3 {
                    let (u, s) = adam.update(&grads, &state, Some(&p_ref)).unwrap();
                    let (u, _) = decay.update(&u, &Tree::new(), Some(&p_ref)).unwrap();
                    let next: Vec<Tensor> = p_ref
                        .leaves()
                        .iter()
                        .zip(u.leaves())
                        .map(|(p, u)| {
                            let v = p
                                .to_vec()
                                .iter()
                                .zip(u.to_vec())
                                .map(|(&p, u)| step.mul_add(u, p))
                                .collect();
                            Tensor::from_vec(v, p.shape()).unwrap()
                        })
                        .collect();
                    p_ref = p_ref.with_leaves(next).unwrap();
                    state = s;
                    let (p, s) = apply(&adam, wd, step, &grads, &s_fused, &p_fused).unwrap();
                    p_fused = p;
                    s_fused = s;
                    let bits = |t: &Tree| -> Vec<u32> {
                        t.leaves()
                            .iter()
                            .flat_map(|l| l.to_vec())
                            .map(f32::to_bits)
                            .collect()
                    };
                    assert_eq!(bits(&p_fused), bits(&p_ref), "{leaves} leaves, wd {wd}");
                    for k in ["mu", "nu"] {
                        assert_eq!(
                            bits(&s_fused.subtree(k).unwrap()),
                            bits(&state.subtree(k).unwrap())
                        );
                    }
                }
            }
        }
    }

    /// The owned pass gives `apply`'s bits, writes over the arrays it was
    /// given when nothing else holds them, and leaves arrays that another
    /// holder keeps unchanged (a copy is written instead).
    #[test]
    fn owned_equals_borrowed_and_updates_in_place() {
        let adam = ScaleByAdam::default();
        let (wd, step) = (1e-4, -3e-3f32);
        let mut params = Tree::new();
        let mut grads = Tree::new();
        for (i, n) in [37, PARALLEL_LEN + 5].into_iter().enumerate() {
            params.insert(format!("w{i}"), leaf(n, i as u32)).unwrap();
            grads
                .insert(format!("w{i}"), leaf(n, 7 + i as u32))
                .unwrap();
        }
        let bits = |t: &Tree| -> Vec<u32> {
            t.leaves()
                .iter()
                .flat_map(|l| l.to_vec())
                .map(f32::to_bits)
                .collect()
        };
        let state = adam.init(&params).unwrap();
        let (mut p_ref, mut s_ref) = (params.clone(), state.clone());
        // Deep copies: nothing else holds the owned path's arrays.
        let copy = |t: &Tree| {
            t.with_leaves(
                t.leaves()
                    .iter()
                    .map(|l| Tensor::from_vec(l.to_vec(), l.shape()).unwrap())
                    .collect(),
            )
            .unwrap()
        };
        let (mut p_own, mut s_own) = (copy(&params), copy(&state));
        for _ in 0..3 {
            (p_ref, s_ref) = apply(&adam, wd, step, &grads, &s_ref, &p_ref).unwrap();
            let before = p_own.leaves()[1].data.as_ptr();
            (p_own, s_own) = apply_owned(&adam, wd, step, &grads, s_own, p_own).unwrap();
            assert_eq!(p_own.leaves()[1].data.as_ptr(), before, "written in place");
            assert_eq!(bits(&p_own), bits(&p_ref));
            for k in ["mu", "nu", "count"] {
                let (a, b) = (s_own.subtree(k).unwrap(), s_ref.subtree(k).unwrap());
                assert_eq!(bits(&a), bits(&b), "{k}");
                assert_eq!(a.arrays(), b.arrays(), "{k}");
            }
        }
        // A holder of the same arrays keeps its values.
        let held = p_own.clone();
        let held_bits = bits(&held);
        let (p_next, _) = apply_owned(&adam, wd, step, &grads, s_own, p_own).unwrap();
        assert_eq!(bits(&held), held_bits);
        assert_ne!(bits(&p_next), held_bits);
    }
}
