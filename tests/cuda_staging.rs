//! Uploads through the CUDA backend's page-locked staging chunks arrive intact even when
//! the stream is busy: a staging chunk is overwritten only after the transfer that reads
//! it ran (see `src/device/cuda/staging.rs`). Before that, the wait for a chunk returned
//! at once on the backend's single stream, so an upload larger than the chunks, queued
//! behind long kernels, overwrote a chunk before its transfer ran. On the emulated CUDA
//! device, whose copies from page-locked memory read their source when the stream runs
//! them as DMA does, the first test fails when the ring hands out a chunk without waiting
//! for its transfer. Skipped, with the reason printed, without a CUDA device.

mod common;

use espalier::check::transfers;
use espalier::Device;

/// The CUDA device, or `None` after printing why the caller skips.
fn cuda() -> Option<Device> {
    common::cuda_device()
}

#[test]
fn a_large_upload_queued_behind_long_kernels_arrives_intact() {
    let Some(dev) = cuda() else { return };
    // On the emulated device the queue is made slow instead (every stream waits 20 ms
    // before each item), and the matmuls small: the host then fills the whole staging
    // ring long before the stream reaches the first transfer.
    let emu = common::emu::emulator();
    let _slow = emu.as_ref().map(|e| e.slow_device(20_000));
    let n = if emu.is_some() { 64 } else { 4096 };
    // 64 MiB and a ragged tail: sixteen 4 MiB chunks, twice the staging ring, so chunks
    // are reused while the matmuls still run; a second upload right behind the first
    // reuses every chunk again. `espalier check` runs the same.
    let words = (64 << 20) / 4 + 12_345;
    let r = transfers::upload_behind_kernels(dev, n, words).unwrap();
    assert!(r.error.is_none(), "{}", r.error.unwrap());
}

#[test]
fn uploads_of_every_size_around_the_chunk_arrive_intact() {
    let Some(dev) = cuda() else { return };
    let chunk = transfers::CHUNK_BYTES / 4;
    let sizes = [1, chunk - 1, chunk, chunk + 1, 3 * chunk, 9 * chunk + 7];
    if let Some(e) = transfers::uploads_of_sizes(dev, &sizes).unwrap() {
        panic!("{e}");
    }
}
