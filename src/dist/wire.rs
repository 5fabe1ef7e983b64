//! The bytes a sampler rank sends a trainer rank: one message per batch holding that
//! trainer's micro-batches, ready to upload.
//!
//! Little-endian, hand-written: a header (a magic word, the format's version, the batch's
//! epoch and index, its total micro-batch count K, the full batch's input rows and the
//! sampler's partition seconds), then per micro-batch its seeds, labels, its blocks (per layer `num_src` and the CSR's `indptr`,
//! `indices` and `src_nodes`; the transposed CSR is rebuilt on arrival, with every
//! invariant checked by `Block::new`) and, when the trainer gathers on the host, the
//! gathered input rows in their storage precision. An array is its length (u64) and its
//! elements. A short, long or foreign message is an error, never a panic.

use std::sync::Arc;

use half::{bf16, f16};

use crate::error::{Error, Result};
use crate::graph::{Block, HostRows, Prepared};

const MAGIC: u32 = u32::from_le_bytes(*b"ESPB");
const VERSION: u32 = 1;

/// One batch's micro-batches for one trainer, with the batch's figures.
pub(crate) struct FedBatch {
    pub epoch: u64,
    pub batch: u64,
    /// The batch's micro-batches over all trainers.
    pub k: u64,
    /// Input rows of the full batch's sample (for the redundancy figure).
    pub full_inputs: u64,
    /// The sampler's seconds choosing K and partitioning.
    pub partition_s: f64,
    pub parts: Vec<Prepared>,
}

/// Writes a batch message.
pub(crate) fn encode(b: &FedBatch) -> Vec<u8> {
    let mut w = Writer(Vec::new());
    w.u32(MAGIC);
    w.u32(VERSION);
    for v in [b.epoch, b.batch, b.k, b.full_inputs, b.parts.len() as u64] {
        w.u64(v);
    }
    w.f64(b.partition_s);
    for p in &b.parts {
        w.u32s(&p.seeds);
        w.u32s(&p.labels);
        w.u64(p.blocks.len() as u64);
        for block in &p.blocks {
            w.u64(block.num_src as u64);
            w.u32s(&block.indptr);
            w.u32s(&block.indices);
            w.u32s(&block.src_nodes);
        }
        match &p.features {
            None => w.u32(0),
            Some(HostRows::F32(v)) => {
                w.u32(1);
                w.array(bytemuck::cast_slice(v), v.len());
            }
            Some(HostRows::F16(v)) => {
                w.u32(2);
                w.array(bytemuck::cast_slice(v), v.len());
            }
            Some(HostRows::BF16(v)) => {
                w.u32(3);
                w.array(bytemuck::cast_slice(v), v.len());
            }
        }
    }
    w.0
}

/// Reads a batch message written by [`encode`].
pub(crate) fn decode(bytes: &[u8]) -> Result<FedBatch> {
    let mut r = Reader { bytes, at: 0 };
    if r.u32()? != MAGIC {
        return Err(Error::invalid(
            "a message from a sampler rank is not a batch (wrong magic word)",
        ));
    }
    let version = r.u32()?;
    if version != VERSION {
        return Err(Error::invalid(format!(
            "a sampler rank sent batch format {version}, this trainer reads {VERSION}: \
             run the same espalier on every rank"
        )));
    }
    let (epoch, batch, k, full_inputs, n) = (r.u64()?, r.u64()?, r.u64()?, r.u64()?, r.u64()?);
    let partition_s = r.f64()?;
    let mut parts = Vec::new();
    for _ in 0..n {
        let seeds = r.u32s()?;
        let labels = r.u32s()?;
        let layers = r.u64()?;
        let mut blocks = Vec::new();
        for _ in 0..layers {
            let num_src = usize::try_from(r.u64()?)
                .map_err(|_| Error::invalid("batch message: a block's size is past usize"))?;
            let (indptr, indices, src_nodes) = (r.u32s()?, r.u32s()?, r.u32s()?);
            blocks.push(Arc::new(Block::new(num_src, indptr, indices, src_nodes)?));
        }
        let features = match r.u32()? {
            0 => None,
            1 => Some(HostRows::F32(r.pods::<f32>()?)),
            2 => Some(HostRows::F16(r.pods::<f16>()?)),
            3 => Some(HostRows::BF16(r.pods::<bf16>()?)),
            t => {
                return Err(Error::invalid(format!(
                    "batch message: unknown feature encoding {t}"
                )))
            }
        };
        if blocks.is_empty() || seeds.len() != labels.len() {
            return Err(Error::invalid(format!(
                "batch message: a micro-batch of {} seeds, {} labels and {} blocks",
                seeds.len(),
                labels.len(),
                blocks.len()
            )));
        }
        parts.push(Prepared {
            seeds,
            blocks,
            features,
            labels,
            // The sampler's seconds, not this trainer's: its phases count its own.
            slice_s: 0.0,
            gather_s: 0.0,
            wait_s: 0.0,
        });
    }
    if r.at != bytes.len() {
        return Err(Error::invalid(format!(
            "batch message: {} bytes left over after its last micro-batch",
            bytes.len() - r.at
        )));
    }
    Ok(FedBatch {
        epoch,
        batch,
        k,
        full_inputs,
        partition_s,
        parts,
    })
}

struct Writer(Vec<u8>);

impl Writer {
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn f64(&mut self, v: f64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    /// `len` elements whose bytes (little-endian) are `bytes`.
    fn array(&mut self, bytes: &[u8], len: usize) {
        self.u64(len as u64);
        self.0.extend_from_slice(bytes);
    }
    fn u32s(&mut self, v: &[u32]) {
        self.array(bytemuck::cast_slice(v), v.len());
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8]> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.bytes.len());
        let Some(end) = end else {
            return Err(Error::invalid(format!(
                "batch message cut short: {n} bytes wanted at byte {} of {}",
                self.at,
                self.bytes.len()
            )));
        };
        let s = &self.bytes[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().unwrap_or_default(),
        ))
    }
    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().unwrap_or_default(),
        ))
    }
    fn f64(&mut self) -> Result<f64> {
        Ok(f64::from_bits(self.u64()?))
    }
    /// An array of plain values (copied: the message's bytes need not be aligned).
    fn pods<T: bytemuck::Pod>(&mut self) -> Result<Vec<T>> {
        let len = self.u64()?;
        let bytes = usize::try_from(len)
            .ok()
            .and_then(|l| l.checked_mul(std::mem::size_of::<T>()))
            .ok_or_else(|| Error::invalid(format!("batch message: an array of {len} elements")))?;
        Ok(bytemuck::pod_collect_to_vec(self.take(bytes)?))
    }
    fn u32s(&mut self) -> Result<Vec<u32>> {
        self.pods()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch() -> FedBatch {
        // Two seeds (nodes 5 and 9) with in-edges from 5, 9 and 2.
        let block = Block::new(3, vec![0, 2, 3], vec![1, 2, 0], vec![5, 9, 2]).unwrap();
        FedBatch {
            epoch: 2,
            batch: 7,
            k: 4,
            full_inputs: 11,
            partition_s: 0.5,
            parts: vec![Prepared {
                seeds: vec![5, 9],
                blocks: vec![Arc::new(block)],
                features: Some(HostRows::F16(vec![f16::from_f32(1.5); 6])),
                labels: vec![1, 0],
                slice_s: 0.125,
                gather_s: 0.0625,
                wait_s: 0.0,
            }],
        }
    }

    #[test]
    fn a_batch_decodes_to_the_blocks_rows_and_figures_it_was_encoded_from() {
        let b = batch();
        let d = decode(&encode(&b)).unwrap();
        assert_eq!((d.epoch, d.batch, d.k, d.full_inputs), (2, 7, 4, 11));
        assert_eq!(d.partition_s, 0.5);
        let (p, q) = (&b.parts[0], &d.parts[0]);
        assert_eq!((&q.seeds, &q.labels), (&p.seeds, &p.labels));
        assert_eq!(*q.blocks[0], *p.blocks[0]);
        match &q.features {
            Some(HostRows::F16(v)) => assert_eq!(v, &vec![f16::from_f32(1.5); 6]),
            _ => panic!("rows lost or changed precision"),
        }
    }

    #[test]
    fn a_cut_or_padded_message_is_an_error() {
        let bytes = encode(&batch());
        for n in [0, 3, 20, bytes.len() - 1] {
            assert!(decode(&bytes[..n]).is_err(), "{n} bytes");
        }
        let mut long = bytes.clone();
        long.push(0);
        let e = decode(&long).err().unwrap().to_string();
        assert!(e.contains("left over"), "{e}");
        let mut foreign = bytes;
        foreign[0] ^= 1;
        assert!(decode(&foreign).is_err());
    }
}
