//! Resuming and checkpointing: what a checkpoint holds beside the weights (the dataset's
//! identity, the configuration, the finished epochs' figures and what the run measured),
//! and the checks that refuse to resume on another dataset or another configuration.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::graph::Dataset;
use crate::train::checkpoint;

use super::{FinalFigures, SoFar, Trainer};

/// What identifies a dataset in a checkpoint: resuming on another is refused.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct DatasetId {
    name: String,
    nodes: usize,
    edges: usize,
    features: usize,
    classes: usize,
    train: usize,
}

impl DatasetId {
    fn of(d: &Dataset) -> DatasetId {
        DatasetId {
            name: d.name.clone(),
            nodes: d.num_nodes(),
            edges: d.graph.num_edges(),
            features: d.feat_dim,
            classes: d.num_classes,
            train: d.split.train.len(),
        }
    }
}

/// Configuration fields that may change when a run is resumed: they do not change what
/// the model computes (`epochs` is how a run is extended).
const RESUMABLE_CHANGES: &[&str] = &[
    "epochs",
    "device",
    "eval_every",
    "eval_batch_size",
    "patience",
    "on_nan",
    "profile",
    "feature_placement",
    "micro.micro_batches",
    "micro.partitioner",
    "micro.memory_budget",
    "full_graph.chunks",
    "full_graph.order",
    "full_graph.dedup",
    "full_graph.hybrid",
];

/// `value`'s leaves by dotted path.
fn flatten(prefix: &str, value: &serde_json::Value, out: &mut Vec<(String, String)>) {
    match value {
        serde_json::Value::Object(m) => {
            for (k, v) in m {
                let p = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&p, v, out);
            }
        }
        v => out.push((prefix.to_string(), v.to_string())),
    }
}

fn json<T: Serialize + ?Sized>(v: &T) -> Result<String> {
    serde_json::to_string(v).map_err(|e| Error::invalid(e.to_string()))
}

impl Trainer<'_> {
    /// Restores the model, the optimizer and the finished epochs' figures from a
    /// checkpoint. Refuses one written for another dataset or another configuration (all
    /// fields but those that do not change the trained weights: epochs, device, evaluation
    /// frequency and batch size, patience, on-nan and micro-batching), naming the fields
    /// that differ.
    pub fn resume(&mut self, path: &Path) -> Result<()> {
        let ck = checkpoint::open(path)?;
        let parse = |key: &str, e: serde_json::Error| {
            Error::parse(path, 0, format!("checkpoint metadata `{key}`: {e}"))
        };
        if let Some(stored) = ck.meta.get("dataset") {
            let stored: DatasetId =
                serde_json::from_str(stored).map_err(|e| parse("dataset", e))?;
            let here = DatasetId::of(self.state.data);
            if stored != here {
                return Err(Error::invalid(format!(
                    "{} was trained on another dataset: {} ({} nodes, {} edges, {} features, \
                     {} classes, {} training nodes) there, {} ({} nodes, {} edges, {} \
                     features, {} classes, {} training nodes) here",
                    path.display(),
                    stored.name,
                    stored.nodes,
                    stored.edges,
                    stored.features,
                    stored.classes,
                    stored.train,
                    here.name,
                    here.nodes,
                    here.edges,
                    here.features,
                    here.classes,
                    here.train
                )));
            }
        }
        if let Some(stored) = ck.meta.get("config") {
            let stored: serde_json::Value =
                serde_json::from_str(stored).map_err(|e| parse("config", e))?;
            let here = serde_json::to_value(&self.state.config).map_err(|e| parse("config", e))?;
            let (mut a, mut b) = (Vec::new(), Vec::new());
            flatten("", &stored, &mut a);
            flatten("", &here, &mut b);
            let stored: std::collections::HashMap<_, _> = a.into_iter().collect();
            let diffs: Vec<String> = b
                .iter()
                .filter(|(k, _)| !RESUMABLE_CHANGES.contains(&k.as_str()))
                // A field an older checkpoint lacks is not compared.
                .filter_map(|(k, v)| {
                    let s = stored.get(k)?;
                    (s != v).then(|| format!("{k} ({s} in the checkpoint, {v} now)"))
                })
                .collect();
            if !diffs.is_empty() {
                return Err(Error::invalid(format!(
                    "{} was written with another configuration: {}; resume with the same \
                     settings (only epochs, device, evaluation, patience, on-nan and \
                     micro-batching may change)",
                    path.display(),
                    diffs.join(", ")
                )));
            }
        }
        ck.restore(&self.state.model, self.state.optim.as_mut())?;
        self.resume_warning = ck.unverified.clone();
        self.state.start_epoch = ck.epoch;
        self.history = match ck.meta.get("history") {
            Some(h) => serde_json::from_str(h).map_err(|e| parse("history", e))?,
            None => Vec::new(),
        };
        self.stored_final = match ck.meta.get("final") {
            Some(f) => Some(serde_json::from_str(f).map_err(|e| parse("final", e))?),
            None => None,
        };
        // Absent from checkpoints written before it was kept: the run then counts from here.
        self.earlier = match ck.meta.get("so_far") {
            Some(f) => serde_json::from_str(f).map_err(|e| parse("so_far", e))?,
            None => SoFar::default(),
        };
        Ok(())
    }

    /// What the run has measured over all its processes, this one to its last epoch.
    pub(super) fn so_far(&self) -> SoFar {
        self.state.fold_peak();
        let mut micro_batches = self.earlier.micro_batches.clone();
        micro_batches.extend(self.micro_log.iter().cloned());
        SoFar {
            train_seconds: self.earlier.train_seconds + self.seconds_here,
            peak_bytes: self.earlier.peak_bytes.max(self.state.peak_seen.get()),
            micro_batches,
        }
    }

    /// Writes a checkpoint after `epochs_done` epochs, with the configuration, the
    /// dataset's identity and the figures of the epochs in [`Trainer::history`].
    pub fn save(&self, path: &Path, epochs_done: usize) -> Result<()> {
        self.save_with(path, epochs_done, None)
    }

    pub(super) fn save_with(
        &self,
        path: &Path,
        epochs_done: usize,
        fin: Option<&FinalFigures>,
    ) -> Result<()> {
        let mut extra = vec![
            ("dataset", json(&DatasetId::of(self.state.data))?),
            ("history", json(&self.history)?),
            ("so_far", json(&self.so_far())?),
        ];
        if let Some(f) = fin {
            extra.push(("final", json(f)?));
        }
        checkpoint::save(
            path,
            &self.state.model,
            self.state.optim.as_ref(),
            epochs_done,
            &json(&self.state.config)?,
            &extra,
        )
    }
}
