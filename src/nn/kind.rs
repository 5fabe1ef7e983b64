//! A model kind as the registry ([`crate::nn::model::MODELS`]) knows it: its own settings
//! ([`KindConfig`], one type per kind in the kind's file: `SageConfig`, `GcnConfig`,
//! `GatConfig`), and its entry ([`ModelEntry`]): names, help, the flags only it reads and
//! how it parses them ([`ModelFlags`]), its default settings, and whether full-graph
//! training's hybrid mode can run it ([`Hybrid`]). The CLI, its help and the README's
//! model table read the entries, and nothing outside a kind's file matches on the kind;
//! but the CLI declares each kind's own flags (`--aggr`, `--heads`, ...) as fields of its
//! flag struct, since clap needs them at compile time, so a kind with a new flag also adds
//! that field in `cli/src/common.rs` (its help and parsing still come from the entry).

use std::any::Any;
use std::fmt::{Debug, Display};
use std::str::FromStr;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::nn::config::ModelKind;
use crate::nn::layer::{LayerAt, LayerSpec};

/// A model kind's own settings: what its layers read beside the shared shape
/// ([`crate::nn::config::ModelShape`]). Serialized (through [`KindFields`]) flat beside the
/// shape in the JSON output and checkpoints, under the names the flat configuration of
/// earlier versions used, so their checkpoints still compare field by field.
pub trait KindConfig: KindFields + Debug + Send + Sync {
    /// The kind these settings configure.
    fn kind(&self) -> ModelKind;

    /// Checks the settings (for a configuration built in code; the CLI's flags are checked
    /// by [`ModelEntry::parse`], naming the flag).
    fn validate(&self) -> Result<()> {
        Ok(())
    }

    /// The model as a user names it (`sage-mean`, `gcn`, `gat (4 heads)`).
    fn label(&self) -> String;

    /// What this kind adds to the widths in errors (`, 4 heads`); empty by default.
    fn width_note(&self) -> String {
        String::new()
    }

    /// Output width of a hidden layer of `hidden` features (GAT: heads × hidden);
    /// `None` when it overflows.
    fn hidden_width(&self, hidden: usize) -> Option<usize> {
        Some(hidden)
    }

    /// The kind's own flags that multiply its parameters' sizes, each with its value and
    /// these settings with it lowered to 1: the CLI tries them to name the flag that makes
    /// a model too large. None by default.
    fn width_flags(&self) -> Vec<WidthFlag> {
        Vec::new()
    }

    /// Whether the layers aggregate per degree bucket, so that `--lstm-split`
    /// ([`crate::nn::Gnn::set_lstm_split`]) applies.
    fn splits_buckets(&self) -> bool {
        false
    }

    /// Whether the output layer is built unlike the hidden ones (GAT's single head), so
    /// that the model without it is not a model of this kind with its hidden layers
    /// (`Trainer::embeddings` needs that one).
    fn output_layer_differs(&self) -> bool {
        false
    }

    /// The model's layer at `at`.
    fn layer(&self, at: LayerAt) -> Box<dyn LayerSpec>;
}

/// One of [`KindConfig::width_flags`].
pub struct WidthFlag {
    /// The flag, e.g. `--heads`.
    pub flag: &'static str,
    /// Its value in these settings.
    pub value: String,
    /// The settings with the flag at 1.
    pub lowered: Arc<dyn KindConfig>,
}

/// What every [`KindConfig`] gets from its derives (`serde::Serialize`, `Debug`):
/// its fields as JSON, and a downcast to its own type.
pub trait KindFields: Any {
    /// The settings' fields as a JSON object (or null for a kind without settings).
    fn fields(&self) -> serde_json::Result<serde_json::Value>;

    /// `self`, for [`crate::nn::ModelConfig::settings_as`].
    fn as_any(&self) -> &dyn Any;
}

impl<T: serde::Serialize + Any> KindFields for T {
    fn fields(&self) -> serde_json::Result<serde_json::Value> {
        serde_json::to_value(self)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// Whether full-graph training's hybrid mode (`--hybrid`) runs a kind: its layers below the
/// output layer must aggregate without weights ([`crate::nn::HybridLayer`]). What the
/// help, the docs and `--hybrid`'s error say; the layers decide
/// ([`crate::nn::Gnn::hybrid_layer`]), and a test holds the two together.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hybrid {
    /// Never: every aggregation has weights.
    No,
    /// Always.
    Yes,
    /// With these settings only (as a user gives them: `with --aggr mean or sum`).
    With(&'static str),
}

/// One model kind of the registry ([`crate::nn::model::MODELS`]).
pub struct ModelEntry {
    /// The kind.
    pub kind: ModelKind,
    /// The names `--model` takes; the first is the kind's own.
    pub names: &'static [&'static str],
    /// One line for the help and the docs.
    pub help: &'static str,
    /// The flags only this kind reads, as `(flag, help)`; another kind given one of them
    /// is an error naming it.
    pub flags: &'static [(&'static str, &'static str)],
    /// The kind's default settings (the CLI's defaults).
    pub default: fn() -> Arc<dyn KindConfig>,
    /// The kind's settings from the defaults and the flags given, each checked: a bad
    /// value is [`Error::InvalidFlag`] naming its flag. It reads only [`ModelEntry::flags`].
    pub parse: fn(&ModelFlags) -> Result<Arc<dyn KindConfig>>,
    /// Whether `--hybrid` runs it.
    pub hybrid: Hybrid,
}

impl ModelEntry {
    /// The kind's own name.
    pub fn name(&self) -> &'static str {
        self.names[0]
    }

    /// Whether this kind reads `flag`.
    pub fn reads(&self, flag: &str) -> bool {
        self.flags.iter().any(|(f, _)| *f == flag)
    }
}

/// The model flags a user gave, as text by flag (`--heads`, `4`): what
/// [`ModelEntry::parse`] reads.
#[derive(Clone, Debug, Default)]
pub struct ModelFlags {
    given: Vec<(&'static str, String)>,
}

impl ModelFlags {
    /// No flags: the kind's defaults.
    pub fn new() -> Self {
        ModelFlags::default()
    }

    /// With `flag` given as `value`.
    pub fn with(mut self, flag: &'static str, value: impl Into<String>) -> Self {
        self.given.retain(|(f, _)| *f != flag);
        self.given.push((flag, value.into()));
        self
    }

    /// The flags given, in order.
    pub fn names(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.given.iter().map(|(f, _)| *f)
    }

    /// `flag`'s value, `None` when not given; a value that does not parse as `T` is
    /// [`Error::InvalidFlag`] naming the flag.
    pub fn get<T>(&self, flag: &'static str) -> Result<Option<T>>
    where
        T: FromStr,
        T::Err: Display,
    {
        self.get_with(flag, |s| s.parse::<T>().map_err(|e| e.to_string()))
    }

    /// [`ModelFlags::get`] with a parser whose error is this crate's.
    pub fn get_parsed<T>(
        &self,
        flag: &'static str,
        parse: fn(&str) -> Result<T>,
    ) -> Result<Option<T>> {
        self.get_with(flag, |s| {
            parse(s).map_err(|e| match e {
                Error::InvalidArgument(m) | Error::InvalidFlag { msg: m, .. } => m,
                other => other.to_string(),
            })
        })
    }

    fn get_with<T>(
        &self,
        flag: &'static str,
        parse: impl Fn(&str) -> std::result::Result<T, String>,
    ) -> Result<Option<T>> {
        let Some((_, value)) = self.given.iter().find(|(f, _)| *f == flag) else {
            return Ok(None);
        };
        parse(value)
            .map(Some)
            .map_err(|why| Error::flag(flag, format!("{flag} {value}: {why}")))
    }
}
