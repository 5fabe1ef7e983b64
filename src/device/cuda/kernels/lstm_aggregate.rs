//! `kernels/lstm_aggregate.cu` behind [`LstmKernels`]: whole buffers; the step kernels
//! write the output rows and read the output gradient's rows themselves, through the
//! bucket's dst ids.

use std::sync::Arc;

use crate::device::cuda::args::{LstmHprevArgs, LstmStepArgs, LstmStepBackwardArgs, Ptr};
use crate::device::cuda::{Context, CudaBuffer};
use crate::device::gpu::GpuDevice;
use crate::device::kernels::lstm_aggregate::{LstmKernels, Step, StepBackwardBuffers, StepBuffers};
use crate::error::Result;

/// The dst ids of every bucket in one CUDA buffer, one bucket after another; a kernel gets
/// a pointer to its bucket's first id.
pub struct CudaDstIds {
    ids: CudaBuffer,
    first: Vec<usize>,
}

/// CUDA: whole buffers; the step kernels write the output rows and read the output
/// gradient's rows themselves, through the bucket's dst ids.
impl LstmKernels for Context {
    type DstIds = CudaDstIds;

    fn upload_dst(self: &Arc<Self>, dst: &[&[u32]]) -> Result<CudaDstIds> {
        let all: Vec<u32> = dst.concat();
        let first = dst
            .iter()
            .scan(0, |at, d| {
                let first = *at;
                *at += d.len();
                Some(first)
            })
            .collect();
        Ok(CudaDstIds {
            ids: self.upload_u32(&all)?,
            first,
        })
    }

    fn step(&self, s: Step, dst: &CudaDstIds, b: StepBuffers<CudaBuffer>) -> Result<()> {
        // Every count below is at most rows * 4H, which fits u32 (checked by the caller).
        let args = LstmStepArgs {
            xw: b.xw.into(),
            idx: b.idx.into(),
            // Not read at t = 0: pass xw there so that the pointer is valid.
            hw: b.hw.unwrap_or(b.xw).into(),
            acts: b.acts.into(),
            cs: b.cs.into(),
            h_next: b.next.into(),
            out: b.out.into(),
            dst: Ptr::At(&dst.ids, dst.first[s.bucket]),
            m: s.m as u32,
            h: s.h as u32,
            k: s.k as u32,
            t: s.t as u32,
            offset: s.offset as u32,
        };
        self.launch_args_1d(&args, (s.m * s.h) as u64)
    }

    fn step_backward(
        &self,
        s: Step,
        dst: &CudaDstIds,
        b: StepBackwardBuffers<CudaBuffer>,
    ) -> Result<()> {
        let args = LstmStepBackwardArgs {
            acts: b.acts.into(),
            cs: b.cs.into(),
            grad: b.grad.into(),
            dst: Ptr::At(&dst.ids, dst.first[s.bucket]),
            // Not read at t = k - 1: pass the output gradient there.
            dh: b.dh.unwrap_or(b.grad).into(),
            dc: b.dc.into(),
            dz: b.dz.into(),
            dxg: b.dxg.into(),
            m: s.m as u32,
            h: s.h as u32,
            k: s.k as u32,
            t: s.t as u32,
            offset: s.offset as u32,
        };
        self.launch_args_1d(&args, (s.m * s.h) as u64)
    }

    fn hprev(
        &self,
        (rows, h): (usize, usize),
        acts: &CudaBuffer,
        cs: &CudaBuffer,
        steps: &CudaBuffer,
        hp: &CudaBuffer,
    ) -> Result<()> {
        let args = LstmHprevArgs {
            acts: acts.into(),
            cs: cs.into(),
            steps: steps.into(),
            hprev: hp.into(),
            rows: rows as u32,
            h: h as u32,
        };
        self.launch_args_1d(&args, (rows * h) as u64)
    }
}
