//! Replay of [`crate::ops::lstm_aggregate`] on a GPU, whose arm runs the buckets one by one
//! (the CPU's runs them as packed sequences, [`Replay::lstm`]). With
//! [`Replay::lstm_rows_in_kernel`] the dst ids of all buckets are one buffer and the last
//! step's gradient rows are read in the kernel, not gathered.

use super::{Replay, Val};

impl Replay {
    /// The GPU arm over dense `(nodes, degree)` buckets, its step kernels reading the rows
    /// of `xw` through `idx` (kept) in place: the output, gates `[rows, 4F]` and cells
    /// `[rows, F]`, the buckets' dst ids (u32 `[m]` each, or one buffer of them all where
    /// the kernels index rows themselves; uploaded and kept for the backward); per bucket
    /// and step, `h·W_hh` `[m, 4F]` and the next `h` `[m, F]` beside the previous one; then
    /// the rows' step numbers (u32 `[rows]`, kept). Backward: `x̄g` `[rows, 4F]`; per
    /// bucket `c̄` `[m, F]` and per step, last first, `z̄` `[m, 4F]` (at the last step with
    /// the gradient's rows of the bucket gathered, `[m, F]`, transient, unless the kernels
    /// read them) and `h̄` `[m, F]` beside the previous one; `Hprev` `[rows, F]`; the saved
    /// values and ids go before `W̄_hh = Hprevᵀ·x̄g`; `x̄g` goes to the rows' step
    /// ([`Replay::lstm_rows`]).
    pub(super) fn lstm_gpu(
        &mut self,
        xw: &Val,
        idx: &Val,
        w_hh: &Val,
        num_dst: usize,
        buckets: Vec<(usize, usize)>,
    ) -> Val {
        let f = w_hh.rows;
        let f4 = f.saturating_mul(4);
        let rows = idx.rows;
        let out = self.alloc(num_dst, f);
        let acts = self.alloc(rows, f4);
        let cs = self.alloc(rows, f);
        let dst: Vec<usize> = match self.lstm_rows_in_kernel {
            true => vec![self.alloc(buckets.iter().map(|&(m, _)| m).sum(), 1)],
            false => buckets.iter().map(|&(m, _)| self.alloc(m, 1)).collect(),
        };
        let gathers_last = !self.lstm_rows_in_kernel;
        for &(m, k) in &buckets {
            self.lstm_forward_steps(std::iter::repeat_n(m, k), f, true);
        }
        let steps = self.alloc(rows, 1);
        let w_grad = w_hh.grad;
        let xr = self.lstm_rows(xw, idx, f4);
        let agg = self.record(
            out,
            (num_dst, f),
            &[&xr, w_hh],
            vec![],
            Box::new(move |r, _| {
                let dxg = r.alloc(rows, f4);
                for &(m, k) in &buckets {
                    let dc = r.alloc(m, f);
                    let mut dh: Option<usize> = None;
                    for t in (0..k).rev() {
                        let dz = r.alloc(m, f4);
                        if t + 1 == k && gathers_last {
                            let last = r.alloc(m, f);
                            r.release(last);
                        }
                        let next = (t > 0).then(|| r.alloc(m, f));
                        r.release(dz);
                        if let Some(prev) = dh {
                            r.release(prev);
                        }
                        dh = next;
                    }
                    r.release(dc);
                }
                let hprev = w_grad.then(|| r.alloc(rows, f));
                for b in [acts, cs, steps].into_iter().chain(dst) {
                    r.release(b);
                }
                let dw = hprev.map(|hp| {
                    let dw = r.alloc(f, f4);
                    r.release(hp);
                    dw
                });
                vec![Some(dxg), dw]
            }),
        );
        self.release(xr.buf);
        agg
    }
}
