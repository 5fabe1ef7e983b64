//! Full-graph training's vertex data in host memory: a layer's rows, and the gradients
//! read back from the device into them.

use rayon::prelude::*;

use crate::error::{Error, Result};

/// One layer's rows on the host: a row per node of the layer, in the plan's order.
pub(super) struct HostMatrix {
    pub(super) width: usize,
    pub(super) data: Vec<f32>,
    /// Global node id to row (`u32::MAX`: not in the layer).
    pos: Vec<u32>,
}

impl HostMatrix {
    pub(super) fn zeros(nodes: &[u32], width: usize, num_nodes: usize) -> Result<Self> {
        let len = nodes.len().checked_mul(width).ok_or_else(|| {
            Error::invalid(format!(
                "full-graph: {} rows of width {width} overflow the address space",
                nodes.len()
            ))
        })?;
        let mut pos = vec![u32::MAX; num_nodes];
        for (i, &v) in nodes.iter().enumerate() {
            pos[v as usize] = i as u32;
        }
        Ok(HostMatrix {
            width,
            data: vec![0.0; len],
            pos,
        })
    }

    fn row(&self, v: u32) -> Result<usize> {
        match self.pos.get(v as usize) {
            Some(&r) if r != u32::MAX => Ok(r as usize),
            _ => Err(Error::invalid(format!(
                "full-graph: node {v} has no row in this layer"
            ))),
        }
    }

    /// The rows of `ids`, row-major.
    pub(super) fn gather(&self, ids: &[u32]) -> Result<Vec<f32>> {
        let w = self.width;
        let rows = ids
            .iter()
            .map(|&v| self.row(v))
            .collect::<Result<Vec<_>>>()?;
        let mut out = vec![0.0f32; ids.len() * w];
        out.par_chunks_mut(w.max(1))
            .zip(rows.par_iter())
            .for_each(|(o, &r)| o.copy_from_slice(&self.data[r * w..(r + 1) * w]));
        Ok(out)
    }

    /// Adds `values` (row-major, one row per id) into the rows of `ids`, which are
    /// distinct (a block's source nodes), so rows are written in parallel.
    pub(super) fn scatter_add(&mut self, ids: &[u32], values: &[f32]) -> Result<()> {
        let w = self.width;
        if values.len() != ids.len() * w {
            return Err(Error::invalid(format!(
                "full-graph: {} gradient values for {} rows of width {w}",
                values.len(),
                ids.len()
            )));
        }
        let rows = ids
            .iter()
            .map(|&v| self.row(v))
            .collect::<Result<Vec<_>>>()?;
        let mut seen = vec![false; self.data.len() / w.max(1)];
        for &r in &rows {
            if std::mem::replace(&mut seen[r], true) {
                return Err(Error::invalid(
                    "full-graph: a chunk lists one source node twice",
                ));
            }
        }
        let out = RowsPtr(self.data.as_mut_ptr());
        rows.par_iter().enumerate().for_each(|(i, &r)| {
            let out = &out;
            // SAFETY: `r < rows of data` (from `row`), and the rows are distinct (checked
            // above), so each task writes its own row and no two alias.
            let dst = unsafe { std::slice::from_raw_parts_mut(out.0.add(r * w), w) };
            for (a, b) in dst.iter_mut().zip(&values[i * w..(i + 1) * w]) {
                *a += b;
            }
        });
        Ok(())
    }
}

/// The host matrix's rows, written by disjoint parallel tasks.
struct RowsPtr(*mut f32);
// SAFETY: shared only by `scatter_add`, whose tasks write disjoint rows.
unsafe impl Sync for RowsPtr {}

/// Adds the gradient `rows` of layer `l`'s input rows (of `src`), read back to the host
/// ([`crate::train::step::input_grad`]), into `g` (the previous layer's output gradient);
/// returns the bytes read.
pub(super) fn add_input_grad(
    rows: Option<Vec<f32>>,
    l: usize,
    g: &mut HostMatrix,
    src: &[u32],
) -> Result<u64> {
    let rows = rows
        .ok_or_else(|| Error::invalid(format!("full-graph: layer {l}'s input got no gradient")))?;
    g.scatter_add(src, &rows)?;
    Ok(f32_bytes(rows.len()))
}

/// `rows` zero rows of `width` floats on the host.
pub(super) fn host_rows(rows: usize, width: usize) -> Result<Vec<f32>> {
    let len = rows.checked_mul(width).ok_or_else(|| {
        Error::invalid(format!(
            "full-graph: {rows} rows of width {width} overflow the address space"
        ))
    })?;
    Ok(vec![0.0; len])
}

/// Bytes of `n` f32 values.
pub(super) fn f32_bytes(n: usize) -> u64 {
    (n as u64).saturating_mul(4)
}
