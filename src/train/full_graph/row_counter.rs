//! How often each layer's rows are read and uploaded over its chunks ([`LayerRows`]).

use crate::train::stats::LayerRows;

/// Counts [`LayerRows`] over a layer's chunks, one source list at a time.
pub(super) struct RowCounter {
    pub(super) rows: LayerRows,
    /// Per node: 1 + the last chunk that read it (0: none).
    last: Vec<u32>,
    chunk: u32,
}

impl RowCounter {
    pub(super) fn new(layer: usize, num_nodes: usize) -> Self {
        RowCounter {
            rows: LayerRows {
                layer,
                ..Default::default()
            },
            last: vec![0; num_nodes],
            chunk: 0,
        }
    }

    /// A chunk that reads the rows of `src`, `reused` of them taken on the device.
    pub(super) fn add(&mut self, src: &[u32], reused: usize) {
        self.chunk += 1;
        self.rows.rows_read += src.len() as u64;
        self.rows.rows_uploaded += (src.len() - reused) as u64;
        for &v in src {
            let seen = &mut self.last[v as usize];
            match *seen {
                0 => self.rows.distinct_rows += 1,
                c if c + 1 == self.chunk => self.rows.shared_with_previous += 1,
                _ => {}
            }
            *seen = self.chunk;
        }
    }
}
