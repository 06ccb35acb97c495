//! The messages processes exchange, as bytes: written by one flaxen,
//! read by another, and checked while read (a truncated or corrupt message
//! is an error, never a panic or an unbounded allocation).

use super::error::DistributedError;

/// An operand on the wire: its shape and values.
pub(crate) type Operand = (Vec<usize>, Vec<f32>);

/// One message of a collective's conversation.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Message {
    /// This process's operands of a collective, per item it runs.
    Operands {
        /// The cluster's call counter (every process counts the same calls).
        call: u64,
        /// Which collective of the call (`#0`, `#1`, ...).
        index: u64,
        /// The collective's name (`psum`, `pmean`, `all_gather`).
        op: String,
        /// Per item: its index and its operands (shape, values).
        items: Vec<(u32, Vec<Operand>)>,
    },
    /// This process's devices returned after `collectives` collectives.
    Done { call: u64, collectives: u64 },
    /// This process failed with this message.
    Aborted { message: String },
    /// A value every process must agree on (the handshake).
    Value { what: String, value: String },
    /// A block of bytes (process_allgather).
    Blob { bytes: Vec<u8> },
}

impl Message {
    /// The bytes.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut w = Vec::new();
        match self {
            Message::Operands {
                call,
                index,
                op,
                items,
            } => {
                w.push(0u8);
                put_u64(&mut w, *call);
                put_u64(&mut w, *index);
                put_str(&mut w, op);
                put_u64(&mut w, items.len() as u64);
                for (item, operands) in items {
                    put_u64(&mut w, u64::from(*item));
                    put_u64(&mut w, operands.len() as u64);
                    for (shape, values) in operands {
                        put_u64(&mut w, shape.len() as u64);
                        for &d in shape {
                            put_u64(&mut w, d as u64);
                        }
                        put_u64(&mut w, values.len() as u64);
                        let start = w.len();
                        w.resize(start + 4 * values.len(), 0);
                        for (b, v) in w[start..].chunks_exact_mut(4).zip(values) {
                            b.copy_from_slice(&v.to_le_bytes());
                        }
                    }
                }
            }
            Message::Done { call, collectives } => {
                w.push(1);
                put_u64(&mut w, *call);
                put_u64(&mut w, *collectives);
            }
            Message::Aborted { message } => {
                w.push(2);
                put_str(&mut w, message);
            }
            Message::Value { what, value } => {
                w.push(3);
                put_str(&mut w, what);
                put_str(&mut w, value);
            }
            Message::Blob { bytes } => {
                w.push(4);
                put_u64(&mut w, bytes.len() as u64);
                w.extend_from_slice(bytes);
            }
        }
        w
    }

    /// The message in `bytes`, sent by process `peer`.
    pub(crate) fn decode(bytes: &[u8], peer: usize) -> Result<Message, DistributedError> {
        let mut r = Reader { bytes, at: 0, peer };
        let m = match r.u8()? {
            0 => {
                let call = r.u64()?;
                let index = r.u64()?;
                let op = r.str()?;
                let n = r.count(8)?;
                let mut items = Vec::with_capacity(n);
                for _ in 0..n {
                    let item = u32::try_from(r.u64()?).map_err(|_| r.bad("item index"))?;
                    let arity = r.count(8)?;
                    let mut operands = Vec::with_capacity(arity);
                    for _ in 0..arity {
                        let ndim = r.count(8)?;
                        let mut shape = Vec::with_capacity(ndim);
                        for _ in 0..ndim {
                            shape.push(usize::try_from(r.u64()?).map_err(|_| r.bad("shape"))?);
                        }
                        let len = r.count(4)?;
                        let product = shape
                            .iter()
                            .try_fold(1usize, |a, &d| a.checked_mul(d))
                            .ok_or_else(|| r.bad("shape"))?;
                        if product != len {
                            return Err(r.bad(&format!("shape {shape:?} with {len} values")));
                        }
                        let raw = r.take(len * 4)?;
                        let values = raw
                            .chunks_exact(4)
                            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                            .collect();
                        operands.push((shape, values));
                    }
                    items.push((item, operands));
                }
                Message::Operands {
                    call,
                    index,
                    op,
                    items,
                }
            }
            1 => Message::Done {
                call: r.u64()?,
                collectives: r.u64()?,
            },
            2 => Message::Aborted { message: r.str()? },
            3 => Message::Value {
                what: r.str()?,
                value: r.str()?,
            },
            4 => {
                let n = r.count(1)?;
                Message::Blob {
                    bytes: r.take(n)?.to_vec(),
                }
            }
            k => return Err(r.bad(&format!("unknown message kind {k}"))),
        };
        if r.at != bytes.len() {
            return Err(r.bad("trailing bytes"));
        }
        Ok(m)
    }
}

fn put_u64(w: &mut Vec<u8>, v: u64) {
    w.extend_from_slice(&v.to_le_bytes());
}

fn put_str(w: &mut Vec<u8>, s: &str) {
    put_u64(w, s.len() as u64);
    w.extend_from_slice(s.as_bytes());
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
    peer: usize,
}

impl Reader<'_> {
    fn bad(&self, what: &str) -> DistributedError {
        DistributedError::Malformed {
            peer: self.peer,
            message: format!("{what} at byte {}", self.at),
        }
    }

    fn take(&mut self, n: usize) -> Result<&[u8], DistributedError> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&e| e <= self.bytes.len())
            .ok_or_else(|| self.bad("truncated"))?;
        let s = &self.bytes[self.at..end];
        self.at = end;
        Ok(s)
    }

    fn u8(&mut self) -> Result<u8, DistributedError> {
        Ok(self.take(1)?[0])
    }

    fn u64(&mut self) -> Result<u64, DistributedError> {
        let b = self.take(8)?;
        Ok(u64::from_le_bytes(b.try_into().expect("eight bytes")))
    }

    /// A count of things of at least `size` bytes each: never more than the
    /// bytes left could hold, so a corrupt count cannot allocate much.
    fn count(&mut self, size: usize) -> Result<usize, DistributedError> {
        let n = self.u64()?;
        let left = (self.bytes.len() - self.at) as u64;
        if n.checked_mul(size as u64).is_none_or(|b| b > left) {
            return Err(self.bad(&format!("count {n} larger than the message")));
        }
        Ok(n as usize)
    }

    fn str(&mut self) -> Result<String, DistributedError> {
        let n = self.count(1)?;
        let b = self.take(n)?;
        String::from_utf8(b.to_vec()).map_err(|_| self.bad("text that is not UTF-8"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_and_mutations_never_panic() {
        let messages = [
            Message::Operands {
                call: 3,
                index: 1,
                op: "psum".into(),
                items: vec![(2, vec![(vec![2, 1], vec![1.5, -0.0]), (vec![], vec![7.0])])],
            },
            Message::Done {
                call: 1,
                collectives: 4,
            },
            Message::Aborted {
                message: "boom".into(),
            },
            Message::Value {
                what: "version".into(),
                value: "0.1".into(),
            },
            Message::Blob {
                bytes: vec![1, 2, 3],
            },
        ];
        for m in &messages {
            let bytes = m.encode();
            assert_eq!(&Message::decode(&bytes, 1).unwrap(), m);
            // Every truncation and many single-byte changes: an error or
            // some message, never a panic.
            for cut in 0..bytes.len() {
                assert!(Message::decode(&bytes[..cut], 1).is_err());
            }
            for i in 0..bytes.len() {
                for v in [0u8, 1, 0x7f, 0xff] {
                    let mut b = bytes.clone();
                    b[i] = v;
                    let _ = Message::decode(&b, 1);
                }
            }
        }
    }
}
