//! Multi-layer GNN models over a list of blocks (input layer first).
//!
//! Between layers: ReLU, then dropout (not on the input, not after the last layer), as in
//! the PyG peer. Dropout masks are keyed by (seed, epoch, layer) and by each row's global
//! node id, so splitting a batch into micro-batches does not change them.
//!
//! A model is a stack of layers ([`crate::nn::layer`]): [`ModelConfig::layer_specs`] lists
//! them before they have weights, [`Gnn::new`] builds them, and the memory estimator
//! replays the same specs. Which kinds exist is the registry [`MODELS`]; each kind's file
//! (`sage.rs`, `gcn.rs`, `gat.rs`) holds its entry, its config and its layer, so nothing
//! here matches on the kind.

use std::sync::Arc;

use crate::device::Device;
use crate::error::{Error, Result};
use crate::graph::{Block, BlockSizes};
use crate::nn::config::Aggregator;
pub use crate::nn::config::{Forward, ModelConfig, ModelKind};
use crate::nn::layer::{BuildCtx, HybridLayer, KindConfig, Layer, LayerAt, LayerSpec, ModelEntry};
use crate::nn::module::{join, Module};
use crate::nn::replay::{Replay, Val};
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

/// Most values one parameter tensor may hold: the GPU kernels index buffers with 32-bit
/// integers, and every backend runs the same models. [`ModelConfig::validate`] checks it
/// before anything is allocated.
pub const MAX_PARAMETER_VALUES: u64 = u32::MAX as u64;

impl ModelConfig {
    /// Checks the values a user can get wrong.
    pub fn validate(&self) -> Result<()> {
        if self.layers == 0 {
            return Err(Error::invalid("a model needs at least one layer"));
        }
        if self.in_dim == 0 || self.hidden == 0 || self.out_dim == 0 {
            return Err(Error::invalid(format!(
                "model widths must be positive (input {}, hidden {}, classes {})",
                self.in_dim, self.hidden, self.out_dim
            )));
        }
        if !(0.0..1.0).contains(&self.dropout) {
            return Err(Error::invalid(format!(
                "dropout {} must be in [0, 1)",
                self.dropout
            )));
        }
        self.kind_config().validate()?;
        self.check_sizes()?;
        Ok(())
    }

    /// The model as a user names it, with only what applies to its kind: `sage-mean`,
    /// `sage-lstm`, `gcn`, `gat (4 heads)`.
    pub fn label(&self) -> String {
        self.kind_config().label()
    }

    /// The settings only this configuration's kind reads, as its own type.
    pub fn kind_config(&self) -> Box<dyn KindConfig> {
        (self.kind.entry().config)(self)
    }

    /// The model's layers before they have weights, input layer first: what
    /// [`Gnn::new`] builds and the memory estimator replays.
    pub fn layer_specs(&self) -> Vec<Box<dyn LayerSpec>> {
        let kind = self.kind_config();
        (0..self.layers)
            .map(|l| {
                let (in_dim, out_dim) = self.widths_of(kind.as_ref(), l);
                kind.layer(LayerAt {
                    index: l,
                    last: l + 1 == self.layers,
                    in_dim,
                    out_dim,
                })
            })
            .collect()
    }

    /// The widths that set a tensor's size, for errors: `input 1433, hidden 256, 4 heads,
    /// 7 classes` (heads only for GAT).
    fn describe_widths(&self) -> String {
        let heads = self.kind_config().width_note();
        format!(
            "input {}, hidden {}{heads}, {} classes",
            self.in_dim, self.hidden, self.out_dim
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
        let kind = self.kind_config();
        kind.hidden_width(self.hidden).ok_or_else(too_big)?;
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
        self.widths_of(self.kind_config().as_ref(), l)
    }

    fn widths_of(&self, kind: &dyn KindConfig, l: usize) -> (usize, usize) {
        let hidden_out = kind.hidden_width(self.hidden).unwrap_or(usize::MAX);
        let i = if l == 0 { self.in_dim } else { hidden_out };
        let o = if l + 1 == self.layers {
            self.out_dim
        } else {
            hidden_out
        };
        (i, o)
    }
}

/// Builder-style setters, one per field: `ModelConfig::default().kind(ModelKind::Gcn).hidden(64)`.
impl ModelConfig {
    /// Sets the model kind.
    pub fn kind(mut self, kind: ModelKind) -> Self {
        self.kind = kind;
        self
    }
    /// Sets the SAGE aggregator.
    pub fn aggr(mut self, aggr: Aggregator) -> Self {
        self.aggr = aggr;
        self
    }
    /// Sets the input width (0: taken from the dataset by `Trainer::new`).
    pub fn in_dim(mut self, n: usize) -> Self {
        self.in_dim = n;
        self
    }
    /// Sets the hidden width.
    pub fn hidden(mut self, n: usize) -> Self {
        self.hidden = n;
        self
    }
    /// Sets the output width (0: the dataset's class count, by `Trainer::new`).
    pub fn out_dim(mut self, n: usize) -> Self {
        self.out_dim = n;
        self
    }
    /// Sets the number of layers.
    pub fn layers(mut self, n: usize) -> Self {
        self.layers = n;
        self
    }
    /// Sets the dropout probability.
    pub fn dropout(mut self, p: f64) -> Self {
        self.dropout = p;
        self
    }
    /// Sets GAT's attention heads.
    pub fn heads(mut self, n: usize) -> Self {
        self.heads = n;
        self
    }
    /// Sets GAT's attention dropout.
    pub fn attn_dropout(mut self, p: f64) -> Self {
        self.attn_dropout = p;
        self
    }
    /// Sets whether GAT adds a self-loop to every dst node without one.
    pub fn self_loops(mut self, on: bool) -> Self {
        self.self_loops = on;
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
        let mut h = out;
        if l + 1 < self.layers.len() {
            h = ops::relu(&h)?;
            if f.training && self.config.dropout > 0.0 {
                let key = ops::dropout_key(f.seed, f.epoch, l as u64);
                let ids =
                    Tensor::from_u32(block.dst_nodes().to_vec(), &[block.num_dst], h.device())?;
                h = ops::dropout(&h, self.config.dropout, key, Some(&ids))?;
            }
        }
        Ok(h)
    }

    /// Layer `l`'s split for full-graph training's hybrid mode
    /// ([`crate::nn::layer::Layer::hybrid`]); `None` where its aggregation has weights.
    pub fn hybrid_layer(&self, l: usize) -> Option<&dyn HybridLayer> {
        self.layers.get(l).and_then(|layer| layer.hybrid())
    }
}

impl ModelConfig {
    /// Replay of [`Gnn::forward_layer`] in training mode on symbolic buffers: layer `l`
    /// (`spec`, one of [`ModelConfig::layer_specs`]) on a block of `sizes`, its input `h`
    /// released, then the ReLU and the dropout between layers except after the output
    /// layer. The memory estimator chains it as [`Gnn::forward`] chains the layers.
    pub fn replay_layer(
        &self,
        spec: &dyn LayerSpec,
        r: &mut Replay,
        l: usize,
        sizes: &BlockSizes,
        h: Val,
        bucket_split: Option<usize>,
    ) -> Val {
        let out = spec.replay(r, &h, sizes, bucket_split);
        r.release(h.buf);
        self.replay_finish(r, l, sizes, out)
    }

    /// Replay of [`Gnn::finish_layer`] in training mode: the ReLU and the dropout between
    /// layers (releasing each input), nothing after the output layer.
    pub fn replay_finish(&self, r: &mut Replay, l: usize, sizes: &BlockSizes, out: Val) -> Val {
        let mut out = out;
        if l + 1 < self.layers {
            let a = r.relu(&out);
            r.release(out.buf);
            out = a;
            if self.dropout > 0.0 {
                let ids = r.input(sizes.num_dst, 1);
                let d = r.dropout(&out, &ids);
                r.release(out.buf);
                r.release(ids.buf);
                out = d;
            }
        }
        out
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
