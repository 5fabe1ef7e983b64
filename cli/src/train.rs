//! `espalier train`: train a GNN and report loss, accuracy, time per phase and memory.
//!
//! Standard output carries the result only: the final line, or with `--json -` the JSON
//! alone; everything else goes to standard error, as much as the log level asks
//! ([`crate::log`]). Ctrl-C (or SIGTERM) stops after the current batch, writes the
//! partial JSON (`"interrupted": true`) and exits with code 130; a second one quits at once,
//! after writing the JSON of the epochs finished so far.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};

use espalier::bytes::format_bytes;
use espalier::dist::Collective;
use espalier::error::{Error, Result};
use espalier::graph::{Csr, Dataset};
use espalier::train::{
    Dedup, EpochStats, FullGraphConfig, LrSchedule, NodeOrder, OnNan, Summary, TrainConfig, Trainer,
};

use crate::common::{check_json_path, write_json, CommonArgs, TrainOnly};
use crate::log::{self, Level};

/// The exit code of a run stopped by a signal (128 + SIGINT), as shells report it.
pub const INTERRUPTED_EXIT: i32 = 130;

/// Flags of `espalier train`. Defaults follow the PyTorch Geometric reference script
/// (`pyg_peer.py`, which `scripts/compare_pyg.sh` runs beside espalier).
#[derive(Parser, Debug, Clone)]
#[command(name = "train")]
pub struct TrainArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Training epochs (with --resume: the run's total, so a larger number extends it).
    #[arg(long, default_value_t = 50, allow_negative_numbers = true)]
    pub epochs: usize,
    /// Learning rate (the initial one under --lr-schedule).
    #[arg(long, default_value_t = 0.01, allow_negative_numbers = true)]
    pub lr: f64,
    /// Learning-rate schedule, stepped per epoch: none, step (times --lr-gamma every
    /// --lr-step-size epochs, as torch's StepLR) or cosine (to 0 over the epochs, as
    /// CosineAnnealingLR with T_max = epochs).
    #[arg(long, default_value = "none")]
    pub lr_schedule: String,
    /// `--lr-schedule step`: epochs between two decays.
    #[arg(long)]
    pub lr_step_size: Option<usize>,
    /// `--lr-schedule step`: the factor of each decay.
    #[arg(long, default_value_t = 0.1, allow_negative_numbers = true)]
    pub lr_gamma: f64,
    /// Weight decay (added to the gradient for adam and sgd; decoupled for adamw).
    #[arg(long, default_value_t = 5e-4, allow_negative_numbers = true)]
    pub weight_decay: f64,
    /// Early stopping: stop after N evaluations in a row without a better validation
    /// accuracy.
    #[arg(long)]
    pub patience: Option<usize>,
    /// A batch whose loss is NaN or infinite: stop (error, exit code 1, the last checkpoint
    /// kept) or skip-batch (drop its gradients, count it, go on; an epoch whose every batch
    /// is skipped still stops).
    #[arg(long, default_value = "stop")]
    pub on_nan: String,
    /// On a GPU, wait for the device after each micro-batch's forward and backward and after
    /// the optimizer step, so the per-phase seconds (--verbose, --json) are device time.
    /// Slower: without it nothing inside a batch waits, and the host enqueues the next
    /// micro-batch while the device runs this one. No effect on the CPU.
    #[arg(long)]
    pub profile: bool,
    /// Full-graph training (HongTu): one exact step per epoch over all training nodes and
    /// every neighbour, run layer by layer in chunks of destination nodes whose rows are
    /// kept in host memory, so the device holds one chunk at a time. --memory-budget picks
    /// the fewest chunks that fit; --chunks forces a count. Fanouts default to -1 per layer
    /// (--layers sets the depth); --batch-size and --micro-batches do not apply.
    #[arg(long)]
    pub full_graph: bool,
    /// With --full-graph: chunks per layer (default: the fewest that fit --memory-budget,
    /// or 1 without a budget).
    #[arg(long, requires = "full_graph")]
    pub chunks: Option<usize>,
    /// With --full-graph: how nodes are ordered before they are cut into chunks: grem (part
    /// by part of a GREM partition of the graph, the default), metis (of a METIS k-way
    /// partition) or id (node ids as given). Chunks of nodes from few parts share
    /// neighbours, so each reads fewer rows. Parts: 64, or --chunks when more.
    #[arg(long, requires = "full_graph", default_value = "grem")]
    pub node_order: String,
    /// With --full-graph: keep each chunk's input rows on the device for the next chunk,
    /// which uploads only the rows the two do not share (HongTu's deduplicated transfers):
    /// auto (on a GPU, off on the CPU, where it would only add copies), on or off. Costs
    /// device memory while a chunk's rows are assembled, which --memory-budget counts.
    #[arg(long, requires = "full_graph", default_value = "auto")]
    pub dedup_transfers: String,
    /// With --full-graph: HongTu's hybrid mode (the help reads the models' registry).
    #[arg(long, requires = "full_graph", help = hybrid_help(), long_help = hybrid_help())]
    pub hybrid: bool,
    /// With --full-graph: prepare the next chunk (slice its block, gather the rows it reads
    /// from host memory) on a worker thread while a chunk computes, so that the compute
    /// waits only for the upload: true or false (each chunk prepared just before it runs).
    /// Default: true on a GPU, false on the CPU (whose compute already keeps every core
    /// busy: no faster on 2 cores). The results are the same either way; the JSON's
    /// prep_wait_s is the time the compute waited for the preparation.
    #[arg(long, requires = "full_graph", action = clap::ArgAction::Set)]
    pub overlap: Option<bool>,
    /// Under `mpirun -np N`: make the last S of the N ranks sampler ranks (Armada's
    /// disaggregated sampling), which sample, partition and slice each batch's
    /// micro-batches, gather their input rows and send them to the N - S trainer ranks, so
    /// that trainers only compute. Same parameters as without; sampler ranks run on the CPU
    /// whatever --device says. Not with --full-graph.
    #[arg(long, default_value_t = 0)]
    pub sampler_ranks: usize,
    /// Write a checkpoint (safetensors) here after every epoch (atomically: a crash keeps
    /// the previous one).
    #[arg(long)]
    pub checkpoint: Option<PathBuf>,
    /// Resume from this checkpoint (continues with the epochs it had not done; refuses one
    /// of another configuration or dataset).
    #[arg(long)]
    pub resume: Option<PathBuf>,
    /// Write the JSON summary to this file (checked before training, written atomically),
    /// or `-` for standard output (then nothing else goes there).
    #[arg(long)]
    pub json: Option<String>,
    /// Evaluate on the validation nodes every N epochs (0: only at the end).
    #[arg(long, default_value_t = 1)]
    pub eval_every: usize,
    /// Seeds per evaluation batch.
    #[arg(long, default_value_t = 4096)]
    pub eval_batch_size: usize,
    /// Print only errors and the final line (ESPALIER_LOG=error).
    #[arg(long, short = 'q', conflicts_with = "verbose")]
    pub quiet: bool,
    /// Print every epoch with its per-phase times and learning rate (ESPALIER_LOG=debug).
    #[arg(long, short = 'v')]
    pub verbose: bool,
}

/// `--hybrid`'s help, with the models that can run it from the registry of model kinds.
fn hybrid_help() -> String {
    format!(
        "With --full-graph: HongTu's hybrid mode. The layers below the output layer cache \
         their aggregation in host memory (one row of input width per node) in the forward \
         pass, and their backward recomputes only the update from a chunk's own rows and that \
         cache instead of the whole layer from every neighbour's row: fewer rows uploaded, no \
         aggregation recomputed. Needs aggregations without weights ({}); without it \
         (recompute mode) any model trains.",
        espalier::nn::hybrid_models()
    )
}

impl TrainArgs {
    /// The defaults: what `espalier` or `espalier train` with no flags runs.
    pub fn default_args() -> TrainArgs {
        TrainArgs::parse_from(["train"])
    }

    /// Checks the flags only training reads that need no dataset (with
    /// [`CommonArgs::check`], everything that can be checked before loading).
    pub fn check(&self) -> Result<()> {
        let c = &self.common;
        self.check_numbers()?;
        self.on_nan.parse::<OnNan>()?;
        self.schedule()?;
        self.node_order.parse::<NodeOrder>()?;
        self.dedup_transfers.parse::<Dedup>()?;
        if self.full_graph && (c.partitioner != "random" || c.loader != "slice") {
            return Err(Error::flag(
                "--full-graph",
                "--full-graph cuts layers into chunks and has no micro-batches: --partitioner \
                 and --loader do not apply (--node-order sets how nodes are grouped into chunks)",
            ));
        }
        if self.sampler_ranks > 0 && self.full_graph {
            return Err(Error::flag(
                "--sampler-ranks",
                "--sampler-ranks: --full-graph has no micro-batches for sampler ranks to make",
            ));
        }
        if self.patience == Some(0) {
            return Err(Error::flag("--patience", "--patience must be at least 1"));
        }
        Ok(())
    }

    /// The run's configuration for `data`, from every training flag.
    pub fn config(&self, data: &Dataset) -> Result<TrainConfig> {
        let c = &self.common;
        let mut config = c.config(
            data,
            TrainOnly {
                epochs: self.epochs,
                lr: self.lr,
                weight_decay: self.weight_decay,
                eval_every: self.eval_every,
                eval_batch_size: self.eval_batch_size,
            },
        )?;
        if self.full_graph {
            if c.fanouts.is_none() {
                config.fanouts = vec![-1; config.model.shape.layers];
            }
            if self.chunks == Some(0) {
                return Err(Error::flag("--chunks", "--chunks must be at least 1"));
            }
            config.full_graph = Some(FullGraphConfig {
                chunks: self.chunks,
                order: self.node_order.parse()?,
                dedup: self.dedup_transfers.parse()?,
                hybrid: self.hybrid,
                overlap: self.overlap,
            });
        }
        config.on_nan = self.on_nan.parse()?;
        config.lr_schedule = self.schedule()?;
        config.patience = self.patience;
        config.profile = self.profile;
        Ok(config)
    }

    /// The numbers of the run, checked before anything is loaded: a run that cannot train
    /// must not cost a dataset load first.
    fn check_numbers(&self) -> Result<()> {
        if self.epochs == 0 {
            return Err(Error::flag("--epochs", "--epochs must be at least 1"));
        }
        check_optimizer_numbers(self.lr, self.weight_decay)?;
        if !(self.lr_gamma.is_finite() && self.lr_gamma > 0.0) {
            return Err(Error::flag(
                "--lr-gamma",
                format!(
                    "--lr-gamma {}: the decay factor must be positive",
                    self.lr_gamma
                ),
            ));
        }
        if self.eval_batch_size == 0 {
            return Err(Error::flag(
                "--eval-batch-size",
                "--eval-batch-size must be at least 1",
            ));
        }
        Ok(())
    }

    fn schedule(&self) -> Result<LrSchedule> {
        match (self.lr_schedule.as_str(), self.lr_step_size) {
            ("step", None) => Err(Error::flag(
                "--lr-schedule",
                "--lr-schedule step needs --lr-step-size N (epochs between decays)",
            )),
            (s, Some(_)) if s != "step" => Err(Error::flag(
                "--lr-step-size",
                "--lr-step-size applies to --lr-schedule step only",
            )),
            (s, n) => LrSchedule::parse(s, n.unwrap_or(1), self.lr_gamma),
        }
    }
}

/// `--lr` (positive) and `--weight-decay` (zero or positive), as `train` and `bench` take
/// them.
pub fn check_optimizer_numbers(lr: f64, weight_decay: f64) -> Result<()> {
    if !(lr.is_finite() && lr > 0.0) {
        return Err(Error::flag(
            "--lr",
            format!("--lr {lr}: the learning rate must be positive"),
        ));
    }
    if !(weight_decay.is_finite() && weight_decay >= 0.0) {
        return Err(Error::flag(
            "--weight-decay",
            format!("--weight-decay {weight_decay}: must be zero or positive"),
        ));
    }
    Ok(())
}

/// One epoch in at most 100 columns.
pub fn epoch_line(e: &EpochStats, total: usize) -> String {
    let valid = e
        .valid_acc
        .map_or("   -  ".to_string(), |v| format!("{v:.4}"));
    let skipped = if e.skipped_batches > 0 {
        format!("  skipped {}", e.skipped_batches)
    } else {
        String::new()
    };
    let split = match &e.full_graph {
        Some(f) => format!(
            "chunks {}  chunk peak {}",
            f.chunks,
            format_bytes(f.peak_bytes)
        ),
        None => format!("micro-batches {}", e.micro_batches),
    };
    format!(
        "epoch {:>4}/{total}  loss {:.4}  train {:.4}  valid {valid}  {:.3}s  {split}{skipped}",
        e.epoch, e.loss, e.train_acc, e.seconds
    )
}

/// The per-phase detail of `--verbose`.
fn phase_line(e: &EpochStats) -> String {
    let p = &e.phases;
    let test = e
        .test_acc
        .map_or(String::new(), |t| format!("  test {t:.4} (best valid)"));
    format!(
        "    lr {:.3e}  sample {:.3} part {:.3} slice {:.3} gather {:.3} waited {:.3} fwd {:.3} bwd {:.3} opt {:.3}{test}",
        e.lr, p.sample, p.partition, p.slice, p.gather, p.wait, p.forward, p.backward, p.optimizer
    )
}

/// The one line a run ends with (also under --quiet).
fn final_line(s: &Summary) -> String {
    let best = match (
        s.best_valid_acc,
        s.best_valid_epoch,
        s.test_acc_at_best_valid,
    ) {
        (Some(v), Some(e), Some(t)) => format!("  best valid {v:.4} (epoch {e}): test {t:.4}"),
        _ => String::new(),
    };
    // NaN: not measured (no labelled node in that split).
    let acc = |a: f64| {
        if a.is_nan() {
            "-".to_string()
        } else {
            format!("{a:.4}")
        }
    };
    format!(
        "test accuracy {}  valid accuracy {}  final loss {:.4}{best}  peak {:.1} MiB  {:.2}s training{}",
        acc(s.test_acc),
        acc(s.valid_acc),
        s.final_loss,
        s.peak_bytes as f64 / (1u64 << 20) as f64,
        s.train_seconds,
        if s.stopped_early { "  (stopped early)" } else { "" }
    )
}

/// The summary of the epochs finished so far (the trainer keeps it after each epoch) and
/// the `--json` path: what a second interrupt writes before it quits. The main thread
/// holds the lock while it writes the run's own JSON, then empties it.
static PARTIAL: OnceLock<(String, Arc<Mutex<Option<Summary>>>)> = OnceLock::new();

/// Writes the partial summary, if there is one (from the signal handler's thread).
fn write_partial() {
    let Some((path, sink)) = PARTIAL.get() else {
        return;
    };
    let held = sink.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(s) = held.as_ref() {
        match write_json(path, s) {
            Ok(()) if path != "-" => eprintln!(
                "wrote the {} finished epochs to {path} (\"interrupted\": true)",
                s.epochs.len()
            ),
            Ok(()) => {}
            Err(e) => eprintln!("error: {e}"),
        }
    }
}

/// The stop flag, set by SIGINT/SIGTERM (installed once per process).
fn stop_flag() -> Result<Arc<AtomicBool>> {
    static FLAG: OnceLock<Arc<AtomicBool>> = OnceLock::new();
    if let Some(f) = FLAG.get() {
        return Ok(f.clone());
    }
    let flag = Arc::new(AtomicBool::new(false));
    let f = flag.clone();
    ctrlc::set_handler(move || {
        if f.swap(true, Ordering::SeqCst) {
            eprintln!("second interrupt: quitting now");
            write_partial();
            std::process::exit(INTERRUPTED_EXIT);
        }
        eprintln!("interrupt: stopping after the current batch (again to quit now)");
    })
    .map_err(|e| Error::invalid(format!("cannot install the Ctrl-C handler: {e}")))?;
    Ok(FLAG.get_or_init(|| flag).clone())
}

pub fn run(a: &TrainArgs) -> Result<()> {
    // Launched by mpirun/srun with several ranks: data-parallel training (src/dist/).
    let dist = espalier::dist::from_env()?;
    let result = train(a, &dist);
    if let Err(e) = &result {
        if dist.size() > 1 {
            // The other ranks may be waiting for this one in a collective: end them all.
            eprintln!("error: rank {} of {}: {e}", dist.rank(), dist.size());
            dist.abort(1);
        }
    }
    result
}

fn train(a: &TrainArgs, dist: &Arc<dyn Collective>) -> Result<()> {
    // Rank 0 alone prints the run and writes the JSON and checkpoints; the others print
    // only errors.
    let root = dist.rank() == 0;
    log::init(a.quiet || !root, a.verbose && root)?;
    let json = a.json.as_ref().filter(|_| root);
    // Everything checkable before loading and training: a bad output path or flag must not
    // cost the run.
    a.check()?;
    if a.sampler_ranks > 0 {
        // A collective call: every rank learns its group (trainers, or samplers).
        dist.split_samplers(a.sampler_ranks)?;
    }
    let sampler = espalier::dist::is_sampler(&**dist);
    check_outputs(a, json, root)?;
    let (data, graph) = a.common.load()?;
    let mut trainer = make_trainer(a, dist, sampler, &data, graph)?;
    if sampler {
        // Ctrl-C reaches every rank: a sampler goes on until its trainers, which stop after
        // their current batch, say they have stopped.
        stop_flag()?;
        return trainer.serve_trainers();
    }
    if log::enabled(Level::Info) {
        eprintln!("{}", model_line(a, &trainer));
        ranks_lines(&trainer, &**dist);
    }
    if let Some(w) = trainer.validation_warning() {
        if log::enabled(Level::Warn) {
            eprintln!("warning: {w}");
        }
    }
    if let Some(path) = json {
        let sink = Arc::new(Mutex::new(None));
        trainer.keep_partial_summary(sink.clone());
        let _ = PARTIAL.set((path.clone(), sink));
    }
    trainer.set_stop_flag(stop_flag()?);
    let summary = run_epochs(a, &mut trainer)?;
    report(a, json, &summary, &**dist)
}

/// Checks the run's output paths (the JSON, `--checkpoint` on rank 0) and that `--resume`
/// names a file, before anything is loaded.
fn check_outputs(a: &TrainArgs, json: Option<&String>, root: bool) -> Result<()> {
    if let Some(path) = json {
        check_json_path(path)?;
    }
    if let Some(path) = a.checkpoint.as_ref().filter(|_| root) {
        espalier::atomic::check_writable(path).map_err(|e| {
            Error::flag(
                "--checkpoint",
                format!("--checkpoint {}: {e}", path.display()),
            )
        })?;
    }
    if let Some(path) = &a.resume {
        if !path.is_file() {
            return Err(Error::flag(
                "--resume",
                format!("--resume {}: no such checkpoint file", path.display()),
            ));
        }
    }
    Ok(())
}

/// The trainer of this rank: on its local GPU when ranks share a machine, on the CPU for a
/// sampler rank, joined to the other ranks, resumed from `--resume`.
fn make_trainer<'a>(
    a: &TrainArgs,
    dist: &Arc<dyn Collective>,
    sampler: bool,
    data: &'a Dataset,
    graph: Csr,
) -> Result<Trainer<'a>> {
    let mut config = a.config(data)?;
    if dist.size() > 1 {
        // Ranks sharing a machine spread over its GPUs (see `Device::for_local_rank`).
        if let Some(local) = espalier::dist::local_rank()? {
            config.device = config.device.for_local_rank(local);
        }
    }
    if sampler {
        // Sampler ranks compute nothing: they need no accelerator.
        config.device = espalier::Device::Cpu;
    }
    let mut trainer = a.common.trainer(data, graph, config)?;
    trainer.set_collective(dist.clone())?;
    trainer.join_samplers()?;
    if let Some(path) = &a.resume {
        trainer.resume(path)?;
        if let Some(w) = trainer.resume_warning.as_ref() {
            if log::enabled(Level::Warn) {
                eprintln!("warning: {w}");
            }
        }
        if log::enabled(Level::Info) {
            eprintln!(
                "resumed from {} after epoch {}",
                path.display(),
                trainer.state.start_epoch
            );
        }
    }
    Ok(trainer)
}

/// The run's header line: the model, its size, the device and how batches are split.
fn model_line(a: &TrainArgs, trainer: &Trainer) -> String {
    let c = &a.common;
    let config = &trainer.state.config;
    let micro = &config.micro;
    let budget = micro
        .memory_budget
        .map_or(String::new(), |b| format!(", budget {}", format_bytes(b)));
    let split = match &config.full_graph {
        Some(f) => match (f.chunks, micro.memory_budget) {
            (Some(n), _) => format!("full graph in {n} chunks per layer{budget}"),
            (None, Some(b)) => {
                format!(
                    "full graph, chunks chosen to fit budget {}",
                    format_bytes(b)
                )
            }
            (None, None) => "full graph in 1 chunk per layer".to_string(),
        },
        None => format!(
            "batch {}, micro-batches {} ({}){budget}",
            c.batch_size, micro.micro_batches, micro.partitioner
        ),
    };
    format!(
        "model {}: {} layers, hidden {}, {} parameters, fanouts {:?}, device {}{}, {split}",
        config.model.label(),
        config.model.shape.layers,
        c.hidden,
        espalier::nn::Module::num_parameters(&trainer.state.model),
        config.fanouts,
        config.device,
        if trainer.state.resident_features.is_some() {
            " (features on it)"
        } else {
            ""
        },
    )
}

/// The header lines of a run over several ranks: the sampler ranks, how gradients are
/// summed, and a note when some ranks get no micro-batch.
fn ranks_lines(trainer: &Trainer, dist: &dyn Collective) {
    if dist.samplers() > 0 {
        eprintln!(
            "sampler ranks {}: they sample, slice and gather each batch's micro-batches for \
             the {} trainer rank(s)",
            dist.samplers(),
            dist.size()
        );
    }
    if dist.size() <= 1 {
        return;
    }
    let micro = &trainer.state.config.micro;
    let params = espalier::nn::Module::num_parameters(&trainer.state.model);
    eprintln!(
        "ranks {} ({}): micro-batches dealt by estimated cost, gradients summed by one \
         all-reduce of {} per batch, {}",
        dist.size(),
        dist.describe(),
        format_bytes(4 * params as u64),
        trainer.state.dist.gradient_path()
    );
    if micro.memory_budget.is_none() && micro.micro_batches < dist.size() {
        eprintln!(
            "note: {} micro-batches for {} ranks: {} rank(s) compute nothing and join the \
             all-reduce with zeros (--micro-batches {} or more keeps every rank busy)",
            micro.micro_batches,
            dist.size(),
            dist.size() - micro.micro_batches,
            dist.size()
        );
    }
}

/// Trains the remaining epochs under a progress bar, printing an epoch line every
/// 1/25th of the run (every epoch, with its phases, at `--verbose`).
fn run_epochs(a: &TrainArgs, trainer: &mut Trainer) -> Result<Summary> {
    let total = a.epochs;
    let pb = if log::enabled(Level::Info) {
        ProgressBar::new(total.saturating_sub(trainer.state.start_epoch) as u64)
    } else {
        ProgressBar::hidden()
    };
    pb.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} epochs  {msg}  [{elapsed} < {eta}]")
            .map_err(|e| Error::invalid(e.to_string()))?,
    );
    let every = if log::enabled(Level::Debug) {
        1
    } else {
        (total / 25).max(1)
    };
    let say = |line: String| {
        if pb.is_hidden() {
            eprintln!("{line}");
        } else {
            pb.println(line);
        }
    };
    let summary = trainer.run(a.checkpoint.as_deref(), &mut |e| {
        pb.inc(1);
        pb.set_message(format!("loss {:.4}", e.loss));
        if log::enabled(Level::Info) && (e.epoch % every == 0 || e.epoch == total || e.epoch == 1) {
            say(epoch_line(e, total));
        }
        if log::enabled(Level::Debug) {
            say(phase_line(e));
        }
    });
    pb.finish_and_clear();
    summary
}

/// Reports the run on rank 0 (the result line, the JSON) and, after an interrupt, exits
/// with [`INTERRUPTED_EXIT`] once every rank is there.
fn report(
    a: &TrainArgs,
    json: Option<&String>,
    summary: &Summary,
    dist: &dyn Collective,
) -> Result<()> {
    let total = a.epochs;
    let result = if summary.already_finished {
        format!(
            "already finished: {} holds all {} epochs of this run; its final figures: {}",
            a.resume
                .as_deref()
                .map_or("the checkpoint".into(), |p| p.display().to_string()),
            summary.epochs.len(),
            final_line(summary)
        )
    } else if summary.interrupted {
        format!(
            "interrupted after {} finished epochs (of {total})",
            summary.epochs.len()
        )
    } else {
        final_line(summary)
    };
    // Rank 0 alone reports the run.
    let root = dist.rank() == 0;
    let json_to_stdout = json.map(String::as_str) == Some("-");
    if root && (json_to_stdout || summary.interrupted) {
        eprintln!("{result}");
    } else if root {
        println!("{result}");
    }
    if let Some(path) = json {
        // Not while a second interrupt writes the partial JSON; and none after this one.
        let sink = PARTIAL
            .get()
            .map(|(_, s)| s.lock().unwrap_or_else(|e| e.into_inner()));
        write_json(path, summary)?;
        if let Some(mut held) = sink {
            *held = None;
        }
    }
    if summary.interrupted {
        // mpirun ends the whole job once one rank exits with an error code: no rank leaves
        // before rank 0 has written its JSON (an all-reduce of nothing as a barrier).
        if dist.size() > 1 {
            dist.all_reduce_sum_f64(&mut [0.0])?;
        }
        std::process::exit(INTERRUPTED_EXIT);
    }
    Ok(())
}
