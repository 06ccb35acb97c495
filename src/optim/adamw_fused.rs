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

/// [`chunk`] for the step's flags.
#[inline(always)]
fn dispatch(k: &Consts, flags: (bool, bool, bool), ins: [&[f32]; 4], outs: [&mut [f32]; 3]) {
    match flags {
        (true, false, true) => chunk::<true, false, true>(k, ins, outs),
        (true, false, false) => chunk::<true, false, false>(k, ins, outs),
        (true, true, true) => chunk::<true, true, true>(k, ins, outs),
        (true, true, false) => chunk::<true, true, false>(k, ins, outs),
        (false, false, true) => chunk::<false, false, true>(k, ins, outs),
        (false, false, false) => chunk::<false, false, false>(k, ins, outs),
        (false, true, true) => chunk::<false, true, true>(k, ins, outs),
        (false, true, false) => chunk::<false, true, false>(k, ins, outs),
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
unsafe fn dispatch_fma(
    k: &Consts,
    flags: (bool, bool, bool),
    ins: [&[f32]; 4],
    outs: [&mut [f32]; 3],
) {
    dispatch(k, flags, ins, outs)
}

fn run(k: &Consts, flags: (bool, bool, bool), ins: [&[f32]; 4], outs: [&mut [f32]; 3]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("fma") && std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: both features were detected just above; they are the only
        // requirement of `dispatch_fma`, whose body is safe code.
        unsafe { dispatch_fma(k, flags, ins, outs) };
        return;
    }
    dispatch(k, flags, ins, outs)
}

/// A tensor's values in row-major order, borrowed when contiguous.
fn values(t: &Tensor) -> Cow<'_, [f32]> {
    match t.view().to_slice() {
        Some(s) => Cow::Borrowed(s),
        None => Cow::Owned(t.view().iter().copied().collect()),
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
    let flags = (
        grads.leaves().len() > 1,
        k.eps_root != 0.0,
        weight_decay != 0.0,
    );
    let (mut new_m, mut new_v, mut new_p) = (Vec::new(), Vec::new(), Vec::new());
    for (((g, p), m), v) in grads
        .leaves()
        .iter()
        .zip(ps.leaves())
        .zip(mu.leaves())
        .zip(nu.leaves())
    {
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
        let (gs, ps, ms, vs) = (values(g), values(p), values(m), values(v));
        let n = gs.len();
        let (mut mo, mut vo, mut po) = (vec![0.0f32; n], vec![0.0f32; n], vec![0.0f32; n]);
        if n >= PARALLEL_LEN {
            use rayon::prelude::*;
            let c = PARALLEL_LEN / 4;
            mo.par_chunks_mut(c)
                .zip(vo.par_chunks_mut(c))
                .zip(po.par_chunks_mut(c))
                .enumerate()
                .for_each(|(i, ((mo, vo), po))| {
                    let r = i * c..i * c + mo.len();
                    let ins = [&gs[r.clone()], &ps[r.clone()], &ms[r.clone()], &vs[r]];
                    run(&k, flags, ins, [mo, vo, po]);
                });
        } else {
            run(&k, flags, [&gs, &ps, &ms, &vs], [&mut mo, &mut vo, &mut po]);
        }
        let t = |v: Vec<f32>| Tensor::from_vec(v, shape).expect("the leaf's shape");
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
}
