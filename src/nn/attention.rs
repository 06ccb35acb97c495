//! Attention (`flax.linen.attention`): `dot_product_attention` and its
//! weights, the masks, and `MultiHeadDotProductAttention`.

use ndarray::{ArrayD, IxDyn};

use crate::core::{Result, Scope};
use crate::init::{self, Initializer};
use crate::random::{self, Key};
use crate::tensor::Tensor;

use super::dense_general::DenseGeneral;
use super::module::{config_error, Module};

/// Dropout of attention weights: the key, the rate, and whether the mask
/// is shared across the batch and head axes (Flax's `broadcast_dropout`).
#[derive(Clone, Debug)]
pub struct AttentionDropout {
    /// The key of the mask.
    pub rng: Key,
    /// The probability of dropping a weight.
    pub rate: f64,
    /// One mask for every batch element and head (default in Flax).
    pub broadcast: bool,
}

fn bad(message: String) -> crate::Error {
    crate::tensor::TensorError::Argument {
        op: "dot_product_attention",
        message,
    }
    .into()
}

/// `q / sqrt(depth)` followed by `einsum('...qhd,...khd->...hqk')`.
fn scores(query: &Tensor, key: &Tensor) -> Result<Tensor> {
    let nd = query.ndim();
    if nd < 3 || key.ndim() != nd {
        return Err(bad(format!(
            "query {:?} and key {:?} must be [batch…, length, heads, depth] of the same rank",
            query.shape(),
            key.shape()
        )));
    }
    let (qs, ks) = (query.shape(), key.shape());
    if qs[..nd - 3] != ks[..nd - 3] || qs[nd - 2] != ks[nd - 2] || qs[nd - 1] != ks[nd - 1] {
        return Err(bad(format!(
            "query {qs:?} and key {ks:?} must agree on batch, heads and depth"
        )));
    }
    let depth = qs[nd - 1] as f32;
    let q = query.div(&Tensor::scalar(depth.sqrt()))?;
    // One `dot_general`, as `jnp.einsum` makes it: batch axes `...` and
    // the heads, contracting the depth; `[..., h, q, k]` as it comes out.
    let mut batch: Vec<usize> = (0..nd - 3).collect();
    batch.push(nd - 2);
    Ok(q.dot_general(key, (&[nd - 1], &[nd - 1]), (&batch, &batch))?)
}

/// `nn.dot_product_attention_weights(query, key, bias, mask, ...)`:
/// `softmax(q kᵀ / sqrt(depth) + bias)` over the keys, `[batch…, heads,
/// q_length, kv_length]`, with masked-out positions set to the smallest
/// `f32` before the softmax and the weights dropped out if asked.
pub fn dot_product_attention_weights(
    query: &Tensor,
    key: &Tensor,
    bias: Option<&Tensor>,
    mask: Option<&ArrayD<bool>>,
    dropout: Option<&AttentionDropout>,
) -> Result<Tensor> {
    let mut w = scores(query, key)?;
    if let Some(b) = bias {
        w = w.add(b)?;
    }
    if let Some(m) = mask {
        let Some(view) = m.broadcast(w.shape()) else {
            return Err(bad(format!(
                "mask of shape {:?} does not broadcast to the attention weights {:?}",
                m.shape(),
                w.shape()
            )));
        };
        let m = Tensor::from_array(view.mapv(|b| if b { 1.0f32 } else { 0.0 }));
        w = Tensor::select(&m, &w, &Tensor::scalar(f32::MIN))?;
    }
    let mut w = w.softmax(-1)?;
    if let Some(d) = dropout {
        if !(0.0..1.0).contains(&d.rate) {
            return Err(bad(format!("dropout rate {} must be in [0, 1)", d.rate)));
        }
        if d.rate > 0.0 {
            let keep_prob = (1.0 - d.rate) as f32;
            let shape: Vec<usize> = if d.broadcast {
                let n = w.ndim();
                let mut s = vec![1; n - 2];
                s.extend(&w.shape()[n - 2..]);
                s
            } else {
                w.shape().to_vec()
            };
            let keep = random::bernoulli(d.rng.clone(), keep_prob, &shape)?;
            // `keep.astype(dtype) / keep_prob`: a multiplier, then a product.
            let multiplier = keep.mapv(|k| if k { 1.0f32 } else { 0.0 } / keep_prob);
            w = w.mul(&Tensor::from_array(multiplier))?;
        }
    }
    Ok(w)
}

/// `nn.dot_product_attention(query, key, value, bias, mask, ...)`: the
/// attention weights applied to `value`
/// (`einsum('...hqk,...khd->...qhd')`), `[batch…, q_length, heads, depth]`.
///
/// ```
/// use flaxen::nn::dot_product_attention;
/// use flaxen::tensor::Tensor;
/// let q = Tensor::ones(&[1, 2, 1, 4]); // [batch, length, heads, depth]
/// let v = Tensor::from_vec((0..8).map(|i| i as f32).collect(), &[1, 2, 1, 4])?;
/// // Equal scores: each query averages the values.
/// let out = dot_product_attention(&q, &q, &v, None, None, None)?;
/// assert_eq!(out.to_vec()[..4], [2.0, 3.0, 4.0, 5.0]);
/// # Ok::<(), flaxen::Error>(())
/// ```
pub fn dot_product_attention(
    query: &Tensor,
    key: &Tensor,
    value: &Tensor,
    bias: Option<&Tensor>,
    mask: Option<&ArrayD<bool>>,
    dropout: Option<&AttentionDropout>,
) -> Result<Tensor> {
    let nd = value.ndim();
    if nd != key.ndim() || value.shape()[..nd - 1] != key.shape()[..nd - 1] {
        return Err(bad(format!(
            "value {:?} must match key {:?} but for depth",
            value.shape(),
            key.shape()
        )));
    }
    let w = dot_product_attention_weights(query, key, bias, mask, dropout)?;
    // `jnp.einsum` makes one `dot_general` of value and weights (in that
    // order): batch axes `...` and the heads, contracting the keys; out
    // `[..., h, d, q]`, then transposed to `[..., q, h, d]`.
    let mut vb: Vec<usize> = (0..nd - 3).collect();
    vb.push(nd - 2);
    let wb: Vec<usize> = (0..nd - 2).collect();
    let out = value.dot_general(&w, (&[nd - 3], &[nd - 1]), (&vb, &wb))?;
    let mut perm: Vec<usize> = (0..nd - 3).collect();
    perm.extend([nd - 1, nd - 3, nd - 2]);
    Ok(out.permute(&perm)?)
}

/// `nn.make_attention_mask(query_input, key_input)` for boolean inputs
/// (`[batch…, q_len]`, `[batch…, kv_len]`, e.g. `ids != 0`): `[batch…, 1,
/// q_len, kv_len]`, true where both positions are.
pub fn make_attention_mask(query: &ArrayD<bool>, key: &ArrayD<bool>) -> Result<ArrayD<bool>> {
    pairwise(query, key, |a, b| a && b)
}

fn pairwise(
    query: &ArrayD<bool>,
    key: &ArrayD<bool>,
    f: impl Fn(bool, bool) -> bool,
) -> Result<ArrayD<bool>> {
    let (qn, kn) = (query.ndim(), key.ndim());
    if qn == 0 || qn != kn || query.shape()[..qn - 1] != key.shape()[..kn - 1] {
        return Err(bad(format!(
            "mask inputs {:?} and {:?} must share their batch axes",
            query.shape(),
            key.shape()
        )));
    }
    let batch = &query.shape()[..qn - 1];
    let (lq, lk) = (query.shape()[qn - 1], key.shape()[kn - 1]);
    let mut shape = batch.to_vec();
    shape.extend([1, lq, lk]);
    let b: usize = batch.iter().product();
    let (qv, kv): (Vec<bool>, Vec<bool>) = (
        query.iter().copied().collect(),
        key.iter().copied().collect(),
    );
    let mut out = Vec::with_capacity(b * lq * lk);
    for i in 0..b {
        for q in 0..lq {
            for k in 0..lk {
                out.push(f(qv[i * lq + q], kv[i * lk + k]));
            }
        }
    }
    Ok(ArrayD::from_shape_vec(IxDyn(&shape), out).expect("shape counted"))
}

/// `nn.make_causal_mask(x)` for `x` of shape `[batch…, len]`: `[batch…,
/// 1, len, len]`, true where the key position is not after the query's.
pub fn make_causal_mask(shape: &[usize]) -> Result<ArrayD<bool>> {
    if shape.is_empty() {
        return Err(bad("make_causal_mask needs a [batch…, length] shape".into()));
    }
    let n = shape[shape.len() - 1];
    let mut out_shape = shape[..shape.len() - 1].to_vec();
    out_shape.extend([1, n, n]);
    let b: usize = shape[..shape.len() - 1].iter().product();
    let mut out = Vec::with_capacity(b * n * n);
    for _ in 0..b {
        for q in 0..n {
            for k in 0..n {
                out.push(q >= k);
            }
        }
    }
    Ok(ArrayD::from_shape_vec(IxDyn(&out_shape), out).expect("shape counted"))
}

/// `nn.combine_masks(*masks)`: the logical and of the masks given (`None`
/// entries skipped), which must have the same rank.
pub fn combine_masks(masks: &[Option<&ArrayD<bool>>]) -> Result<Option<ArrayD<bool>>> {
    let given: Vec<&ArrayD<bool>> = masks.iter().flatten().copied().collect();
    let Some((first, rest)) = given.split_first() else {
        return Ok(None);
    };
    let mut out = (*first).clone();
    for m in rest {
        if m.ndim() != out.ndim() {
            return Err(bad(format!(
                "masks of shapes {:?} and {:?} have different ranks",
                out.shape(),
                m.shape()
            )));
        }
        let shape: Vec<usize> = out
            .shape()
            .iter()
            .zip(m.shape())
            .map(|(&a, &b)| a.max(b))
            .collect();
        let (Some(a), Some(b)) = (out.broadcast(IxDyn(&shape)), m.broadcast(IxDyn(&shape))) else {
            return Err(bad(format!(
                "masks of shapes {:?} and {:?} do not broadcast",
                out.shape(),
                m.shape()
            )));
        };
        out = ndarray::Zip::from(&a).and(&b).map_collect(|&x, &y| x && y);
    }
    Ok(Some(out))
}

/// What [`MultiHeadDotProductAttention`] attends: queries, optional keys
/// and values (default: the queries, self-attention), and an optional
/// mask. A tensor alone is self-attention without a mask.
#[derive(Clone, Debug)]
pub struct AttentionInputs {
    /// `inputs_q`, `[batch…, q_len, features]`.
    pub q: Tensor,
    /// `inputs_k` (default `q`).
    pub k: Option<Tensor>,
    /// `inputs_v` (default `k`).
    pub v: Option<Tensor>,
    /// Broadcastable to `[batch…, heads, q_len, kv_len]`.
    pub mask: Option<ArrayD<bool>>,
}

impl AttentionInputs {
    /// Self-attention over `q`.
    pub fn new(q: Tensor) -> AttentionInputs {
        AttentionInputs {
            q,
            k: None,
            v: None,
            mask: None,
        }
    }

    /// Keys and values from `kv` (cross-attention).
    pub fn kv(mut self, kv: Tensor) -> AttentionInputs {
        self.k = Some(kv);
        self
    }

    /// Values other than the keys.
    pub fn v(mut self, v: Tensor) -> AttentionInputs {
        self.v = Some(v);
        self
    }

    /// The mask.
    pub fn mask(mut self, mask: ArrayD<bool>) -> AttentionInputs {
        self.mask = Some(mask);
        self
    }
}

impl From<Tensor> for AttentionInputs {
    fn from(q: Tensor) -> AttentionInputs {
        AttentionInputs::new(q)
    }
}

/// Multi-head attention (Flax's `nn.MultiHeadDotProductAttention`):
/// `DenseGeneral` projections `query`, `key`, `value` to `[…, heads,
/// head_dim]`, [`dot_product_attention`] (with dropout from the `dropout`
/// stream when `dropout_rate > 0` and not deterministic), and the `out`
/// projection back to `out_features`.
///
/// ```
/// use flaxen::nn::{make_causal_mask, AttentionInputs, Module, MultiHeadDotProductAttention};
/// use flaxen::{random, tensor::Tensor};
///
/// let mha = MultiHeadDotProductAttention::new(2);
/// let x = Tensor::ones(&[1, 3, 8]);
/// let inputs = AttentionInputs::new(x).mask(make_causal_mask(&[1, 3])?);
/// let v = mha.init(random::key(0), inputs.clone())?;
/// assert_eq!(v.tensor("params/query/kernel").unwrap().shape(), &[8, 2, 4]);
/// assert_eq!(mha.apply(&v, inputs, ())?.shape(), &[1, 3, 8]);
/// # Ok::<(), flaxen::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct MultiHeadDotProductAttention {
    /// Heads.
    pub num_heads: usize,
    /// Features of the projections (default: the query's).
    pub qkv_features: Option<usize>,
    /// Output features (default: the query's).
    pub out_features: Option<usize>,
    /// Attention dropout (default 0).
    pub dropout_rate: f64,
    /// Skip dropout (default false).
    pub deterministic: bool,
    /// One dropout mask for all batch elements and heads (default true).
    pub broadcast_dropout: bool,
    /// Biases in the projections (default true).
    pub use_bias: bool,
    /// Kernel initializer (default `lecun_normal`).
    pub kernel_init: Initializer,
    /// Bias initializer (default zeros).
    pub bias_init: Initializer,
}

impl MultiHeadDotProductAttention {
    /// `num_heads` heads, Flax's defaults otherwise.
    pub fn new(num_heads: usize) -> MultiHeadDotProductAttention {
        MultiHeadDotProductAttention {
            num_heads,
            qkv_features: None,
            out_features: None,
            dropout_rate: 0.0,
            deterministic: false,
            broadcast_dropout: true,
            use_bias: true,
            kernel_init: init::lecun_normal(),
            bias_init: init::zeros(),
        }
    }

    /// Sets the projections' features.
    pub fn qkv_features(mut self, n: usize) -> Self {
        self.qkv_features = Some(n);
        self
    }

    /// Sets the output features.
    pub fn out_features(mut self, n: usize) -> Self {
        self.out_features = Some(n);
        self
    }

    /// Sets the attention dropout rate.
    pub fn dropout_rate(mut self, rate: f64) -> Self {
        self.dropout_rate = rate;
        self
    }

    /// Sets `deterministic`.
    pub fn deterministic(mut self, on: bool) -> Self {
        self.deterministic = on;
        self
    }

    /// Sets `broadcast_dropout`.
    pub fn broadcast_dropout(mut self, on: bool) -> Self {
        self.broadcast_dropout = on;
        self
    }
}

impl Module for MultiHeadDotProductAttention {
    type Input = AttentionInputs;
    type Output = Tensor;

    fn tabulate_output(&self, y: &Tensor) -> String {
        super::Shapes::shapes(y)
    }

    fn call(&self, s: &Scope<'_>, inputs: AttentionInputs) -> Result<Tensor> {
        let q_in = inputs.q;
        if q_in.ndim() < 2 {
            return Err(config_error(
                s,
                format!(
                    "inputs_q of shape {:?} needs [batch…, length, features]",
                    q_in.shape()
                ),
            ));
        }
        let k_in = inputs.k.unwrap_or_else(|| q_in.clone());
        let v_in = inputs.v.unwrap_or_else(|| k_in.clone());
        let feat = q_in.shape()[q_in.ndim() - 1];
        let features = self.out_features.unwrap_or(feat);
        let qkv = self.qkv_features.unwrap_or(feat);
        if self.num_heads == 0 || !qkv.is_multiple_of(self.num_heads) {
            return Err(config_error(
                s,
                format!(
                    "memory dimension ({qkv}) must be divisible by the number of heads ({})",
                    self.num_heads
                ),
            ));
        }
        let head_dim = qkv / self.num_heads;
        let dense = || {
            DenseGeneral::new(&[self.num_heads, head_dim])
                .use_bias(self.use_bias)
                .kernel_init(self.kernel_init.clone())
                .bias_init(self.bias_init.clone())
        };
        let query = s.call_named("query", dense(), q_in)?;
        let key = s.call_named("key", dense(), k_in)?;
        let value = s.call_named("value", dense(), v_in)?;
        let dropout = if self.dropout_rate > 0.0 && !self.deterministic {
            Some(AttentionDropout {
                rng: s.make_rng("dropout")?,
                rate: self.dropout_rate,
                broadcast: self.broadcast_dropout,
            })
        } else {
            None
        };
        let x = dot_product_attention(
            &query,
            &key,
            &value,
            None,
            inputs.mask.as_ref(),
            dropout.as_ref(),
        )
        .map_err(|e| config_error(s, e.to_string()))?;
        let out = DenseGeneral::new(&[features])
            .axis(&[-2, -1])
            .use_bias(self.use_bias)
            .kernel_init(self.kernel_init.clone())
            .bias_init(self.bias_init.clone());
        s.call_named("out", out, x)
    }
}
