//! A collective's group of devices spread over several processes: each
//! process deposits its own devices' operands, sends them to the other
//! processes of the group and receives theirs, so that every process
//! reduces all operands in the same (device) order and gets the same bits.

use std::sync::Mutex;

use super::cluster::Cluster;
use super::error::DistributedError;
use super::wire::Message;
use crate::core::lift::collective::Remote;
use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// The link of one (axis, group) of a `shard_map` call to the processes
/// running the group's other items.
#[derive(Debug)]
pub(crate) struct GroupLink {
    cluster: Cluster,
    tag: u32,
    call: u64,
    axis_name: String,
    /// The process running each item.
    item_process: Vec<usize>,
    /// The other processes running items of the group.
    peers: Vec<usize>,
    /// Per peer: its end message was read already (it failed or returned
    /// early).
    ended: Mutex<Vec<bool>>,
}

impl GroupLink {
    /// The link of group `group` (numbered alike in every process) whose
    /// item `i` runs on process `item_process[i]`; `None` when this
    /// process runs all of them or none.
    pub(crate) fn new(
        cluster: &Cluster,
        call: u64,
        group: usize,
        axis_name: &str,
        item_process: Vec<usize>,
    ) -> Option<GroupLink> {
        let me = cluster.process_index();
        if !item_process.contains(&me) {
            return None;
        }
        let mut peers: Vec<usize> = item_process.iter().copied().filter(|&p| p != me).collect();
        peers.sort_unstable();
        peers.dedup();
        if peers.is_empty() {
            return None;
        }
        let n = peers.len();
        Some(GroupLink {
            cluster: cluster.clone(),
            tag: u32::try_from(group + 1).unwrap_or(u32::MAX),
            call,
            axis_name: axis_name.to_string(),
            item_process,
            peers,
            ended: Mutex::new(vec![false; n]),
        })
    }

    fn me(&self) -> usize {
        self.cluster.process_index()
    }

    fn mismatch(&self, what: String, value: String, peer: usize, peer_value: String) -> Error {
        self.cluster
            .broke(DistributedError::Mismatch {
                what,
                process: self.me(),
                value,
                peer,
                peer_value,
            })
            .into()
    }
}

/// A tensor's values in row-major order (a slice copy when contiguous:
/// iterating a dynamic-rank view element by element is slow).
fn values(t: &Tensor) -> Vec<f32> {
    let v = t.view();
    match v.as_slice() {
        Some(s) => s.to_vec(),
        None => v.iter().copied().collect(),
    }
}

fn shapes(operands: &[Tensor]) -> String {
    let s: Vec<Vec<usize>> = operands.iter().map(|t| t.shape().to_vec()).collect();
    format!("{s:?}")
}

impl Remote for GroupLink {
    fn is_local(&self, item: usize) -> bool {
        self.item_process.get(item) == Some(&self.me())
    }

    fn exchange(
        &self,
        index: usize,
        op: &str,
        local: &[(usize, Vec<Tensor>)],
    ) -> Result<Vec<(usize, Vec<Tensor>)>> {
        self.cluster.check_broken()?;
        let items = local
            .iter()
            .map(|(item, xs)| {
                let operands = xs.iter().map(|t| (t.shape().to_vec(), values(t))).collect();
                (*item as u32, operands)
            })
            .collect();
        let bytes = Message::Operands {
            call: self.call,
            index: index as u64,
            op: op.to_string(),
            items,
        }
        .encode();
        for &p in &self.peers {
            self.cluster.send(p, self.tag, bytes.clone())?;
        }
        let what = format!("collective #{index} over axis \"{}\"", self.axis_name);
        let reference = local.first().map(|(_, xs)| shapes(xs)).unwrap_or_default();
        let mut out = Vec::new();
        for (k, &p) in self.peers.iter().enumerate() {
            match self.cluster.recv(p, self.tag, &what)? {
                Message::Operands {
                    call,
                    index: i,
                    op: o,
                    items,
                } => {
                    if call != self.call || i != index as u64 || o != op {
                        return Err(self.mismatch(
                            "the collective being run".into(),
                            format!("{op} as collective #{index} of call {}", self.call),
                            p,
                            format!("{o} as collective #{i} of call {call}"),
                        ));
                    }
                    for (item, operands) in items {
                        let item = item as usize;
                        if self.item_process.get(item) != Some(&p) {
                            return Err(self
                                .cluster
                                .broke(DistributedError::Malformed {
                                    peer: p,
                                    message: format!("operands for item {item}, not one of its"),
                                })
                                .into());
                        }
                        let tensors = operands
                            .into_iter()
                            .map(|(shape, values)| Tensor::from_vec(values, &shape))
                            .collect::<std::result::Result<Vec<_>, _>>()?;
                        let theirs = shapes(&tensors);
                        if !reference.is_empty() && theirs != reference {
                            return Err(self.mismatch(
                                format!("the operand shapes of {what}"),
                                reference.clone(),
                                p,
                                theirs,
                            ));
                        }
                        out.push((item, tensors));
                    }
                }
                Message::Done { collectives, .. } => {
                    self.ended.lock().unwrap_or_else(|e| e.into_inner())[k] = true;
                    return Err(self
                        .cluster
                        .broke(DistributedError::Transport {
                            process: self.me(),
                            message: format!(
                                "process {p}'s devices returned after {collectives} collectives \
                                 over axis \"{}\", without reaching {what} that this process's \
                                 devices reached",
                                self.axis_name
                            ),
                        })
                        .into());
                }
                Message::Aborted { message } => {
                    self.ended.lock().unwrap_or_else(|e| e.into_inner())[k] = true;
                    return Err(self
                        .cluster
                        .broke(DistributedError::PeerFailed { peer: p, message })
                        .into());
                }
                other => {
                    return Err(self
                        .cluster
                        .broke(DistributedError::Malformed {
                            peer: p,
                            message: format!("expected operands of {what}, got {other:?}"),
                        })
                        .into())
                }
            }
        }
        Ok(out)
    }

    fn finish(&self, collectives: usize, failure: Option<&Error>) -> Result<()> {
        let end = match failure {
            Some(e) => Message::Aborted {
                message: e.to_string(),
            },
            None => Message::Done {
                call: self.call,
                collectives: collectives as u64,
            },
        }
        .encode();
        let mut first: Option<Error> = None;
        for &p in &self.peers {
            if let Err(e) = self.cluster.send(p, self.tag, end.clone()) {
                first.get_or_insert(e);
            }
        }
        let ended = self.ended.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let what = format!("the end of a call over axis \"{}\"", self.axis_name);
        for (&p, _) in self.peers.iter().zip(ended).filter(|(_, e)| !e) {
            // Read the peer's messages up to its end message.
            loop {
                match self.cluster.recv(p, self.tag, &what) {
                    Ok(Message::Done { collectives: c, .. }) => {
                        if failure.is_none() && c != collectives as u64 {
                            first.get_or_insert(self.mismatch(
                                format!(
                                    "the number of collectives over axis \"{}\"",
                                    self.axis_name
                                ),
                                collectives.to_string(),
                                p,
                                c.to_string(),
                            ));
                        }
                        break;
                    }
                    Ok(Message::Aborted { message }) => {
                        first.get_or_insert(
                            self.cluster
                                .broke(DistributedError::PeerFailed { peer: p, message })
                                .into(),
                        );
                        break;
                    }
                    Ok(Message::Operands { index, .. }) => {
                        if failure.is_none() {
                            first.get_or_insert(
                                self.cluster
                                    .broke(DistributedError::Transport {
                                        process: self.me(),
                                        message: format!(
                                            "process {p} reached collective #{index} over axis \
                                             \"{}\" that this process's devices returned before",
                                            self.axis_name
                                        ),
                                    })
                                    .into(),
                            );
                        }
                    }
                    Ok(other) => {
                        first.get_or_insert(
                            self.cluster
                                .broke(DistributedError::Malformed {
                                    peer: p,
                                    message: format!("expected the end of a call, got {other:?}"),
                                })
                                .into(),
                        );
                        break;
                    }
                    Err(e) => {
                        first.get_or_insert(e);
                        break;
                    }
                }
            }
        }
        match first {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}
