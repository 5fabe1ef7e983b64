//! Multi-layer GNN models over a list of blocks (input layer first).
//!
//! Between layers: ReLU, then dropout (not on the input, not after the last layer), as in
//! the PyG peer. Dropout masks are keyed by (seed, epoch, layer) and by each row's global
//! node id, so splitting a batch into micro-batches does not change them.
//!
//! A model is a stack of layers ([`crate::nn::layer`]): [`ModelConfig::layer_specs`] lists
//! them before they have weights, [`Gnn::new`] builds them, and the memory estimator
//! replays the same specs. A configuration is the shape every kind shares
//! ([`ModelShape`]) and the kind's own settings ([`KindConfig`]). Which kinds exist is the
//! registry [`MODELS`]; each kind's file (`sage.rs`, `gcn.rs`, `gat.rs`) holds its entry,
//! its config type and its layer, so nothing here matches on the kind.

use std::sync::Arc;

use serde::ser::{Error as _, SerializeMap};

use crate::device::Device;
use crate::error::{Error, Result};
use crate::graph::Block;
use crate::meta::{Replay, SymBlock, Val};
pub use crate::nn::config::{Forward, ModelKind, ModelShape};
use crate::nn::exec::{Eager, Exec};
use crate::nn::kind::{Hybrid, KindConfig, ModelEntry, ModelFlags};
use crate::nn::layer::{BuildCtx, HybridEager, Layer, LayerAt, LayerSpec};
use crate::nn::module::{join, Module};
use crate::nn::{gat, gcn, sage};
use crate::ops;
use crate::tensor::Tensor;

/// The registry of model kinds: each kind's names, help and configuration, defined in the
/// kind's own file beside its layer. `--model` and the help read it.
pub const MODELS: &[ModelEntry] = &[sage::MODEL, gcn::MODEL, gat::MODEL];

impl ModelKind {
    /// This kind's registry entry.
    pub fn entry(self) -> &'static ModelEntry {
        MODELS
            .iter()
            .find(|m| m.kind == self)
            .expect("every model kind has a registry entry")
    }

    /// The name `--model` takes.
    pub fn name(self) -> &'static str {
        self.entry().name()
    }

    /// Every kind's name, as a list for people: `sage, gcn or gat`.
    pub fn names() -> String {
        let names: Vec<&str> = MODELS.iter().map(ModelEntry::name).collect();
        match names.split_last() {
            Some((last, first)) if !first.is_empty() => format!("{} or {last}", first.join(", ")),
            _ => names.concat(),
        }
    }

    /// This kind's settings from the model flags given: a flag this kind does not read is
    /// [`Error::InvalidFlag`] naming the flag, this kind and the kinds that read it; a bad
    /// value is one naming its flag ([`ModelEntry::parse`]).
    pub fn settings(self, flags: &ModelFlags) -> Result<Arc<dyn KindConfig>> {
        let entry = self.entry();
        if let Some(flag) = flags.names().find(|f| !entry.reads(f)) {
            let users: Vec<&str> = MODELS
                .iter()
                .filter(|e| e.reads(flag))
                .map(ModelEntry::name)
                .collect();
            let users = match users.is_empty() {
                true => "no model reads it".to_string(),
                false => format!("only {} reads it", users.join(" and ")),
            };
            return Err(Error::flag(
                flag,
                format!(
                    "{flag} does not apply to --model {}: {users} (drop {flag})",
                    entry.name()
                ),
            ));
        }
        (entry.parse)(flags)
    }
}

/// Every flag some kind of [`MODELS`] reads, each once, in registry order.
pub fn model_flags() -> Vec<(&'static str, &'static str)> {
    let mut out: Vec<(&'static str, &'static str)> = Vec::new();
    for &(flag, help) in MODELS.iter().flat_map(|m| m.flags) {
        if !out.iter().any(|(f, _)| *f == flag) {
            out.push((flag, help));
        }
    }
    out
}

/// The kinds `--hybrid` runs, for people: `sage with --aggr mean or sum, or gcn`.
pub fn hybrid_models() -> String {
    let kinds: Vec<String> = MODELS
        .iter()
        .filter_map(|m| match m.hybrid {
            Hybrid::No => None,
            Hybrid::Yes => Some(m.name().to_string()),
            Hybrid::With(when) => Some(format!("{} {when}", m.name())),
        })
        .collect();
    match kinds.split_last() {
        Some((last, first)) if !first.is_empty() => format!("{}, or {last}", first.join(", ")),
        _ => kinds.concat(),
    }
}

impl std::str::FromStr for ModelKind {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match MODELS.iter().find(|m| m.names.contains(&s)) {
            Some(m) => Ok(m.kind),
            None => Err(Error::invalid(format!(
                "unknown model `{s}`: expected {}",
                ModelKind::names()
            ))),
        }
    }
}

/// A model's configuration: the shape every kind shares and the kind's own settings.
/// Serialized flat, as the JSON output and checkpoints carry it: `kind`, the kind's
/// settings (`aggr` for SAGE; `heads`, `attn_dropout`, `self_loops` for GAT), then the
/// shape's fields; a kind's settings are only its own.
#[derive(Clone, Debug)]
pub struct ModelConfig {
    /// Widths, depth and dropout.
    pub shape: ModelShape,
    settings: Arc<dyn KindConfig>,
}

impl Default for ModelConfig {
    /// The CLI's defaults: GraphSAGE-mean, 2 layers, hidden 256, dropout 0.5. `in_dim` and
    /// `out_dim` are 0: set them, or let `Trainer::new` take them from the dataset.
    fn default() -> Self {
        ModelConfig::of(ModelKind::Sage)
    }
}

impl serde::Serialize for ModelConfig {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let object = |v: serde_json::Result<serde_json::Value>| match v.map_err(S::Error::custom)? {
            serde_json::Value::Object(m) => Ok(m),
            serde_json::Value::Null => Ok(serde_json::Map::new()),
            other => Err(S::Error::custom(format!(
                "a model's settings serialize as an object, not {other}"
            ))),
        };
        let own = object(self.settings.fields())?;
        let shape = object(serde_json::to_value(&self.shape))?;
        let mut m = s.serialize_map(Some(1 + own.len() + shape.len()))?;
        m.serialize_entry("kind", &self.kind())?;
        for (k, v) in own.iter().chain(shape.iter()) {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

/// Most values one parameter tensor may hold: the GPU kernels index buffers with 32-bit
/// integers, and every backend runs the same models. [`ModelConfig::validate`] checks it
/// before anything is allocated.
pub const MAX_PARAMETER_VALUES: u64 = u32::MAX as u64;

impl ModelConfig {
    /// Checks the values a user can get wrong.
    pub fn validate(&self) -> Result<()> {
        let ModelShape {
            in_dim,
            hidden,
            out_dim,
            layers,
            dropout,
        } = self.shape;
        if layers == 0 {
            return Err(Error::invalid("a model needs at least one layer"));
        }
        if in_dim == 0 || hidden == 0 || out_dim == 0 {
            return Err(Error::invalid(format!(
                "model widths must be positive (input {in_dim}, hidden {hidden}, classes \
                 {out_dim})"
            )));
        }
        if !(0.0..1.0).contains(&dropout) {
            return Err(Error::invalid(format!(
                "dropout {dropout} must be in [0, 1)"
            )));
        }
        self.settings.validate()?;
        self.check_sizes()?;
        Ok(())
    }

    /// The default configuration of `kind`: its registry entry's default settings and the
    /// default shape.
    pub fn of(kind: ModelKind) -> Self {
        ModelConfig {
            shape: ModelShape::default(),
            settings: (kind.entry().default)(),
        }
    }

    /// A model with these settings (which say its kind) and the default shape:
    /// `ModelConfig::new(SageConfig { aggr: Aggregator::Lstm })`.
    pub fn new(settings: impl KindConfig + 'static) -> Self {
        ModelConfig {
            shape: ModelShape::default(),
            settings: Arc::new(settings),
        }
    }

    /// A model of `shape` with these settings.
    pub fn with_settings(shape: ModelShape, settings: Arc<dyn KindConfig>) -> Self {
        ModelConfig { shape, settings }
    }

    /// Which kind of model.
    pub fn kind(&self) -> ModelKind {
        self.settings.kind()
    }

    /// The settings only this configuration's kind reads.
    pub fn settings(&self) -> &Arc<dyn KindConfig> {
        &self.settings
    }

    /// The settings as the kind's own type (`None` for another kind's):
    /// `config.settings_as::<GatConfig>().map(|g| g.heads)`.
    pub fn settings_as<T: KindConfig>(&self) -> Option<&T> {
        self.settings.as_any().downcast_ref::<T>()
    }

    /// The model as a user names it, with only what applies to its kind: `sage-mean`,
    /// `sage-lstm`, `gcn`, `gat (4 heads)`.
    pub fn label(&self) -> String {
        self.settings.label()
    }

    /// The model's layers before they have weights, input layer first: what
    /// [`Gnn::new`] builds and the memory estimator replays.
    pub fn layer_specs(&self) -> Vec<Box<dyn LayerSpec>> {
        (0..self.shape.layers)
            .map(|l| {
                let (in_dim, out_dim) = self.widths(l);
                self.settings.layer(LayerAt {
                    index: l,
                    last: l + 1 == self.shape.layers,
                    in_dim,
                    out_dim,
                })
            })
            .collect()
    }

    /// The widths that set a tensor's size, for errors: `input 1433, hidden 256, 4 heads,
    /// 7 classes` (heads only for GAT).
    fn describe_widths(&self) -> String {
        let note = self.settings.width_note();
        let s = &self.shape;
        format!(
            "input {}, hidden {}{note}, {} classes",
            s.in_dim, s.hidden, s.out_dim
        )
    }

    /// The shape of every parameter tensor, layer by layer in the order [`Gnn::new`]
    /// creates them, as `(layer, name, shape)`. Products are checked: widths from user
    /// input that overflow are an error, never a wrapped size or a panic.
    pub fn parameter_shapes(&self) -> Result<Vec<(usize, &'static str, Vec<u64>)>> {
        let too_big = || {
            Error::invalid(format!(
                "model too large: its widths ({}) overflow 64 bits",
                self.describe_widths()
            ))
        };
        let mul = |a: u64, b: u64| a.checked_mul(b).ok_or_else(too_big);
        // Checked even when no hidden layer uses it.
        self.settings
            .hidden_width(self.shape.hidden)
            .ok_or_else(too_big)?;
        let mut shapes = Vec::new();
        for (l, spec) in self.layer_specs().iter().enumerate() {
            let layer = spec.parameter_shapes().ok_or_else(too_big)?;
            shapes.extend(layer.into_iter().map(|(name, shape)| (l, name, shape)));
        }
        for (_, _, shape) in &shapes {
            shape.iter().try_fold(1u64, |n, &d| mul(n, d))?;
        }
        Ok(shapes)
    }

    /// Number of parameter values, computed from the widths without allocating anything
    /// (checked: see [`ModelConfig::parameter_shapes`]).
    pub fn num_parameters(&self) -> Result<u64> {
        self.parameter_shapes()?
            .iter()
            .try_fold(0u64, |n, (_, _, s)| n.checked_add(s.iter().product()))
            .ok_or_else(|| {
                Error::invalid(format!(
                    "model too large: its parameter count ({}) overflows 64 bits",
                    self.describe_widths()
                ))
            })
    }

    /// Every parameter tensor holds at most [`MAX_PARAMETER_VALUES`] values, checked
    /// before anything is allocated.
    fn check_sizes(&self) -> Result<()> {
        for (l, name, shape) in self.parameter_shapes()? {
            let n: u64 = shape.iter().product();
            if n > MAX_PARAMETER_VALUES {
                let dims: Vec<String> = shape.iter().map(u64::to_string).collect();
                return Err(Error::invalid(format!(
                    "model too large: layer {l}'s {name} would be [{}] = {n} values ({} GiB of \
                     f32); one parameter tensor holds at most {} values (the GPU kernels index \
                     with 32 bits)",
                    dims.join(", "),
                    (n as f64 * 4.0 / (1u64 << 30) as f64).round(),
                    MAX_PARAMETER_VALUES
                )));
            }
        }
        self.num_parameters().map(|_| ())
    }

    /// Input and output width of layer `l` (for GAT, a hidden layer's output is
    /// `heads · hidden`). Saturates instead of overflowing (widths that large fail
    /// [`ModelConfig::validate`]).
    pub fn widths(&self, l: usize) -> (usize, usize) {
        let s = &self.shape;
        let hidden_out = self.settings.hidden_width(s.hidden).unwrap_or(usize::MAX);
        let i = if l == 0 { s.in_dim } else { hidden_out };
        let o = if l + 1 == s.layers {
            s.out_dim
        } else {
            hidden_out
        };
        (i, o)
    }
}

/// Builder-style setters of the shape, one per field:
/// `ModelConfig::of(ModelKind::Gcn).hidden(64)`.
impl ModelConfig {
    /// Sets the input width (0: taken from the dataset by `Trainer::new`).
    pub fn in_dim(mut self, n: usize) -> Self {
        self.shape.in_dim = n;
        self
    }
    /// Sets the hidden width.
    pub fn hidden(mut self, n: usize) -> Self {
        self.shape.hidden = n;
        self
    }
    /// Sets the output width (0: the dataset's class count, by `Trainer::new`).
    pub fn out_dim(mut self, n: usize) -> Self {
        self.shape.out_dim = n;
        self
    }
    /// Sets the number of layers.
    pub fn layers(mut self, n: usize) -> Self {
        self.shape.layers = n;
        self
    }
    /// Sets the dropout probability.
    pub fn dropout(mut self, p: f64) -> Self {
        self.shape.dropout = p;
        self
    }
}

/// A stack of GNN layers.
#[derive(Debug)]
pub struct Gnn {
    /// The configuration the layers were built from.
    pub config: ModelConfig,
    layers: Vec<Box<dyn Layer>>,
}

impl Gnn {
    /// A model with seeded initial weights. GCN needs the graph's in-degrees.
    pub fn new(
        config: ModelConfig,
        in_degrees: Option<&[u32]>,
        seed: u64,
        device: Device,
    ) -> Result<Gnn> {
        config.validate()?;
        let mut ctx = BuildCtx::new(seed, device, in_degrees);
        let layers = config
            .layer_specs()
            .iter()
            .map(|spec| spec.build(&mut ctx))
            .collect::<Result<Vec<_>>>()?;
        Ok(Gnn { config, layers })
    }

    /// SAGE-LSTM: split each layer's explosion bucket into pieces of at most `max_nodes`
    /// dst nodes (`None`: no split). Other models ignore it.
    pub fn set_lstm_split(&mut self, max_nodes: Option<usize>) -> Result<()> {
        if max_nodes == Some(0) {
            return Err(Error::invalid("lstm split size must be at least 1"));
        }
        for l in &mut self.layers {
            l.set_bucket_split(max_nodes);
        }
        Ok(())
    }

    /// Logits of the last block's dst nodes from the input features of the first block's
    /// src nodes.
    pub fn forward(&self, blocks: &[Arc<Block>], x: &Tensor, f: &Forward) -> Result<Tensor> {
        if blocks.len() != self.layers.len() {
            return Err(Error::invalid(format!(
                "model has {} layers but the sample has {} blocks (one fanout per layer)",
                self.layers.len(),
                blocks.len()
            )));
        }
        let mut h = x.clone();
        for (l, block) in blocks.iter().enumerate() {
            h = self.forward_layer(l, block, h, f)?;
        }
        Ok(h)
    }

    /// Layer `l` alone: its output rows (the block's dst nodes) from its input rows (the
    /// block's src nodes), followed, except after the output layer, by the ReLU and the
    /// dropout between layers. [`Gnn::forward`] chains it over the blocks; full-graph
    /// training runs it chunk by chunk. `h` is dropped as soon as the layer has run (before
    /// the ReLU), which the memory estimator's replay assumes.
    pub fn forward_layer(
        &self,
        l: usize,
        block: &Arc<Block>,
        h: Tensor,
        f: &Forward,
    ) -> Result<Tensor> {
        let layer = self.layers.get(l).ok_or_else(|| {
            Error::invalid(format!(
                "layer {l} of a model with {} layers",
                self.layers.len()
            ))
        })?;
        if h.shape().first() != Some(&block.num_src) {
            return Err(Error::shape(
                "gnn",
                format!(
                    "layer {l} input has shape {:?} but its block has {} sources",
                    h.shape(),
                    block.num_src
                ),
            ));
        }
        let out = layer.forward(block, &h, l, f)?;
        drop(h);
        self.finish_layer(l, block, out, f)
    }

    /// What follows layer `l`'s own output `out` in [`Gnn::forward_layer`]: nothing after
    /// the output layer, else the ReLU and, in training, the dropout keyed by the block's
    /// dst nodes.
    pub fn finish_layer(
        &self,
        l: usize,
        block: &Arc<Block>,
        out: Tensor,
        f: &Forward,
    ) -> Result<Tensor> {
        let p = self.config.shape.dropout;
        let dropout =
            (f.training && p > 0.0).then(|| (p, ops::dropout_key(f.seed, f.epoch, l as u64)));
        finish(&mut Eager, l + 1 >= self.layers.len(), dropout, block, out)
    }

    /// Layer `l`'s split for full-graph training's hybrid mode
    /// ([`crate::nn::layer::Layer::hybrid`]); `None` where its aggregation has weights.
    pub fn hybrid_layer(&self, l: usize) -> Option<&HybridEager> {
        self.layers.get(l).and_then(|layer| layer.hybrid())
    }
}

/// What follows a layer's output `out` on either executor: nothing after the output layer
/// (`last`), else the ReLU and, where `dropout` gives its probability and key, the dropout
/// keyed by the block's dst nodes; each input is freed once its successor exists.
pub fn finish<'b, E: Exec<'b>>(
    e: &mut E,
    last: bool,
    dropout: Option<(f64, u32)>,
    block: &E::Block,
    out: E::T,
) -> Result<E::T> {
    if last {
        return Ok(out);
    }
    let h = e.relu(&out)?;
    e.free(out);
    let Some((p, key)) = dropout else {
        return Ok(h);
    };
    let d = e.dropout(&h, p, key, block, false)?;
    e.free(h);
    Ok(d)
}

impl ModelConfig {
    /// [`Gnn::forward_layer`] in training mode on symbolic buffers: layer `l` (`spec`, one
    /// of [`ModelConfig::layer_specs`]) traced on `block`, its input `h` released, then
    /// [`ModelConfig::trace_finish`]. The memory estimator chains it as [`Gnn::forward`]
    /// chains the layers.
    pub fn trace_layer(
        &self,
        spec: &dyn LayerSpec,
        r: &mut Replay,
        l: usize,
        block: &SymBlock<'_>,
        h: Val,
        bucket_split: Option<usize>,
    ) -> Result<Val> {
        let out = spec.trace(r, &h, block, bucket_split)?;
        r.release(h.buf);
        self.trace_finish(r, l, block, out)
    }

    /// [`Gnn::finish_layer`] in training mode on symbolic buffers ([`finish`]).
    pub fn trace_finish(
        &self,
        r: &mut Replay,
        l: usize,
        block: &SymBlock<'_>,
        out: Val,
    ) -> Result<Val> {
        let p = self.shape.dropout;
        let dropout = (p > 0.0).then_some((p, 0));
        finish(r, l + 1 >= self.shape.layers, dropout, block, out)
    }
}

impl Module for Gnn {
    fn named_parameters(&self, prefix: &str) -> Vec<(String, Tensor)> {
        self.layers
            .iter()
            .enumerate()
            .flat_map(|(i, l)| l.named_parameters(&join(prefix, &format!("layers.{i}"))))
            .collect()
    }
}
