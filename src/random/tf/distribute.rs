//! `tf.distribute.MirroredStrategy` as far as random numbers go: replicas
//! that run a function in turn, and Generators that give each replica its
//! own stream.
//!
//! TensorFlow's rules (verified against TF 2.21, see the book):
//!
//! - A Generator created inside [`MirroredStrategy::scope`] or inside a
//!   `run` body is *distributed*: inside a replica context, each draw uses
//!   the key mixed with the replica id (the first uint64 of the Philox
//!   stream of the key at counter `[replica_id, 0]`) and the generator's
//!   counter, unchanged. The replicas of one `run` share the state: they
//!   all draw from the same counter, and the state moves on once, as for
//!   one draw outside.
//! - A Generator created outside the strategy is not mixed: the replicas
//!   take turns on its one state.
//! - Outside any replica context, no generator is mixed (so a distributed
//!   generator's state saved inside a strategy and loaded outside it draws
//!   the unmixed stream).

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

use super::error::TfRandomError;
use super::generator::GeneratorState;

/// Ids of distributed generators.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// What this thread is inside of.
#[derive(Default)]
struct Context {
    /// Nesting depth of `scope` calls.
    scopes: usize,
    /// The replica running, inside `run`.
    replica: Option<usize>,
    /// The state each distributed generator had when the run's first
    /// replica first drew from it.
    starts: HashMap<u64, GeneratorState>,
    /// (generator, replica) pairs that have drawn in this run.
    seen: HashSet<(u64, usize)>,
}

thread_local! {
    static CONTEXT: RefCell<Context> = RefCell::new(Context::default());
}

/// The id for a generator created now: a new one inside a strategy's scope
/// or a replica context, `None` elsewhere.
pub(crate) fn creation_id() -> Option<u64> {
    CONTEXT.with(|c| {
        let c = c.borrow();
        (c.scopes > 0 || c.replica.is_some()).then(|| NEXT_ID.fetch_add(1, Ordering::Relaxed))
    })
}

/// Called before a draw from distributed generator `id` with `state`:
/// inside a replica context, returns the replica, after giving a replica's
/// first draw in this run the state the run started from (replicas share
/// the counter); outside, `None`.
pub(crate) fn enter_draw(id: u64, state: &mut GeneratorState) -> Option<usize> {
    CONTEXT.with(|c| {
        let mut c = c.borrow_mut();
        let replica = c.replica?;
        if c.seen.insert((id, replica)) {
            match c.starts.get(&id) {
                Some(start) => *state = start.clone(),
                None => {
                    c.starts.insert(id, state.clone());
                }
            }
        }
        Some(replica)
    })
}

/// `tf.distribute.MirroredStrategy(devices=[...])`: one replica per device.
///
/// ```
/// use flaxen::random::tf::{Generator, MirroredStrategy};
///
/// let strat = MirroredStrategy::new(&["cpu:0", "cpu:1"])?;
/// let mut g = strat.scope(|| Generator::from_seed(1));
/// let out = strat.run(|| g.normal(&[]))?;
/// assert_eq!(out.values()[0][[]], -0.87930447);
/// assert_eq!(out.values()[1][[]], 0.020661574);
/// assert_eq!(g.state().words(), &[257, 0, 0]); // moved on once
/// # Ok::<(), flaxen::random::tf::TfRandomError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MirroredStrategy {
    devices: Vec<String>,
}

impl MirroredStrategy {
    /// A strategy over `devices` (`"cpu:0"`, ...): at least one, all
    /// different.
    pub fn new(devices: &[&str]) -> Result<MirroredStrategy, TfRandomError> {
        let list: Vec<String> = devices.iter().map(|d| d.to_string()).collect();
        let distinct: HashSet<&String> = list.iter().collect();
        if list.is_empty() || distinct.len() != list.len() {
            return Err(TfRandomError::StrategyDevices { devices: list });
        }
        Ok(MirroredStrategy { devices: list })
    }

    /// A strategy over the devices of a mesh, in its device order.
    pub fn from_mesh(mesh: &crate::sharding::Mesh) -> MirroredStrategy {
        MirroredStrategy {
            devices: mesh
                .device_list()
                .iter()
                .map(|d| format!("cpu:{}", d.id()))
                .collect(),
        }
    }

    /// The devices.
    pub fn devices(&self) -> &[String] {
        &self.devices
    }

    /// `num_replicas_in_sync`.
    pub fn num_replicas_in_sync(&self) -> usize {
        self.devices.len()
    }

    /// `with strategy.scope(): ...`: generators created inside `f` are
    /// distributed.
    pub fn scope<R>(&self, f: impl FnOnce() -> R) -> R {
        struct Leave;
        impl Drop for Leave {
            fn drop(&mut self) {
                CONTEXT.with(|c| c.borrow_mut().scopes -= 1);
            }
        }
        CONTEXT.with(|c| c.borrow_mut().scopes += 1);
        let _leave = Leave;
        f()
    }

    /// `strategy.run(f)`: runs `f` once per replica, in replica order, each
    /// in its replica context, and returns the replicas' values. The first
    /// error stops the run.
    pub fn run<T, E>(&self, mut f: impl FnMut() -> Result<T, E>) -> Result<PerReplica<T>, E> {
        struct Restore(
            Option<usize>,
            HashMap<u64, GeneratorState>,
            HashSet<(u64, usize)>,
        );
        impl Drop for Restore {
            fn drop(&mut self) {
                let (replica, starts, seen) = (
                    self.0,
                    std::mem::take(&mut self.1),
                    std::mem::take(&mut self.2),
                );
                CONTEXT.with(|c| {
                    let mut c = c.borrow_mut();
                    c.replica = replica;
                    c.starts = starts;
                    c.seen = seen;
                });
            }
        }
        // A run inside a run (a nested strategy) keeps the outer one's
        // bookkeeping aside.
        let outer = CONTEXT.with(|c| {
            let mut c = c.borrow_mut();
            Restore(
                c.replica,
                std::mem::take(&mut c.starts),
                std::mem::take(&mut c.seen),
            )
        });
        let mut values = Vec::with_capacity(self.devices.len());
        for r in 0..self.devices.len() {
            CONTEXT.with(|c| c.borrow_mut().replica = Some(r));
            values.push(f()?);
        }
        drop(outer);
        Ok(PerReplica(values))
    }
}

/// The values of the replicas of a `run`, printed as TensorFlow prints
/// them: `PerReplica:{ 0: ..., 1: ... }`.
#[derive(Clone, Debug, PartialEq)]
pub struct PerReplica<T>(Vec<T>);

impl<T> PerReplica<T> {
    /// The values, in replica order (`experimental_local_results`).
    pub fn values(&self) -> &[T] {
        &self.0
    }

    /// Replica `replica`'s value.
    pub fn get(&self, replica: usize) -> Result<&T, TfRandomError> {
        self.0.get(replica).ok_or(TfRandomError::ReplicaOutOfRange {
            replica,
            replicas: self.0.len(),
        })
    }

    /// Each value transformed, e.g. into its printed form.
    pub fn map<U>(&self, f: impl FnMut(&T) -> U) -> PerReplica<U> {
        PerReplica(self.0.iter().map(f).collect())
    }
}

impl<T: fmt::Display> fmt::Display for PerReplica<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let items: Vec<String> = self
            .0
            .iter()
            .enumerate()
            .map(|(i, v)| format!("{i}: {v}"))
            .collect();
        write!(f, "PerReplica:{{ {} }}", items.join(", "))
    }
}
