//! `espalier.train`, `espalier.load` and the `Run` they return.
//!
//! Training runs on a worker thread while the calling thread waits with the GIL released,
//! taking it back every 50 ms to let Python handle signals: Ctrl-C (SIGINT, or
//! `_thread.interrupt_main`) raises `KeyboardInterrupt` in the caller once the trainer has
//! stopped after its current batch, as the command line's stop flag does. `on_epoch` and the
//! log lines run on the worker with the GIL taken for the call.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use self_cell::self_cell;

use espalier::graph::{self, Csr};
use espalier::train::{EpochStats, Summary, TrainConfig, Trainer};
use espalier_cli::common::CommonArgs;
use espalier_cli::train::{epoch_line, TrainArgs};

use crate::dataset::Dataset;
use crate::errors::IntoPy;
use crate::numpy::{asarray, hold, new_array};
use crate::{flags, log};

self_cell!(
    /// A trainer with the dataset it borrows.
    struct Trained {
        owner: Arc<graph::Dataset>,
        #[not_covariant]
        dependent: Trainer,
    }
);

/// How long the waiting thread sleeps between two looks at Python's signals.
const SIGNAL_POLL: Duration = Duration::from_millis(50);

/// What the worker needs to build the trainer.
struct Build {
    graph: Arc<Csr>,
    config: TrainConfig,
    common: CommonArgs,
    /// A checkpoint to restore; then nothing is trained (`espalier.load`).
    restore: Option<PathBuf>,
}

/// A finished training run: its figures (the command line's `--json`), and the trained
/// model for predictions and embeddings.
#[pyclass(module = "espalier", frozen)]
pub struct Run {
    trained: Mutex<Trained>,
    summary: Py<PyDict>,
}

/// The JSON of `value` as Python objects (the same dicts and lists `json.load` gives for
/// the command line's `--json`).
fn to_python<'py>(py: Python<'py>, value: &impl serde::Serialize) -> PyResult<Bound<'py, PyAny>> {
    let text = serde_json::to_string(value).map_err(|e| PyValueError::new_err(e.to_string()))?;
    py.import("json")?.call_method1("loads", (text,))
}

/// Builds the trainer on a worker thread, trains it (or restores it), and waits for it with
/// the GIL released, handling signals.
fn start(
    py: Python<'_>,
    data: Arc<graph::Dataset>,
    build: Build,
    on_epoch: Option<Py<PyAny>>,
) -> PyResult<Run> {
    let stop = Arc::new(AtomicBool::new(false));
    let failed: Arc<Mutex<Option<PyErr>>> = Arc::new(Mutex::new(None));
    let done = Arc::new((Mutex::new(false), Condvar::new()));
    let worker = {
        let (stop, failed, done) = (stop.clone(), failed.clone(), done.clone());
        std::thread::spawn(move || {
            let out = work(data, build, on_epoch, stop, failed);
            if let Ok(mut d) = done.0.lock() {
                *d = true;
            }
            done.1.notify_all();
            out
        })
    };
    let mut interrupt: Option<PyErr> = None;
    loop {
        let finished = py.detach(|| {
            let (lock, cvar) = &*done;
            let d = lock.lock().unwrap_or_else(|e| e.into_inner());
            let (d, _) = cvar
                .wait_timeout_while(d, SIGNAL_POLL, |d| !*d)
                .unwrap_or_else(|e| e.into_inner());
            *d || worker.is_finished()
        });
        if finished {
            break;
        }
        if interrupt.is_none() {
            if let Err(e) = py.check_signals() {
                // Stop after the current batch, as the command line's Ctrl-C handler does.
                stop.store(true, Ordering::SeqCst);
                interrupt = Some(e);
            }
        }
    }
    let out = worker.join().map_err(|p| {
        let why = p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        PyRuntimeError::new_err(format!("espalier's training thread panicked: {why}"))
    })?;
    let callback_error = failed.lock().ok().and_then(|mut f| f.take());
    let made = out.py().and_then(|(trained, summary)| {
        Ok(Run {
            trained: Mutex::new(trained),
            summary: to_python(py, &summary)?.cast_into::<PyDict>()?.unbind(),
        })
    });
    if let Some(e) = interrupt.or(callback_error) {
        // The finished epochs stay reachable from the exception.
        if let Ok(run) = made {
            let _ = e.value(py).setattr("run", Bound::new(py, run)?);
        }
        return Err(e);
    }
    made
}

/// The worker: builds the trainer and trains (or restores) it.
fn work(
    data: Arc<graph::Dataset>,
    build: Build,
    on_epoch: Option<Py<PyAny>>,
    stop: Arc<AtomicBool>,
    failed: Arc<Mutex<Option<PyErr>>>,
) -> espalier::Result<(Trained, Summary)> {
    let Build {
        graph,
        config,
        common,
        restore,
    } = build;
    let mut trained = Trained::try_new(data, |d| {
        let mut t = common.trainer(d, graph, config)?;
        if let Some(path) = &restore {
            t.resume(path)?;
            // Nothing more to train: the run reports what the checkpoint holds.
            t.state.config.epochs = t.state.start_epoch;
        }
        Ok::<_, espalier::Error>(t)
    })?;
    let summary = trained.with_dependent_mut(|_, t| {
        t.set_stop_flag(stop.clone());
        let total = t.state.config.epochs;
        let summary = t.run(None, &mut |e: &EpochStats| {
            let result = Python::attach(|py| -> PyResult<()> {
                log::info(py, &epoch_line(e, total))?;
                if let Some(f) = &on_epoch {
                    f.call1(py, (to_python(py, e)?,))?;
                }
                Ok(())
            });
            if let Err(err) = result {
                // Stop after this epoch and raise the callback's exception in the caller.
                if let Ok(mut slot) = failed.lock() {
                    slot.get_or_insert(err);
                }
                stop.store(true, Ordering::SeqCst);
            }
        });
        // The run is kept: its budget must not outlive the call (see `infer`).
        t.state.release_budget();
        summary
    })?;
    Ok((trained, summary))
}

/// `on_epoch` checked callable.
fn callback(on_epoch: Option<Bound<'_, PyAny>>) -> PyResult<Option<Py<PyAny>>> {
    match on_epoch.filter(|f| !f.is_none()) {
        None => Ok(None),
        Some(f) if f.is_callable() => Ok(Some(f.unbind())),
        Some(_) => Err(PyTypeError::new_err(
            "on_epoch: expected a callable taking one epoch's dict",
        )),
    }
}

/// The flags of `kwargs`, checked, and the trainer's inputs on `dataset`.
fn prepare(
    py: Python<'_>,
    dataset: &Dataset,
    kwargs: Option<&Bound<'_, PyDict>>,
    restore: Option<PathBuf>,
) -> PyResult<Build> {
    let a: TrainArgs = flags::parse("train", kwargs, &[])?;
    a.check().py()?;
    a.common.check().py()?;
    let graph = dataset.graph(py, &a.common)?;
    let config = a.config(&dataset.data).py()?;
    Ok(Build {
        graph,
        config,
        common: a.common,
        restore,
    })
}

/// Trains a model on `dataset` as `espalier train` does with the same flags: every keyword
/// argument is the command-line flag of that name (`micro_batches=8` is `--micro-batches
/// 8`), with the same defaults, checks and messages, and the same seed gives the same
/// losses. `on_epoch(epoch)` is called after each epoch with the epoch's dict (an entry of
/// the JSON's `epochs`). The GIL is released while training; Ctrl-C raises
/// `KeyboardInterrupt` after the current batch (its `run` attribute holds the finished
/// epochs). `memory_budget` is set on the device for the call (and for the run's
/// predictions): a device has one budget per process, so budgeted runs train one at a
/// time. Returns the `Run`.
#[pyfunction]
#[pyo3(signature = (dataset, *, on_epoch=None, **kwargs))]
pub fn train(
    py: Python<'_>,
    dataset: &Bound<'_, Dataset>,
    on_epoch: Option<Bound<'_, PyAny>>,
    kwargs: Option<&Bound<'_, PyDict>>,
) -> PyResult<Run> {
    let on_epoch = callback(on_epoch)?;
    let ds = dataset.get();
    let build = prepare(py, ds, kwargs, None)?;
    start(py, ds.data.clone(), build, on_epoch)
}

/// Loads a checkpoint written by `Run.save` (or `espalier train --checkpoint`) for
/// `dataset`: the keyword arguments are those the run was trained with (as `--resume`
/// wants the same flags; `epochs` does not matter), and a checkpoint of another dataset or
/// configuration is refused, naming what differs. Returns the `Run`, with the checkpoint's
/// epochs as its history; nothing is trained.
#[pyfunction]
#[pyo3(signature = (path, dataset, **kwargs))]
pub fn load(
    py: Python<'_>,
    path: PathBuf,
    dataset: &Bound<'_, Dataset>,
    kwargs: Option<&Bound<'_, PyDict>>,
) -> PyResult<Run> {
    let ds = dataset.get();
    let build = prepare(py, ds, kwargs, Some(path))?;
    start(py, ds.data.clone(), build, None)
}

impl Run {
    fn get<'py>(&self, py: Python<'py>, key: &str) -> PyResult<Bound<'py, PyAny>> {
        Ok(self
            .summary
            .bind(py)
            .get_item(key)?
            .unwrap_or_else(|| py.None().into_bound(py)))
    }

    /// `nodes` (None: every node) as node ids of the trained dataset.
    fn nodes(&self, py: Python<'_>, nodes: Option<Bound<'_, PyAny>>) -> PyResult<Vec<u32>> {
        let trained = self.trained.lock().map_err(poisoned)?;
        let n = trained.borrow_owner().num_nodes();
        drop(trained);
        let Some(nodes) = nodes.filter(|v| !v.is_none()) else {
            return Ok((0..n as u32).collect());
        };
        node_ids(py, "nodes", &nodes, n)
    }

    /// Runs `f` on the trainer with the GIL released, under the run's memory budget (set on
    /// the device for the call alone: the device has one budget per process, and runs kept
    /// alive must not impose theirs on later ones); its tensor comes back as an array.
    fn infer<'py>(
        &self,
        py: Python<'py>,
        nodes: Option<Bound<'py, PyAny>>,
        f: fn(&Trainer<'_>, &[u32]) -> espalier::Result<espalier::Tensor>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let ids = self.nodes(py, nodes)?;
        let (values, shape) = py
            .detach(|| {
                let mut trained = self.trained.lock().map_err(|_| poisoned_error())?;
                trained.with_dependent_mut(|_, t| {
                    t.state.hold_budget()?;
                    let out = f(t, &ids);
                    t.state.release_budget();
                    let out = out?;
                    Ok::<_, espalier::Error>((out.to_vec_f32()?, out.shape().to_vec()))
                })
            })
            .py()?;
        new_array(py, &values, &shape, "float32")
    }
}

fn poisoned_error() -> espalier::Error {
    espalier::Error::invalid("the run is unusable: a call on it panicked")
}

fn poisoned<T>(_: T) -> PyErr {
    PyRuntimeError::new_err(poisoned_error().to_string())
}

/// `obj` as distinct-or-not node ids below `n` (`name` in errors).
pub fn node_ids(
    py: Python<'_>,
    name: &str,
    obj: &Bound<'_, PyAny>,
    n: usize,
) -> PyResult<Vec<u32>> {
    let a = asarray(py, name, obj)?;
    let k = crate::numpy::kind(&a)?;
    if !"iu".contains(k) {
        return Err(PyValueError::new_err(format!(
            "{name}: expected integer node ids, got dtype {}",
            a.getattr("dtype")?.str()?
        )));
    }
    let held = hold(py, &a.call_method0("ravel")?, "int64")?;
    let v = held.values::<i64>();
    if let Some(i) = v.iter().position(|&x| x < 0 || x as u64 >= n as u64) {
        return Err(PyValueError::new_err(format!(
            "{name}[{i}]: node id {} out of range for {n} nodes",
            v[i]
        )));
    }
    Ok(v.iter().map(|&x| x as u32).collect())
}

#[pymethods]
impl Run {
    /// The whole summary, as `espalier train --json` writes it (dataset, config, epochs,
    /// accuracies, micro-batch statistics, peak bytes...).
    #[getter]
    fn summary<'py>(&self, py: Python<'py>) -> Bound<'py, PyDict> {
        self.summary.bind(py).clone()
    }

    /// One dict per finished epoch (the JSON's `epochs`): `epoch`, `loss`, `train_acc`,
    /// `valid_acc`, `seconds`, `micro_batches`, per-phase times...
    #[getter]
    fn history<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.get(py, "epochs")
    }

    /// Test accuracy after the last epoch.
    #[getter]
    fn test_acc<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.get(py, "test_acc")
    }

    /// Validation accuracy after the last epoch.
    #[getter]
    fn valid_acc<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.get(py, "valid_acc")
    }

    /// The best validation accuracy of the run (None without an evaluation).
    #[getter]
    fn best_valid<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.get(py, "best_valid_acc")
    }

    /// The epoch of the best validation accuracy.
    #[getter]
    fn best_valid_epoch<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.get(py, "best_valid_epoch")
    }

    /// Test accuracy at the best validation epoch (the OGB rule).
    #[getter]
    fn test_acc_at_best_valid<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.get(py, "test_acc_at_best_valid")
    }

    /// The last epoch's loss.
    #[getter]
    fn final_loss<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.get(py, "final_loss")
    }

    /// Peak bytes on the training device. The device's memory tracker is the process's:
    /// the models of other runs still alive in it count too.
    #[getter]
    fn peak_bytes<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.get(py, "peak_bytes")
    }

    /// Logits of `nodes` (all nodes when None), `[len(nodes), num_classes]` float32, from
    /// full-neighbour inference (every neighbour, no dropout).
    #[pyo3(signature = (nodes=None))]
    fn predict<'py>(
        &self,
        py: Python<'py>,
        nodes: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.infer(py, nodes, |t, ids| t.predict(ids))
    }

    /// Embeddings of `nodes` (all nodes when None): the last hidden layer's output,
    /// `[len(nodes), hidden]` float32, from full-neighbour inference. Needs at least two
    /// layers; not for GAT.
    #[pyo3(signature = (nodes=None))]
    fn embeddings<'py>(
        &self,
        py: Python<'py>,
        nodes: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.infer(py, nodes, |t, ids| t.embeddings(ids))
    }

    /// Writes the run's checkpoint (safetensors, what `espalier train --checkpoint` writes:
    /// parameters, optimizer state, configuration, dataset identity and history), atomically.
    fn save(&self, py: Python<'_>, path: PathBuf) -> PyResult<()> {
        py.detach(|| {
            let trained = self.trained.lock().map_err(|_| poisoned_error())?;
            trained.with_dependent(|_, t| {
                let done = t.history.last().map_or(t.state.start_epoch, |e| e.epoch);
                t.save(&path, done)
            })
        })
        .py()
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let epochs = self.get(py, "epochs")?.cast_into::<PyList>()?.len();
        Ok(format!(
            "Run(dataset={}, epochs={epochs}, final_loss={}, test_acc={}, peak_bytes={})",
            self.get(py, "dataset")?.repr()?,
            self.get(py, "final_loss")?.repr()?,
            self.get(py, "test_acc")?.repr()?,
            self.get(py, "peak_bytes")?.repr()?
        ))
    }
}
