//! Replay of [`crate::ops::lstm_aggregate`] on the CPU, whose arm runs the buckets as
//! packed sequences ([`crate::ops::lstm_packs`]), and the steps the GPU arm
//! (`replay/lstm_gpu.rs`) shares with it: the forward's per-step buffers and the rows'
//! scatter into the src rows.

use super::{Replay, Rule, Val};

impl Replay {
    /// [`crate::ops::lstm_aggregate`] over dense `(nodes, degree)` buckets, run as the packs
    /// of [`crate::ops::lstm_packs`], reading the rows of `xw` through `idx` (kept): the
    /// output, 5 saved values per (row, unit) (gates and cell state) and, per step of a
    /// pack, the next `h` `[n_t, F]` beside the previous one (the product `h·W_hh` is
    /// written into the step's gate rows). Backward: `x̄g` `[rows, 4F]`, per step `z̄`
    /// `[n_t, 4F]` and `h̄` `[n_t, F]` beside the previous one, then `Hprev` `[rows, F]`;
    /// the saved values go before `W̄_hh = Hprevᵀ·x̄g`; `x̄g` goes to the rows' step
    /// ([`Replay::lstm_rows`]), whose rule scatters it into the src rows after this one.
    /// On a GPU, bucket by bucket instead ([`Replay::lstm_gpu`]).
    pub fn lstm(
        &mut self,
        xw: &Val,
        idx: &Val,
        w_hh: &Val,
        num_dst: usize,
        buckets: Vec<(usize, usize)>,
    ) -> Val {
        if self.gpu {
            return self.lstm_gpu(xw, idx, w_hh, num_dst, buckets);
        }
        let f = w_hh.rows;
        let rows = idx.rows;
        let out = self.alloc(num_dst, f);
        let acts = self.alloc(rows, f.saturating_mul(4));
        let cs = self.alloc(rows, f);
        // The CPU arm runs the buckets as packed sequences: step t over the pack's n_t
        // nodes still running.
        let packs = crate::ops::lstm_packs(&buckets);
        for steps in &packs {
            self.lstm_forward_steps(steps.iter().copied(), f, false);
        }
        let w_grad = w_hh.grad;
        let xr = self.lstm_rows(xw, idx, f.saturating_mul(4));
        let agg = self.record(
            out,
            (num_dst, f),
            &[&xr, w_hh],
            vec![],
            Box::new(move |r, _| {
                let dxg = r.alloc(rows, f.saturating_mul(4));
                for steps in &packs {
                    let mut dh: Option<usize> = None;
                    for (t, &m) in steps.iter().enumerate().rev() {
                        let dz = r.alloc(m, f.saturating_mul(4));
                        let next = (t > 0).then(|| r.alloc(m, f));
                        if t > 0 {
                            r.release(dz);
                        }
                        if let Some(prev) = dh {
                            r.release(prev);
                        }
                        if t == 0 {
                            r.release(dz);
                        }
                        dh = next;
                    }
                }
                let hprev = w_grad.then(|| r.alloc(rows, f));
                r.release(acts);
                r.release(cs);
                let dw = hprev.map(|hp| {
                    let dw = r.alloc(f, f.saturating_mul(4));
                    r.release(hp);
                    dw
                });
                vec![Some(dxg), dw]
            }),
        );
        self.release(xr.buf);
        agg
    }

    /// The step through which the LSTM reads `xw` on either arm ([`crate::autograd::Through`]):
    /// a node over `xw` that keeps `idx` and whose rule scatters the rows' gradient `x̄g`
    /// `[rows, 4F]` into `x̄w` `[ns, 4F]` ([`Replay::scatter`]). Its output, the rows, is
    /// never built: a buffer of no bytes, which the caller releases.
    pub(super) fn lstm_rows(&mut self, xw: &Val, idx: &Val, f4: usize) -> Val {
        let (ns, rows) = (xw.rows, idx.rows);
        let saved = vec![self.share(idx.buf)];
        let none = self.alloc_bytes(0);
        let rule: Rule = Box::new(move |r, _| vec![Some(r.scatter(ns, f4, rows))]);
        self.record(none, (rows, f4), &[xw], saved, rule)
    }

    /// The forward steps of one LSTM sequence of `F = f` units over `m` nodes a step: from
    /// the second step `h·W_hh` `[m, 4F]` when `product_buffer` (a GPU's matmul; the CPU
    /// writes the product into the saved gates), and the next `h` `[m, F]` beside the
    /// previous one; the last `h` goes after the sequence.
    pub(super) fn lstm_forward_steps(
        &mut self,
        steps: impl IntoIterator<Item = usize>,
        f: usize,
        product_buffer: bool,
    ) {
        let mut hb: Option<usize> = None;
        for m in steps {
            let hw = hb
                .filter(|_| product_buffer)
                .map(|_| self.alloc(m, f.saturating_mul(4)));
            let next = self.alloc(m, f);
            if let Some(prev) = hb.replace(next) {
                self.release(prev);
            }
            if let Some(hw) = hw {
                self.release(hw);
            }
        }
        if let Some(hb) = hb {
            self.release(hb);
        }
    }
}
