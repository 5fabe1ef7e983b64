//! What the JSON files hold, read into the series each panel draws: a training run's loss
//! and accuracy curves, the peak memory of a batch's micro-batches (or of a full-graph
//! run's chunks), and a benchmark's phase times. Each file's kind is read from its keys.

use std::path::Path;

use serde_json::Value;

use espalier::error::{Error, Result};

/// Loss and accuracy of one training run, per epoch.
#[derive(Debug)]
pub(super) struct Curve {
    pub(super) label: String,
    pub(super) loss: Vec<f64>,
    pub(super) train_acc: Vec<f64>,
    /// `(epoch, accuracy)` where the run evaluated.
    pub(super) valid_acc: Vec<(usize, f64)>,
}

/// One micro-batch's peak device bytes.
#[derive(Debug)]
pub(super) struct Bar {
    pub(super) measured: Option<f64>,
    pub(super) estimated: f64,
}

/// The micro-batches of one batch of a run, against its budget.
#[derive(Debug)]
pub(super) struct Peaks {
    pub(super) label: String,
    /// Which batch: `epoch 3, batch 0, K 8`.
    pub(super) which: String,
    pub(super) budget: Option<f64>,
    pub(super) bars: Vec<Bar>,
}

/// The phases of `espalier bench`, in the order an epoch runs them.
pub(super) const PHASES: [&str; 7] = [
    "sample",
    "partition",
    "slice",
    "gather",
    "forward",
    "backward",
    "optimizer",
];

/// Median seconds per phase of one benchmark run.
#[derive(Debug)]
pub(super) struct PhaseRun {
    pub(super) label: String,
    pub(super) seconds: [f64; 7],
}

/// Everything the inputs hold, by panel.
#[derive(Debug, Default)]
pub(super) struct Plots {
    pub(super) curves: Vec<Curve>,
    pub(super) peaks: Vec<Peaks>,
    pub(super) phases: Vec<PhaseRun>,
}

/// A malformed file: the error names it.
fn bad(path: &Path, msg: impl Into<String>) -> Error {
    Error::parse(path, 0, msg)
}

fn num(v: &Value, key: &str, path: &Path) -> Result<f64> {
    v.get(key)
        .and_then(Value::as_f64)
        .ok_or_else(|| bad(path, format!("`{key}` is missing or not a number")))
}

fn array<'a>(v: &'a Value, key: &str, path: &Path) -> Result<&'a Vec<Value>> {
    v.get(key)
        .and_then(Value::as_array)
        .ok_or_else(|| bad(path, format!("`{key}` is missing or not a list")))
}

/// The memory budget of a run's `config` (`null` or absent: none).
fn budget(v: &Value) -> Option<f64> {
    v.get("config")?
        .get("micro")?
        .get("memory_budget")?
        .as_f64()
}

fn parse_curve(v: &Value, label: &str, path: &Path) -> Result<Curve> {
    let epochs = array(v, "epochs", path)?;
    if epochs.is_empty() {
        return Err(bad(path, "`epochs` is empty: nothing to plot"));
    }
    let mut c = Curve {
        label: label.to_string(),
        loss: Vec::new(),
        train_acc: Vec::new(),
        valid_acc: Vec::new(),
    };
    for (i, e) in epochs.iter().enumerate() {
        c.loss.push(num(e, "loss", path)?);
        c.train_acc.push(num(e, "train_acc", path)?);
        if let Some(a) = e.get("valid_acc").and_then(Value::as_f64) {
            c.valid_acc.push((i + 1, a));
        }
    }
    Ok(c)
}

/// The bars of list `key` of `v`: each entry's `est_peak_bytes` and `peak_bytes` (absent
/// when it did not run).
fn bars(v: &Value, key: &str, path: &Path) -> Result<Vec<Bar>> {
    array(v, key, path)?
        .iter()
        .map(|m| {
            Ok(Bar {
                measured: m.get("peak_bytes").and_then(Value::as_f64),
                estimated: num(m, "est_peak_bytes", path)?,
            })
        })
        .collect()
}

/// Per partitioner in `micro_batches` (one for a training run, every one for `partition
/// --compare`), its last batch (the steady state of a budget search), in the order the
/// partitioners first appear.
fn parse_peaks(v: &Value, label: &str, path: &Path) -> Result<Vec<Peaks>> {
    let batches = array(v, "micro_batches", path)?;
    let partitioner = |b: &Value| {
        b.get("partitioner")
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    let mut last: Vec<(Option<String>, &Value)> = Vec::new();
    for b in batches {
        let name = partitioner(b);
        match last.iter_mut().find(|(n, _)| *n == name) {
            Some(slot) => slot.1 = b,
            None => last.push((name, b)),
        }
    }
    let mut out = Vec::new();
    for (name, b) in last {
        let bars = bars(b, "batches", path)?;
        if bars.is_empty() {
            continue;
        }
        out.push(Peaks {
            label: label.to_string(),
            // `epoch` is 1-based in the JSON, as on the console; `batch` an index.
            which: format!(
                "epoch {}, batch {}, K {}{}",
                num(b, "epoch", path)? as u64,
                num(b, "batch", path)? as u64 + 1,
                bars.len(),
                name.map_or(String::new(), |p| format!(", {p}"))
            ),
            budget: budget(v),
            bars,
        });
    }
    Ok(out)
}

/// The chunks of a full-graph run's last epoch (`epochs[].full_graph.chunk_runs`), every
/// chunk as it ran (layer, pass), if the run trained the full graph.
fn parse_chunks(v: &Value, label: &str, path: &Path) -> Result<Option<Peaks>> {
    let Some(last) = array(v, "epochs", path)?
        .iter()
        .rev()
        .find(|e| e.get("full_graph").is_some_and(|f| !f.is_null()))
    else {
        return Ok(None);
    };
    let fg = &last["full_graph"];
    let bars = bars(fg, "chunk_runs", path)?;
    if bars.is_empty() {
        return Ok(None);
    }
    Ok(Some(Peaks {
        label: label.to_string(),
        which: format!(
            "epoch {}, full graph, {} chunks per layer, {} chunk runs",
            num(last, "epoch", path)? as u64,
            num(fg, "chunks", path)? as u64,
            bars.len()
        ),
        budget: budget(v),
        bars,
    }))
}

fn parse_bench(v: &Value, label: &str, path: &Path) -> Result<Vec<PhaseRun>> {
    let runs = array(v, "runs", path)?;
    if runs.is_empty() {
        return Err(bad(path, "`runs` is empty: nothing to plot"));
    }
    runs.iter()
        .map(|r| {
            let p = r
                .get("phase_median_s")
                .ok_or_else(|| bad(path, "a run has no `phase_median_s`"))?;
            let mut seconds = [0.0; 7];
            for (s, name) in seconds.iter_mut().zip(PHASES) {
                *s = num(p, name, path)?;
            }
            let label = match (runs.len(), r.get("k").and_then(Value::as_u64)) {
                (n, Some(k)) if n > 1 => format!("{label} K={k}"),
                _ => label.to_string(),
            };
            Ok(PhaseRun { label, seconds })
        })
        .collect()
}

/// Reads one file into `plots`, detecting its kind.
pub(super) fn read_into(plots: &mut Plots, path: &Path, label: &str) -> Result<()> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    let v: Value = serde_json::from_str(&text)
        .map_err(|e| Error::parse(path, e.line() as u64, format!("not valid JSON: {e}")))?;
    let has = |k: &str| v.get(k).is_some();
    if has("runs") {
        plots.phases.extend(parse_bench(&v, label, path)?);
    } else if has("epochs") {
        plots.curves.push(parse_curve(&v, label, path)?);
        if has("micro_batches") {
            plots.peaks.extend(parse_peaks(&v, label, path)?);
        }
        plots.peaks.extend(parse_chunks(&v, label, path)?);
    } else if has("micro_batches") {
        let peaks = parse_peaks(&v, label, path)?;
        if peaks.is_empty() {
            return Err(bad(
                path,
                "`micro_batches` holds no micro-batch: nothing to plot",
            ));
        }
        plots.peaks.extend(peaks);
    } else {
        return Err(bad(
            path,
            "not an espalier JSON: expected `epochs` (train --json), `micro_batches` \
             (partition --json) or `runs` (bench --json)",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(text: &str) -> Value {
        serde_json::from_str(text).unwrap()
    }

    /// One batch's entry of `micro_batches`: its epoch, batch, partitioner and bars.
    fn batch(epoch: u64, b: u64, partitioner: &str, peaks: &[u64]) -> String {
        let bars: Vec<String> = peaks
            .iter()
            .map(|p| format!(r#"{{"est_peak_bytes": {p}, "peak_bytes": {p}}}"#))
            .collect();
        format!(
            r#"{{"epoch": {epoch}, "batch": {b}, "partitioner": "{partitioner}", "batches": [{}]}}"#,
            bars.join(",")
        )
    }

    #[test]
    fn a_partition_compare_json_gives_every_partitioner_its_last_batch() {
        let path = Path::new("cmp.json");
        let entries: Vec<String> = ["random", "metis", "betty"]
            .iter()
            .flat_map(|p| [batch(1, 0, p, &[5, 6]), batch(2, 0, p, &[7, 8, 9])])
            .collect();
        let v = value(&format!(r#"{{"micro_batches": [{}]}}"#, entries.join(",")));
        let peaks = parse_peaks(&v, "cmp", path).unwrap();
        let which: Vec<&str> = peaks.iter().map(|p| p.which.as_str()).collect();
        assert_eq!(
            which,
            [
                "epoch 2, batch 1, K 3, random",
                "epoch 2, batch 1, K 3, metis",
                "epoch 2, batch 1, K 3, betty"
            ]
        );
    }

    #[test]
    fn a_full_graph_run_gets_its_chunks_peaks() {
        let chunk = |layer: u64, pass: &str, c: u64| {
            format!(
                r#"{{"layer": {layer}, "pass": "{pass}", "chunk": {c}, "est_peak_bytes": 100, "peak_bytes": 90}}"#
            )
        };
        let runs = [
            chunk(0, "forward", 0),
            chunk(0, "forward", 1),
            chunk(1, "loss", 0),
        ];
        let epoch = |e: u64| {
            format!(
                r#"{{"epoch": {e}, "loss": 1.0, "train_acc": 0.5, "full_graph": {{"chunks": 2, "chunk_runs": [{}]}}}}"#,
                runs.join(",")
            )
        };
        let v = value(&format!(
            r#"{{"epochs": [{}, {}], "micro_batches": []}}"#,
            epoch(1),
            epoch(2)
        ));
        let p = parse_chunks(&v, "fg", Path::new("fg.json"))
            .unwrap()
            .expect("a chunk panel");
        assert_eq!(p.bars.len(), 3);
        assert_eq!(
            p.which,
            "epoch 2, full graph, 2 chunks per layer, 3 chunk runs"
        );
        assert!(parse_peaks(&v, "fg", Path::new("fg.json"))
            .unwrap()
            .is_empty());
    }
}
