//! Batched recording: dispatches, copies and clears go into one command encoder (dispatches
//! into one compute pass while nothing else intervenes), submitted only when the host needs
//! a result (a readback, [`Context::sync`]), when the parameter ring is full, or before an
//! upload into a buffer the recording may still read (see below).
//!
//! **Parameters.** Each dispatch's parameter words take the next slot of a persistent
//! uniform ring ([`PARAM_BYTES`] per slot, bound with a dynamic offset); the recording
//! stages them on the host and writes them with one `write_buffer` just before its submit,
//! which wgpu orders before the recording's commands and after earlier submissions.
//!
//! **Buffer reuse.** A freed buffer returns to the pool at once, even while a recorded
//! command may still use it: commands run in recording order, and wgpu puts a barrier
//! between a dispatch (or copy, or clear) and the next one that uses the buffer, so a later
//! kernel that takes the buffer from the pool writes it only after the earlier one is done
//! with it. Uploads are different: `write_buffer` is staged for the *start* of the next
//! submit, before the recording's commands. So while a recording is open, an upload is
//! recorded too, as a copy from a mapped staging belt (reused across submits); one larger
//! than a belt chunk goes through `write_buffer`, after submitting the recording first if
//! the target was freed during it (a recorded command may still read its old contents).
//!
//! **Errors.** Validation and out-of-memory error scopes wrap each submit (and each cache
//! miss that creates a wgpu object), not each dispatch; compute passes are labelled with
//! their entry point, so wgpu's report names the kernel.

use std::sync::atomic::Ordering;

use crate::device::wgpu::layout::PARAM_BYTES;
use crate::device::wgpu::state::{Recorder, RING_BYTES};
use crate::device::wgpu::Context;
use crate::error::{Error, Result};

/// Uploads up to this many bytes are recorded through the staging belt while a recording
/// is open (also the belt's chunk size).
const BELT_CHUNK: u64 = 4 << 20;

impl Context {
    fn recorder(&self) -> std::sync::MutexGuard<'_, Recorder> {
        self.recorder.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The ring slot stride: [`PARAM_BYTES`] rounded up to the adapter's uniform offset
    /// alignment.
    fn slot_bytes(&self) -> u64 {
        let align = (self.limits.min_uniform_buffer_offset_alignment as u64).max(16);
        PARAM_BYTES.div_ceil(align) * align
    }

    /// Records one dispatch of `pipeline` with bind group `bind`; `params` (at most
    /// [`PARAM_BYTES`] bytes) go to the next ring slot when the pipeline has a parameter
    /// block. Submits first when the ring is full.
    pub(super) fn record_dispatch(
        &self,
        label: &str,
        pipeline: &wgpu::ComputePipeline,
        bind: &wgpu::BindGroup,
        params: Option<&[u32]>,
        grid: (u32, u32, u32),
    ) -> Result<()> {
        let slot = self.slot_bytes();
        let mut r = self.recorder();
        if params.is_some() && r.params.len() as u64 + slot > RING_BYTES {
            self.submit_locked(&mut r)?;
        }
        let offset = r.params.len() as u32;
        if let Some(words) = params {
            let start = r.params.len();
            r.params.resize(start + slot as usize, 0);
            r.params[start..start + words.len() * 4].copy_from_slice(bytemuck::cast_slice(words));
        }
        if r.pass.is_none() {
            let enc = r.encoder(&self.device);
            let pass = enc
                .begin_compute_pass(&wgpu::ComputePassDescriptor {
                    label: Some(label),
                    timestamp_writes: None,
                })
                .forget_lifetime();
            r.pass = Some(pass);
        }
        let pass = r.pass.as_mut().expect("pass opened above");
        pass.set_pipeline(pipeline);
        match params {
            Some(_) => pass.set_bind_group(0, bind, &[offset]),
            None => pass.set_bind_group(0, bind, &[]),
        }
        pass.dispatch_workgroups(grid.0, grid.1, grid.2);
        Ok(())
    }

    /// Records a copy of `size` bytes between buffers.
    pub(super) fn record_copy(
        &self,
        src: &wgpu::Buffer,
        src_offset: u64,
        dst: &wgpu::Buffer,
        dst_offset: u64,
        size: u64,
    ) {
        let mut r = self.recorder();
        r.encoder(&self.device)
            .copy_buffer_to_buffer(src, src_offset, dst, dst_offset, size);
    }

    /// Records zeroing the whole of `buffer`.
    pub(super) fn record_clear(&self, buffer: &wgpu::Buffer) {
        let mut r = self.recorder();
        r.encoder(&self.device).clear_buffer(buffer, 0, None);
    }

    /// Returns a freed buffer to the pool, remembering it while a recording is open (see
    /// the module docs).
    pub(super) fn retire(&self, class: u64, buffer: wgpu::Buffer) {
        let mut r = self.recorder();
        if r.is_open() {
            r.freed.insert(buffer.clone());
        }
        drop(r);
        self.pool.put(class, buffer);
    }

    /// Uploads `bytes` (a multiple of 4) to the start of `target`, in order with the
    /// recorded work (see the module docs).
    pub(super) fn upload(&self, target: &wgpu::Buffer, bytes: &[u8]) -> Result<()> {
        let size = bytes.len() as u64;
        let Some(nonzero) = wgpu::BufferSize::new(size) else {
            return Ok(());
        };
        let mut r = self.recorder();
        if r.is_open() && size <= BELT_CHUNK {
            let Recorder {
                encoder,
                pass,
                belt,
                ..
            } = &mut *r;
            *pass = None;
            let encoder = encoder.as_mut().expect("an open recording has an encoder");
            let belt = belt.get_or_insert_with(|| {
                wgpu::util::StagingBelt::new(self.device.clone(), BELT_CHUNK)
            });
            belt.write_buffer(encoder, target, 0, nonzero)
                .copy_from_slice(bytes);
            return Ok(());
        }
        if r.freed.contains(target) {
            self.submit_locked(&mut r)?;
        }
        drop(r);
        self.checked("upload", || self.queue.write_buffer(target, 0, bytes))
    }

    /// Submits the open recording, if any (no host wait). Returns the submission index.
    pub fn submit(&self) -> Result<Option<wgpu::SubmissionIndex>> {
        let mut r = self.recorder();
        self.submit_locked(&mut r)
    }

    fn submit_locked(&self, r: &mut Recorder) -> Result<Option<wgpu::SubmissionIndex>> {
        r.pass = None;
        let Some(encoder) = r.encoder.take() else {
            return Ok(None);
        };
        let params = std::mem::take(&mut r.params);
        r.freed.clear();
        self.submits.fetch_add(1, Ordering::Relaxed);
        if let Some(belt) = &mut r.belt {
            belt.finish();
        }
        let index = self.checked("submit", || {
            if !params.is_empty() {
                self.queue.write_buffer(&self.ring, 0, &params);
            }
            self.queue.submit([encoder.finish()])
        });
        if let Some(belt) = &mut r.belt {
            // The chunks map again (for reuse) once this submission is done.
            belt.recall();
        }
        index.map(Some)
    }

    /// Submissions to the queue so far (see [`crate::Device::submits`]).
    pub fn submits(&self) -> u64 {
        self.submits.load(Ordering::Relaxed)
    }

    /// Submits the open recording and waits for `index` (or all work): a host wait.
    pub(super) fn wait(&self, index: Option<wgpu::SubmissionIndex>) -> Result<()> {
        self.host_waits.fetch_add(1, Ordering::Relaxed);
        self.device
            .poll(wgpu::PollType::Wait {
                submission_index: index,
                timeout: None,
            })
            .map(|_| ())
            .map_err(|e| Error::Backend {
                backend: "wgpu",
                msg: format!("poll: {e}"),
            })
    }
}
