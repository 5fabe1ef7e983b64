//! Trains GraphSAGE on Cora from Rust: `cargo run --release --example train_cora [DIR]`,
//! DIR being Cora in OGB's raw layout (default: the repository's `data/cora`).

use std::path::Path;
use std::sync::Arc;

use espalier::graph::{self, LoadOptions};
use espalier::train::{TrainConfig, Trainer};

fn main() {
    espalier::error::exit_on_error(run());
}

fn run() -> espalier::Result<()> {
    let default = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/cora");
    let dir = std::env::args()
        .nth(1)
        .unwrap_or(default.display().to_string());
    let data = graph::load(&dir, &LoadOptions::default())?;
    let graph = Arc::new(data.graph.symmetrize());
    let config = TrainConfig::default().epochs(50).fanouts(vec![25, 10]);
    let mut trainer = Trainer::new(&data, graph, config)?;
    let s = trainer.run(None, &mut |e| {
        let valid = e.valid_acc.unwrap_or(f64::NAN);
        println!("epoch {:>2}  loss {:.4}  valid {valid:.4}", e.epoch, e.loss);
    })?;
    let best = s.test_acc_at_best_valid.unwrap_or(f64::NAN);
    println!(
        "test accuracy {:.4}, {best:.4} at the best valid epoch",
        s.test_acc
    );
    let logits = trainer.predict(&data.split.test)?; // all neighbours, no dropout
    println!("test logits: {:?}", logits.shape());
    Ok(())
}
