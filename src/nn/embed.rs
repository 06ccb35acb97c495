//! `Embed` (`flax.linen.Embed`).

use ndarray::ArrayD;

use crate::core::{Result, Scope};
use crate::init::{self, Distribution, FanAxes, FanMode, Initializer};
use crate::tensor::Tensor;

use super::module::{Child, Module};

/// An embedding table (Flax's `nn.Embed`): `embedding` of shape
/// `(num_embeddings, features)`; calling it with integer ids returns their
/// rows (`jnp.take(embedding, ids, axis=0)`: an id outside
/// `[-num_embeddings, num_embeddings)` gives a row of NaN, negative ids
/// count from the end). [`Child::attend`] computes `query @ embeddingᵀ`,
/// the tied output layer of a language model.
///
/// ```
/// use flaxen::core::{Result, Scope};
/// use flaxen::nn::{Embed, Module};
/// use flaxen::{random, tensor::Tensor};
/// use ndarray::{arr2, ArrayD};
///
/// // Embed tokens, then score every token against the vocabulary.
/// struct Tied;
/// impl Module for Tied {
///     type Input = ArrayD<i32>;
///     type Output = Tensor;
///     fn call(&self, s: &Scope<'_>, ids: ArrayD<i32>) -> Result<Tensor> {
///         let embed = s.child(Embed::new(10, 4))?;
///         let h = embed.call(ids)?;
///         embed.attend(h)
///     }
/// }
/// let ids = arr2(&[[1, 2, 3]]).into_dyn();
/// let v = Tied.init(random::key(0), ids.clone())?;
/// assert_eq!(v.tensor("params/Embed_0/embedding").unwrap().shape(), &[10, 4]);
/// assert_eq!(Tied.apply(&v, ids, ())?.shape(), &[1, 3, 10]);
/// # Ok::<(), flaxen::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Embed {
    /// Number of rows (ids `0..num_embeddings`).
    pub num_embeddings: usize,
    /// Width of each row.
    pub features: usize,
    /// Table initializer (default `variance_scaling(1, fan_in, normal,
    /// out_axis=0)`, Flax's `default_embed_init`).
    pub embedding_init: Initializer,
}

impl Embed {
    /// An embedding of `num_embeddings` rows of `features` values.
    pub fn new(num_embeddings: usize, features: usize) -> Embed {
        Embed {
            num_embeddings,
            features,
            embedding_init: init::variance_scaling_with_axes(
                1.0,
                FanMode::FanIn,
                Distribution::Normal,
                FanAxes {
                    in_axis: vec![-2],
                    out_axis: vec![0],
                    batch_axis: vec![],
                },
            ),
        }
    }

    /// Sets the table initializer.
    pub fn embedding_init(mut self, init: Initializer) -> Embed {
        self.embedding_init = init;
        self
    }

    /// The `embedding` parameter of the module's scope.
    fn table(&self, s: &Scope<'_>) -> Result<Tensor> {
        s.param(
            "embedding",
            &self.embedding_init,
            &[self.num_embeddings, self.features],
        )
    }
}

impl Module for Embed {
    type Input = ArrayD<i32>;
    type Output = Tensor;

    fn tabulate_input(&self, ids: &ArrayD<i32>) -> String {
        let dims: Vec<String> = ids.shape().iter().map(|d| d.to_string()).collect();
        format!("int32[{}]", dims.join(","))
    }

    fn tabulate_output(&self, y: &Tensor) -> String {
        super::Shapes::shapes(y)
    }

    fn call(&self, s: &Scope<'_>, ids: ArrayD<i32>) -> Result<Tensor> {
        let table = self.table(s)?;
        if self.num_embeddings == 1 {
            // Flax broadcasts the single row to every id.
            let mut shape = ids.shape().to_vec();
            shape.push(self.features);
            return Ok(table
                .reshape(&[self.features as isize])?
                .broadcast_to(&shape)?);
        }
        Ok(table.take(&ids, 0)?)
    }
}

impl Child<'_, '_, Embed> {
    /// `embed.attend(query)`: `query @ embeddingᵀ` over the last axis of
    /// `query` (`jnp.dot(query, embedding.T)`), in the embedding's scope.
    pub fn attend(&self, query: Tensor) -> Result<Tensor> {
        let scope = self.parent.push(&self.name);
        let table = self.module.table(&scope)?;
        Ok(query.matmul(&table.transpose())?)
    }
}
