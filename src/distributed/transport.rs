//! How processes reach each other: tagged messages of bytes, point to
//! point, with a deadline on every receive so that a dead peer is an error
//! rather than a hang.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

use super::error::DistributedError;

/// A channel between the processes of a job. Messages from one process to
/// another on one tag arrive in the order they were sent (as MPI
/// guarantees); messages on different tags are independent.
///
/// flaxen ships two: MPI's (feature `mpi`, `Cluster::from_mpi`) and
/// [`simulate`]'s threads standing in for processes.
pub trait Transport: Send + Sync + fmt::Debug {
    /// This process's index (`jax.process_index()`), in `0..process_count`.
    fn process_index(&self) -> usize;
    /// The number of processes (`jax.process_count()`).
    fn process_count(&self) -> usize;
    /// Sends `bytes` to process `to` on `tag` without waiting for it to be
    /// received.
    fn send(&self, to: usize, tag: u32, bytes: Vec<u8>) -> Result<(), DistributedError>;
    /// The next message from process `from` on `tag`, or `Ok(None)` when
    /// none arrived before `deadline`.
    fn recv(
        &self,
        from: usize,
        tag: u32,
        deadline: Instant,
    ) -> Result<Option<Vec<u8>>, DistributedError>;
}

/// Queued messages per (sender, receiver, tag).
type Boxes = HashMap<(usize, usize, u32), VecDeque<Vec<u8>>>;

/// Mailboxes shared by the threads of [`simulate`].
#[derive(Debug, Default)]
struct Mailboxes {
    boxes: Mutex<Boxes>,
    arrived: Condvar,
}

/// One of [`simulate`]'s processes: a thread whose messages go through
/// shared memory.
#[derive(Debug)]
pub struct ThreadTransport {
    index: usize,
    count: usize,
    mail: Arc<Mailboxes>,
}

impl ThreadTransport {
    /// The transport of a job of one process.
    pub fn single() -> ThreadTransport {
        ThreadTransport {
            index: 0,
            count: 1,
            mail: Arc::default(),
        }
    }
}

impl Transport for ThreadTransport {
    fn process_index(&self) -> usize {
        self.index
    }

    fn process_count(&self) -> usize {
        self.count
    }

    fn send(&self, to: usize, tag: u32, bytes: Vec<u8>) -> Result<(), DistributedError> {
        if to >= self.count {
            return Err(DistributedError::Transport {
                process: self.index,
                message: format!("no process {to}: there are {}", self.count),
            });
        }
        let mut boxes = self.mail.boxes.lock().unwrap_or_else(|e| e.into_inner());
        boxes
            .entry((self.index, to, tag))
            .or_default()
            .push_back(bytes);
        drop(boxes);
        self.mail.arrived.notify_all();
        Ok(())
    }

    fn recv(
        &self,
        from: usize,
        tag: u32,
        deadline: Instant,
    ) -> Result<Option<Vec<u8>>, DistributedError> {
        let mut boxes = self.mail.boxes.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(m) = boxes
                .get_mut(&(from, self.index, tag))
                .and_then(VecDeque::pop_front)
            {
                return Ok(Some(m));
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(None);
            }
            boxes = self
                .mail
                .arrived
                .wait_timeout(boxes, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

impl<T: Transport + ?Sized> Transport for Box<T> {
    fn process_index(&self) -> usize {
        (**self).process_index()
    }
    fn process_count(&self) -> usize {
        (**self).process_count()
    }
    fn send(&self, to: usize, tag: u32, bytes: Vec<u8>) -> Result<(), DistributedError> {
        (**self).send(to, tag, bytes)
    }
    fn recv(
        &self,
        from: usize,
        tag: u32,
        deadline: Instant,
    ) -> Result<Option<Vec<u8>>, DistributedError> {
        (**self).recv(from, tag, deadline)
    }
}

/// Runs `f` once per simulated process, each on its own thread with its
/// own [`ThreadTransport`], and returns their results in process order:
/// a job of `processes` processes inside one, for tests and for trying
/// multi-process code without `mpirun`.
///
/// ```
/// use flaxen::distributed::{simulate, Cluster};
///
/// let counts = simulate(2, |transport| {
///     let cluster = Cluster::new(transport, 2)?;
///     Ok(cluster.mesh(&[4], &["data"])?.local_devices().len())
/// });
/// assert_eq!(counts.into_iter().collect::<Result<Vec<_>, _>>()?, vec![2, 2]);
/// # Ok::<(), flaxen::Error>(())
/// ```
pub fn simulate<R: Send>(
    processes: usize,
    f: impl Fn(ThreadTransport) -> crate::Result<R> + Sync,
) -> Vec<crate::Result<R>> {
    let mail = Arc::new(Mailboxes::default());
    let f = &f;
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..processes)
            .map(|index| {
                let transport = ThreadTransport {
                    index,
                    count: processes,
                    mail: Arc::clone(&mail),
                };
                scope.spawn(move || f(transport))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    })
}
