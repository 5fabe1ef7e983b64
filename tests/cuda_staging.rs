//! Uploads through the CUDA backend's page-locked staging chunks arrive intact even when
//! the stream is busy: a staging chunk is overwritten only after the transfer that reads
//! it ran (see `src/device/cuda/staging.rs`). Before that, the wait for a chunk returned
//! at once on the backend's single stream, so an upload larger than the chunks, queued
//! behind long kernels, overwrote a chunk before its transfer ran. On the emulated CUDA
//! device, whose copies from page-locked memory read their source when the stream runs
//! them as DMA does, the first test fails when the ring hands out a chunk without waiting
//! for its transfer. Skipped, with the reason printed, without a CUDA device.

mod common;

use espalier::{ops, Device, Tensor};

/// The CUDA device, or `None` after printing why the caller skips.
fn cuda() -> Option<Device> {
    common::cuda_device()
}

/// A pattern whose every 4-byte word differs from its neighbours and from every other
/// chunk's words.
fn pattern(words: usize, salt: u32) -> Vec<u32> {
    (0..words as u32)
        .map(|i| i.wrapping_mul(2_654_435_761) ^ salt)
        .collect()
}

/// Asserts two word vectors are equal, naming the first difference and its chunk.
fn assert_words(what: &str, want: &[u32], got: &[u32]) {
    assert_eq!(want.len(), got.len(), "{what}: lengths differ");
    if let Some(i) = want.iter().zip(got).position(|(a, b)| a != b) {
        let wrong = want.iter().zip(got).filter(|(a, b)| a != b).count();
        panic!(
            "{what}: word {i} (byte {}, in 4 MiB chunk {}) is {:#x}, expected {:#x}; \
             {wrong} of {} words differ",
            i * 4,
            (i * 4) >> 22,
            got[i],
            want[i],
            want.len()
        );
    }
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
    let a = Tensor::from_f32(vec![1.0 / n as f32; n * n], &[n, n], dev).unwrap();
    let b = Tensor::from_f32(vec![1.0; n * n], &[n, n], dev).unwrap();
    dev.sync().unwrap();
    // Queue tens of milliseconds of 4096³ matmuls; nothing waits for them. Every entry of
    // `b` is 1 and of `a` 1/n, so every product `c·a` is all ones again.
    let mut c = b.clone();
    for _ in 0..16 {
        c = ops::matmul(&c, &a, false, false).unwrap();
    }
    // 64 MiB and a ragged tail: sixteen 4 MiB chunks, twice the staging ring, so chunks
    // are reused while the matmuls still run.
    let words = (64 << 20) / 4 + 12_345;
    let want = pattern(words, 0x5eed_0001);
    let up = Tensor::from_u32(want.clone(), &[words], dev).unwrap();
    // A second upload right behind the first reuses every chunk again.
    let want2 = pattern(words, 0x5eed_0002);
    let up2 = Tensor::from_u32(want2.clone(), &[words], dev).unwrap();
    assert_words("first upload", &want, &up.to_vec_u32().unwrap());
    assert_words("second upload", &want2, &up2.to_vec_u32().unwrap());
    // The matmuls ran on the data uploaded before them.
    let out = c.to_vec_f32().unwrap();
    assert!(out.iter().all(|v| (v - 1.0).abs() < 1e-3), "{}", out[0]);
}

#[test]
fn uploads_of_every_size_around_the_chunk_arrive_intact() {
    let Some(dev) = cuda() else { return };
    let chunk = (4 << 20) / 4;
    for words in [1, chunk - 1, chunk, chunk + 1, 3 * chunk, 9 * chunk + 7] {
        let want = pattern(words, words as u32);
        let t = Tensor::from_u32(want.clone(), &[words], dev).unwrap();
        assert_words(&format!("{words} words"), &want, &t.to_vec_u32().unwrap());
    }
}
