//! The parallel driver: the devices of a mesh, each on its own thread,
//! running at once; at a collective each deposits its operand and waits,
//! and the last to arrive reduces the operands in device order and wakes
//! the others. The result does not depend on which device came last.
//!
//! A device that fails (or panics) stops the others; a device that returns
//! without reaching a collective that others reached stops them with an
//! error naming both. Nothing waits forever.

use std::cell::RefCell;
use std::sync::Arc;

use super::{AxisContext, Collectives, Progress, Reduce, Remote};
use crate::error::Result;
use crate::tensor::Tensor;

thread_local! {
    /// The mesh axes bound on this thread (a device inside `shard_map`).
    static DEVICE_AXES: RefCell<Vec<AxisContext>> = const { RefCell::new(Vec::new()) };
}

/// A device's handles on the collectives of its mesh axes.
pub(crate) type DeviceAxes = Vec<AxisContext>;

/// Runs `f` with `axes` bound on this thread, so that collectives over
/// their names (from `Scope::pmean` or `sharding::psum`) reach them.
pub(crate) fn with_device_axes<R>(axes: DeviceAxes, f: impl FnOnce() -> R) -> R {
    struct Unbind(Vec<AxisContext>);
    impl Drop for Unbind {
        fn drop(&mut self) {
            let previous = std::mem::take(&mut self.0);
            DEVICE_AXES.with(|a| *a.borrow_mut() = previous);
        }
    }
    let previous = DEVICE_AXES.with(|a| std::mem::replace(&mut *a.borrow_mut(), axes));
    let _unbind = Unbind(previous);
    f()
}

/// The mesh axis called `name` bound on this thread, if any.
pub(crate) fn bound_axis(name: &str) -> Option<AxisContext> {
    DEVICE_AXES.with(|a| {
        a.borrow()
            .iter()
            .rev()
            .find(|c| c.shared.axis_name == name)
            .cloned()
    })
}

/// The error a device's collective returns when another device failed;
/// the failure itself is reported instead.
const ABORTED: &str = "stopped: another device failed";

impl Collectives {
    /// Device `item`'s collective: deposit, and resolve if it came last;
    /// otherwise wait for the result.
    pub(super) fn parallel_collective(
        &self,
        item: usize,
        reduce: Reduce,
        x: &[Tensor],
    ) -> Result<Vec<Tensor>> {
        if x.iter().any(Tensor::is_traced) {
            let e = self.error(format!(
                "device {item} passed an operand traced by grad to a collective over axis \"{}\": \
                 collectives between devices are not differentiated; take the gradient on each \
                 device and reduce the gradients",
                self.axis_name
            ));
            self.fail(e.clone());
            return Err(e);
        }
        let mut st = self.lock();
        if st.aborted.is_some() {
            return Err(self.error(ABORTED.to_string()));
        }
        let index = st.resolved.len();
        st.pending[item] = Some((reduce, x.to_vec()));
        let deposited = st.pending.iter().filter(|p| p.is_some()).count();
        let finished = st.finished.iter().filter(|&&f| f).count();
        if deposited + finished == self.local_items() {
            if let Some(f) = st.finished.iter().position(|&f| f) {
                st.aborted = Some(self.skipped(f, index));
            } else {
                // Other processes' items join here (the last local device
                // talks to them while the others wait).
                let joined = match &self.remote {
                    Some(remote) => self.join_remote(remote.as_ref(), &mut st, index),
                    None => Ok(()),
                };
                match joined.and_then(|()| self.resolve(&mut st)) {
                    Ok(_) => {}
                    Err(e) => st.aborted = Some(e),
                }
            }
            self.batons[0].notify_all();
        } else {
            while st.resolved.len() <= index && st.aborted.is_none() {
                st = self.batons[0].wait(st).unwrap_or_else(|e| e.into_inner());
            }
        }
        if st.resolved.len() <= index {
            return Err(self.error(ABORTED.to_string()));
        }
        st.resolved[index].for_item(item)
    }

    /// The number of items this process runs.
    fn local_items(&self) -> usize {
        match &self.remote {
            Some(r) => (0..self.items).filter(|&i| r.is_local(i)).count(),
            None => self.items,
        }
    }

    /// Exchanges the local operands of collective `index` for the other
    /// processes' ones, which take their items' places.
    fn join_remote(&self, remote: &dyn Remote, st: &mut Progress, index: usize) -> Result<()> {
        let mut op = None;
        let local: Vec<(usize, Vec<Tensor>)> = st
            .pending
            .iter()
            .enumerate()
            .filter_map(|(i, p)| {
                p.as_ref().map(|(r, x)| {
                    op.get_or_insert_with(|| r.clone());
                    (i, x.clone())
                })
            })
            .collect();
        let op = op.expect("the caller deposited");
        for (item, x) in remote.exchange(index, op.name(), &local)? {
            st.pending[item] = Some((op.clone(), x));
        }
        Ok(())
    }

    /// Ends this call with the other processes (after every local device
    /// returned): they learn whether this process failed, and this one
    /// whether they did.
    pub(crate) fn finish_remote(&self) -> Result<()> {
        let Some(remote) = &self.remote else {
            return Ok(());
        };
        let (resolved, failure) = {
            let st = self.lock();
            (st.resolved.len(), st.aborted.clone())
        };
        remote.finish(resolved, failure.as_ref())
    }

    /// Records that device `item`'s body returned (`ok`: without an
    /// error). Devices waiting at a collective it never reached are
    /// stopped.
    pub(crate) fn finish(&self, item: usize, outcome: std::result::Result<(), crate::Error>) {
        let mut st = self.lock();
        st.finished[item] = true;
        match outcome {
            Err(e) => {
                if st.aborted.is_none() {
                    st.aborted = Some(e);
                }
            }
            Ok(()) => {
                let waiting = st.pending.iter().any(Option::is_some);
                if waiting && st.aborted.is_none() {
                    let index = st.resolved.len();
                    st.aborted = Some(self.skipped(item, index));
                }
            }
        }
        drop(st);
        self.batons[0].notify_all();
    }

    /// The error for device `item` returning before collective `index`,
    /// which others reached (the same whichever device noticed it).
    fn skipped(&self, item: usize, index: usize) -> crate::Error {
        self.error(format!(
            "device {item} returned without reaching collective #{index} over axis \"{}\" \
             that other devices reached",
            self.axis_name
        ))
    }

    /// Stops every device with `e` (unless one failed already).
    pub(crate) fn fail(&self, e: crate::Error) {
        let mut st = self.lock();
        if st.aborted.is_none() {
            st.aborted = Some(e);
        }
        drop(st);
        self.batons[0].notify_all();
    }

    /// The first failure, if a device failed.
    pub(crate) fn failure(&self) -> Option<crate::Error> {
        self.lock().aborted.clone()
    }

    /// The handle of device `item` on these collectives.
    pub(crate) fn handle(self: &Arc<Self>, item: usize) -> AxisContext {
        AxisContext {
            shared: Arc::clone(self),
            item,
        }
    }
}
