//! Model configurations: each kind's own settings type, the registry of kinds (defaults,
//! parsing of the flags only a kind reads, hybrid support), and the JSON the output and
//! checkpoints carry, which keeps the flat field names of the single configuration struct
//! of earlier versions, so their checkpoints still resume.

use std::sync::Arc;

use espalier::error::Error;
use espalier::graph::{self, LoadOptions};
use espalier::nn::{
    Aggregator, GatConfig, GcnConfig, Hybrid, ModelConfig, ModelFlags, ModelKind, SageConfig,
    MODELS,
};
use espalier::train::{checkpoint, TrainConfig, Trainer};
use serde_json::json;

fn flat(m: &ModelConfig) -> serde_json::Value {
    serde_json::to_value(m).unwrap()
}

#[test]
fn each_kind_serializes_flat_with_only_its_own_settings_under_the_old_names() {
    let shape = |kind: &str| json!({"kind": kind, "in_dim": 7, "hidden": 5, "out_dim": 3, "layers": 2, "dropout": 0.5});
    let with = |mut v: serde_json::Value, extra: serde_json::Value| {
        let m = v.as_object_mut().unwrap();
        m.extend(extra.as_object().unwrap().clone());
        v
    };
    let sized = |m: ModelConfig| m.in_dim(7).hidden(5).out_dim(3);
    assert_eq!(
        flat(&sized(ModelConfig::new(SageConfig {
            aggr: Aggregator::Lstm
        }))),
        with(shape("sage"), json!({"aggr": "lstm"}))
    );
    assert_eq!(flat(&sized(ModelConfig::new(GcnConfig))), shape("gcn"));
    assert_eq!(
        flat(&sized(ModelConfig::new(GatConfig {
            heads: 2,
            attn_dropout: 0.25,
            self_loops: false
        }))),
        with(
            shape("gat"),
            json!({"heads": 2, "attn_dropout": 0.25, "self_loops": false})
        )
    );
}

#[test]
fn registry_defaults_are_the_parse_of_no_flags_and_name_their_kind() {
    for m in MODELS {
        let default = (m.default)();
        assert_eq!(default.kind(), m.kind, "{}", m.name());
        let parsed = (m.parse)(&ModelFlags::new()).unwrap();
        assert_eq!(
            format!("{default:?}"),
            format!("{parsed:?}"),
            "{}",
            m.name()
        );
        assert_eq!(ModelConfig::of(m.kind).kind(), m.kind);
        for name in m.names {
            assert_eq!(name.parse::<ModelKind>().unwrap(), m.kind);
        }
    }
    // The CLI's defaults, unchanged: SAGE-mean; GAT with 4 heads, no attention dropout,
    // self-loops.
    let sage = ModelConfig::default();
    assert_eq!(
        sage.settings_as::<SageConfig>().unwrap().aggr,
        Aggregator::Mean
    );
    assert_eq!(
        (sage.shape.hidden, sage.shape.layers, sage.shape.dropout),
        (256, 2, 0.5)
    );
    let gat = ModelConfig::of(ModelKind::Gat);
    assert_eq!(
        gat.settings_as::<GatConfig>().copied(),
        Some(GatConfig {
            heads: 4,
            attn_dropout: 0.0,
            self_loops: true
        })
    );
    assert!(gat.settings_as::<SageConfig>().is_none());
}

#[test]
fn flags_parse_into_the_kinds_settings_and_bad_values_name_the_flag() {
    let flags = ModelFlags::new()
        .with("--heads", "2")
        .with("--attn-dropout", "0.5")
        .with("--self-loops", "false");
    let gat = ModelKind::Gat.settings(&flags).unwrap();
    assert_eq!(
        gat.as_any().downcast_ref::<GatConfig>().copied(),
        Some(GatConfig {
            heads: 2,
            attn_dropout: 0.5,
            self_loops: false
        })
    );
    let sage = ModelKind::Sage
        .settings(&ModelFlags::new().with("--aggr", "pool"))
        .unwrap();
    assert_eq!(sage.label(), "sage-pool");
    for (kind, flag, value) in [
        (ModelKind::Gat, "--heads", "0"),
        (ModelKind::Gat, "--heads", "two"),
        (ModelKind::Gat, "--attn-dropout", "1"),
        (ModelKind::Gat, "--self-loops", "yes"),
        (ModelKind::Sage, "--aggr", "median"),
    ] {
        let e = kind
            .settings(&ModelFlags::new().with(flag, value))
            .unwrap_err();
        assert!(
            matches!(e, Error::InvalidFlag { flag: f, .. } if f == flag),
            "{flag} {value}: {e}"
        );
    }
}

#[test]
fn a_flag_another_kind_reads_is_an_invalid_flag_naming_it_and_its_readers() {
    for (kind, flag, reader) in [
        (ModelKind::Sage, "--heads", "gat"),
        (ModelKind::Gcn, "--attn-dropout", "gat"),
        (ModelKind::Gcn, "--aggr", "sage"),
        (ModelKind::Gat, "--aggr", "sage"),
    ] {
        let e = kind
            .settings(&ModelFlags::new().with(flag, "1"))
            .unwrap_err();
        let Error::InvalidFlag { flag: f, msg } = &e else {
            panic!("{e:?} is not an InvalidFlag");
        };
        assert_eq!(*f, flag);
        assert!(msg.contains(&format!("only {reader} reads it")), "{msg}");
    }
}

#[test]
fn hybrid_support_in_the_registry_is_what_the_layers_offer() {
    // Every layer below the output layer must split into an aggregation and an update.
    let hybrid = |m: &ModelConfig| {
        let specs = m.clone().in_dim(4).hidden(3).out_dim(2).layer_specs();
        specs.iter().all(|s| s.hybrid().is_some())
    };
    for m in MODELS {
        let default = ModelConfig::of(m.kind);
        match m.hybrid {
            Hybrid::Yes => assert!(hybrid(&default), "{}", m.name()),
            Hybrid::No => assert!(!hybrid(&default), "{}", m.name()),
            Hybrid::With(_) => {}
        }
    }
    // SAGE's claim, aggregator by aggregator.
    assert_eq!(
        MODELS
            .iter()
            .find(|m| m.kind == ModelKind::Sage)
            .unwrap()
            .hybrid,
        Hybrid::With("with --aggr mean or sum")
    );
    for aggr in [
        Aggregator::Mean,
        Aggregator::Sum,
        Aggregator::Max,
        Aggregator::Pool,
        Aggregator::Lstm,
    ] {
        let want = matches!(aggr, Aggregator::Mean | Aggregator::Sum);
        assert_eq!(
            hybrid(&ModelConfig::new(SageConfig { aggr })),
            want,
            "{aggr:?}"
        );
    }
    assert_eq!(
        espalier::nn::hybrid_models(),
        "sage with --aggr mean or sum, or gcn"
    );
}

/// Writes a checkpoint of `t` whose configuration JSON is `t`'s with `model` fields
/// replaced or added, as a checkpoint of an earlier version would hold it.
fn checkpoint_with(t: &Trainer, path: &std::path::Path, model: serde_json::Value) {
    let mut config = serde_json::to_value(&t.state.config).unwrap();
    let m = config["model"].as_object_mut().unwrap();
    m.extend(model.as_object().unwrap().clone());
    checkpoint::save(
        path,
        &t.state.model,
        t.state.optim.as_ref(),
        0,
        &config.to_string(),
        &[],
    )
    .unwrap();
}

#[test]
fn checkpoints_of_the_flat_configuration_resume_and_a_changed_setting_is_named() {
    let data = graph::load("synthetic:cora-like,scale=0.1", &LoadOptions::default()).unwrap();
    let graph = Arc::new(data.graph.symmetrize());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.safetensors");
    let trainer = |model: ModelConfig| {
        let config = TrainConfig::default()
            .model(model.hidden(8))
            .fanouts(vec![5, 5])
            .epochs(1);
        Trainer::new(&data, graph.clone(), config).unwrap()
    };
    // A GCN checkpoint of the flat struct carried every kind's settings: GCN ignores them.
    let mut gcn = trainer(ModelConfig::of(ModelKind::Gcn));
    let old_gcn = json!({"aggr": "mean", "heads": 4, "attn_dropout": 0.0, "self_loops": true});
    checkpoint_with(&gcn, &path, old_gcn);
    gcn.resume(&path).unwrap();
    // A SAGE checkpoint with another aggregator is refused, naming the field.
    let mut sage = trainer(ModelConfig::default());
    checkpoint_with(&sage, &path, json!({"aggr": "lstm", "heads": 4}));
    let e = sage.resume(&path).unwrap_err().to_string();
    assert!(
        e.contains("model.aggr (\"lstm\" in the checkpoint, \"mean\" now)"),
        "{e}"
    );
}

#[test]
fn the_training_guides_model_table_is_the_registry() {
    let readme = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/docs/guide/training.md"
    ))
    .unwrap();
    let header = "| `--model` | what it is | its own flags | `--hybrid` |\n|---|---|---|---|\n";
    let at = readme
        .find(header)
        .expect("docs/guide/training.md has no model table")
        + header.len();
    let table: Vec<Vec<String>> = readme[at..]
        .lines()
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            l.trim_matches('|')
                .split(" | ")
                .map(|c| c.trim().to_string())
                .collect()
        })
        .collect();
    let registry: Vec<Vec<String>> = MODELS
        .iter()
        .map(|m| {
            let flags: Vec<String> = m.flags.iter().map(|(f, _)| format!("`{f}`")).collect();
            let flags = if flags.is_empty() {
                "–".to_string()
            } else {
                flags.join(", ")
            };
            let hybrid = match m.hybrid {
                Hybrid::No => "no".to_string(),
                Hybrid::Yes => "yes".to_string(),
                Hybrid::With(when) => when.to_string(),
            };
            vec![format!("`{}`", m.name()), m.help.to_string(), flags, hybrid]
        })
        .collect();
    assert_eq!(
        table, registry,
        "docs/guide/training.md's model table is not the registry"
    );
}
