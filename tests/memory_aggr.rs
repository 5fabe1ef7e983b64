//! Bytes of one SAGE-LSTM layer, forward and backward, on a power-law block, measured with
//! the CPU memory tracker against the count predicted from the LSTM aggregator's saved
//! values: **5 f32 per (node, step, hidden unit)** (activated gates and cell state).
//! `cargo test --test memory_aggr -- --nocapture` prints the numbers quoted in
//! `docs/BENCHMARKS.md`. The CPU tracker is process-wide: this binary holds one test.

use std::sync::Arc;

use espalier::graph::{sample_blocks, synth::SynthSpec, Block};
use espalier::nn::{Aggregator, SageLayer};
use espalier::rng::Rng;
use espalier::{ops, Device, Tensor};

/// Values per (node, step, hidden unit) the LSTM aggregator keeps for backward.
const SAVED_PER_STEP_UNIT: usize = 5;

fn live() -> u64 {
    Device::Cpu.memory_stats().unwrap().live
}

#[test]
fn sage_lstm_layer_bytes_match_the_prediction() {
    // A power-law block: 2,000 seeds of the arxiv-like graph at 1/10 scale, fanout 25.
    let data = SynthSpec::parse("arxiv-like,scale=0.1")
        .unwrap()
        .generate()
        .unwrap();
    let seeds: Vec<u32> = data.split.train.iter().copied().take(2000).collect();
    let block: Arc<Block> = Arc::new(
        sample_blocks(&data.graph.symmetrize(), &seeds, &[25], 1)
            .unwrap()
            .remove(0),
    );
    let (s, d, e) = (block.num_src, block.num_dst, block.num_edges());
    let (f, o) = (64, 32);
    let mut rng = Rng::new(1);
    let layer = SageLayer::new(f, o, Aggregator::Lstm, &mut rng, Device::Cpu).unwrap();
    let h = Tensor::from_f32(
        (0..s * f).map(|_| rng.normal() as f32).collect(),
        &[s, f],
        Device::Cpu,
    )
    .unwrap();
    let w = Tensor::from_f32(vec![1.0; d * o], &[d, o], Device::Cpu).unwrap();

    let mem = Device::Cpu.memory().unwrap();
    let before = live();
    mem.reset_peak();
    let out = layer.forward(&block, &h).unwrap();
    let retained = live() - before;
    let loss = ops::sum_all(&ops::mul(&out, &w).unwrap()).unwrap();
    loss.backward().unwrap();
    let peak = mem.peak() - before;
    drop((out, loss));

    let b = |values: usize| (values * 4) as u64;
    // After forward: the aggregator's saved values, the gather index (u32 [E]), the layer's
    // own saved inputs (h_dst for fc_self, the aggregate for fc_neigh) and its output.
    let saved = b(SAVED_PER_STEP_UNIT * e * f);
    let predicted_retained = saved + b(e) + b(2 * d * f) + b(d * o);
    // Backward peak, inside the aggregator's backward, at its step t = 1 (the CPU runs step
    // t over the nodes of in-degree > t, all in one pack here: a pack holds up to a sixth
    // of the rows, 2,577, and there are 1,693 dst nodes): its saved values and x̄g (4 per
    // (node, step, unit)) live with the step's z̄ `[n_1, 4F]`, its h̄_{t-1} `[n_1, F]`,
    // the incoming h̄ `[n_2, F]`, a block of h_{t-1} `[min(n_1, 1024), F]` and W̄_hh
    // `[F, 4F]`; with the gather index, h_dst (still saved for fc_self), the aggregate's
    // gradient (which replaced the aggregate fc_neigh kept), the layer output and the
    // output gradient waiting for fc_self, W_neigh's and the bias's gradients, and the
    // backward seed.
    let n_t = |t: usize| (0..d).filter(|&v| block.degree(v) > t).count();
    let (n1, n2) = (n_t(1), n_t(2));
    let step = b((4 * n1 + n1 + n2 + n1.min(1024)) * f + f * 4 * f);
    let predicted_peak =
        saved + b(4 * e * f) + step + b(e) + b(2 * d * f) + b(2 * d * o) + b(f * o + o + 1);
    println!("power-law block: {s} src, {d} dst, {e} edges (max degree 25), F = {f}, out = {o}");
    println!("nodes running at steps 1 and 2: {n1}, {n2}");
    println!(
        "forward retained: measured {retained} B, predicted {predicted_retained} B \
         (of which aggregator saved {saved} B = {SAVED_PER_STEP_UNIT} x 4 B x {e} x {f})"
    );
    println!("forward+backward peak: measured {peak} B, predicted {predicted_peak} B");
    assert_eq!(retained, predicted_retained);
    // Which small gradients are live at the peak depends on the engine's node order; the
    // aggregator's terms dominate and must account for the rest within 1%.
    let ratio = peak as f64 / predicted_peak as f64;
    assert!(
        (0.99..1.01).contains(&ratio),
        "peak {peak} vs predicted {predicted_peak} (ratio {ratio:.4})"
    );
}
