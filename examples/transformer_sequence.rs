//! A one-block transformer (embedding, causal multi-head self-attention,
//! LayerNorm, an MLP, a tied output layer) learning a sequence rule from
//! generated data: each token is the sum of the two before it, modulo 10
//! (a Fibonacci sequence mod 10 from random starts). The first two tokens
//! of a sequence are unpredictable; from the third on the rule is learnable
//! from the causal context, and the model learns it.
//!
//! Run: `cargo run --release --example transformer_sequence`

use flaxen::core::{Result, Scope, Variables};
use flaxen::nn::{
    make_causal_mask, tabulate, AttentionInputs, Dense, Embed, LayerNorm, Module,
    MultiHeadDotProductAttention,
};
use flaxen::optim::{adam, losses, GradientTransformation};
use flaxen::random::{self, Key};
use flaxen::tensor::{value_and_grad, Tensor};
use ndarray::{s, Array2, ArrayD};

const VOCAB: usize = 10;
const LEN: usize = 12;
const BATCH: usize = 64;
const STEPS: usize = 300;

/// Embed → (LayerNorm → causal attention → residual) → (LayerNorm → MLP →
/// residual) → LayerNorm → tied logits (`embed.attend`).
struct Block;

impl Module for Block {
    type Input = ArrayD<i32>;
    type Output = Tensor;
    fn call(&self, s: &Scope<'_>, ids: ArrayD<i32>) -> Result<Tensor> {
        let (batch, len) = (ids.shape()[0], ids.shape()[1]);
        let embed = s.child(Embed::new(VOCAB, 32))?;
        let pos = s.param("pos", flaxen::init::normal(0.02), &[len, 32])?;
        let x = embed.call(ids)?.add(&pos)?;
        let h = s.call(LayerNorm::new(), x.clone())?;
        let mask = make_causal_mask(&[batch, len])?;
        let h = s.call(
            MultiHeadDotProductAttention::new(4),
            AttentionInputs::new(h).mask(mask),
        )?;
        let x = x.add(&h)?;
        let h = s.call(LayerNorm::new(), x.clone())?;
        let h = s.call(Dense::new(64), h)?.gelu();
        let x = x.add(&s.call(Dense::new(32), h)?)?;
        let x = s.call(LayerNorm::new(), x)?;
        embed.attend(x)
    }
}

/// `batch` sequences of the rule from random starts, as `[batch, LEN]`.
fn sequences(key: Key, batch: usize) -> flaxen::Result<Array2<i32>> {
    let starts = random::randint(key, &[batch, 2], 0, VOCAB as i32)?;
    let mut out = Array2::zeros((batch, LEN));
    for b in 0..batch {
        out[[b, 0]] = starts[[b, 0]];
        out[[b, 1]] = starts[[b, 1]];
        for t in 2..LEN {
            out[[b, t]] = (out[[b, t - 1]] + out[[b, t - 2]]) % VOCAB as i32;
        }
    }
    Ok(out)
}

/// Inputs (tokens 0..LEN-1) and targets (tokens 1..LEN).
fn split(seq: &Array2<i32>) -> (ArrayD<i32>, ArrayD<i32>) {
    (
        seq.slice(s![.., ..LEN - 1]).to_owned().into_dyn(),
        seq.slice(s![.., 1..]).to_owned().into_dyn(),
    )
}

fn main() -> flaxen::Result<()> {
    let [init_key, data_key, test_key] = random::split_n(random::key(0));
    let (x0, _) = split(&sequences(random::clone(&data_key), 2)?);
    println!(
        "{}",
        tabulate(&Block, random::clone(&init_key), x0.clone())?
    );
    let mut params = Block.init(init_key, x0)?.params();
    let tx = adam(3e-3);
    let mut opt_state = tx.init(&params)?;
    for step in 0..STEPS {
        let (x, y) = split(&sequences(
            random::fold_in(random::clone(&data_key), step as u32),
            BATCH,
        )?);
        let (loss, grads) = value_and_grad(
            |p| {
                let v = Variables::new().with("params", p.clone());
                let logits = Block.apply(&v, x.clone(), ())?;
                Ok(losses::softmax_cross_entropy_with_integer_labels(&logits, &y)?.mean_all())
            },
            &params,
        )?;
        (params, opt_state) = tx.apply_gradients(&grads, &opt_state, &params)?;
        if step % 50 == 0 || step == STEPS - 1 {
            println!("step {step:3}: loss {:.4}", loss.item()?);
        }
    }
    // Accuracy on fresh sequences, from the third target on (the first
    // target, token 1, depends on nothing the model has seen).
    let (x, y) = split(&sequences(test_key, 256)?);
    let v = Variables::new().with("params", params);
    let predicted = Block.apply(&v, x, ())?.argmax(-1)?;
    let (mut right, mut total) = (0, 0);
    for ((idx, p), t) in predicted.indexed_iter().zip(y.iter()) {
        if idx[1] >= 1 {
            right += usize::from(p == t);
            total += 1;
        }
    }
    let acc = right as f64 / total as f64;
    println!("next-token accuracy where the rule applies: {acc:.4}");
    assert!(acc > 0.5, "accuracy {acc}");
    Ok(())
}
