//! What to generate: the presets (sizes and shapes copied from the papers' datasets) and
//! the spec `PRESET[,scale=X][,seed=N][,feat_dim=F][,classes=C]` that picks and scales one.

use std::str::FromStr;

use crate::error::{Error, Result};
use crate::graph::dataset::{MAX_CLASSES, MAX_FEAT_DIM};

/// Degree-distribution exponent.
pub const GAMMA: f64 = 2.1;
/// Train / valid / test fractions of generated graphs.
pub const SPLIT: (f64, f64, f64) = (0.10, 0.10, 0.20);

/// A named size and shape.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Preset {
    /// Name, e.g. `cora-like`.
    pub name: &'static str,
    /// Node count at scale 1.
    pub nodes: u64,
    /// Edge count at scale 1.
    pub edges: u64,
    /// Features per node.
    pub feat_dim: usize,
    /// Number of classes.
    pub classes: usize,
    /// Fraction of each node's out-edges drawn inside its class.
    pub homophily: f64,
    /// Single-node class separation in noise standard deviations (see
    /// [`crate::graph::synth`]).
    pub margin: f64,
    /// Degree-distribution exponent of the Chung-Lu weights, or `None` for equal weights
    /// (every in-degree within 1 of `edges / nodes`, out-degrees Poisson: a low-degree
    /// graph without hubs, shaped like a road network).
    pub gamma: Option<f64>,
}

/// The presets, named after the datasets whose counts they copy.
pub const PRESETS: [Preset; 6] = [
    Preset {
        name: "cora-like",
        nodes: 2_708,
        edges: 5_429,
        feat_dim: 1_433,
        classes: 7,
        homophily: 0.8,
        margin: 1.0,
        gamma: Some(GAMMA),
    },
    Preset {
        name: "arxiv-like",
        nodes: 169_343,
        edges: 1_166_243,
        feat_dim: 128,
        classes: 40,
        homophily: 0.65,
        margin: 1.6,
        gamma: Some(GAMMA),
    },
    Preset {
        name: "products-like",
        nodes: 2_449_029,
        edges: 61_859_140,
        feat_dim: 100,
        classes: 47,
        homophily: 0.8,
        margin: 1.8,
        gamma: Some(GAMMA),
    },
    Preset {
        name: "papers-like",
        nodes: 111_059_956,
        edges: 1_615_685_872,
        feat_dim: 128,
        classes: 172,
        homophily: 0.6,
        margin: 1.8,
        gamma: Some(GAMMA),
    },
    Preset {
        name: "as-like",
        nodes: 26_475,
        edges: 53_381,
        feat_dim: 100,
        classes: 10,
        homophily: 0.6,
        margin: 1.6,
        gamma: Some(GAMMA),
    },
    Preset {
        name: "road-like",
        nodes: 1_965_206,
        edges: 2_766_607,
        feat_dim: 100,
        classes: 10,
        homophily: 0.8,
        margin: 1.6,
        gamma: None,
    },
];

/// A preset, a scale and a seed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SynthSpec {
    /// The preset.
    pub preset: Preset,
    /// Multiplies the preset's node and edge counts.
    pub scale: f64,
    /// Seed of the generator.
    pub seed: u64,
}

fn spec_help() -> String {
    let names: Vec<&str> = PRESETS.iter().map(|p| p.name).collect();
    format!(
        "expected PRESET[,scale=X][,seed=N][,feat_dim=F][,classes=C] with PRESET one of {}",
        names.join(", ")
    )
}

impl SynthSpec {
    /// Parses `PRESET[,scale=X][,seed=N][,feat_dim=F][,classes=C]`.
    pub fn parse(spec: &str) -> Result<SynthSpec> {
        Self::parse_keys(spec).map(|(s, _)| s)
    }

    /// Parses `spec`, then takes `seed` when the spec has no `seed=`, and `feat_dim` /
    /// `classes` (when given) when the spec has no `feat_dim=` / `classes=`: the command
    /// line's `--seed`, `--feat-dim` and `--classes` apply to synthetic graphs too.
    pub fn with_defaults(
        spec: &str,
        seed: u64,
        feat_dim: Option<usize>,
        classes: Option<usize>,
    ) -> Result<SynthSpec> {
        let (mut s, keys) = Self::parse_keys(spec)?;
        if !keys.contains(&"seed") {
            s.seed = seed;
        }
        let flag = |name: &str, v: usize, max: usize| {
            if v == 0 || v > max {
                Err(Error::invalid(format!(
                    "--{name} {v}: must be between 1 and {max}"
                )))
            } else {
                Ok(v)
            }
        };
        if let (Some(f), false) = (feat_dim, keys.contains(&"feat_dim")) {
            s.preset.feat_dim = flag("feat-dim", f, MAX_FEAT_DIM)?;
        }
        if let (Some(c), false) = (classes, keys.contains(&"classes")) {
            s.preset.classes = flag("classes", c, MAX_CLASSES)?;
        }
        Ok(s)
    }

    /// Parses a spec and names the keys it gave.
    fn parse_keys(spec: &str) -> Result<(SynthSpec, Vec<&'static str>)> {
        let mut keys = Vec::new();
        let mut parts = spec.split(',').map(str::trim);
        let name = parts.next().unwrap_or("");
        let preset = PRESETS
            .iter()
            .find(|p| p.name.eq_ignore_ascii_case(name))
            .copied()
            .ok_or_else(|| {
                Error::invalid(format!("unknown synthetic graph {name:?}: {}", spec_help()))
            })?;
        let mut s = SynthSpec {
            preset,
            scale: 1.0,
            seed: 0,
        };
        for kv in parts.filter(|p| !p.is_empty()) {
            let bad = || {
                Error::invalid(format!(
                    "synthetic spec {spec:?}: bad {kv:?}; {}",
                    spec_help()
                ))
            };
            let (k, v) = kv.split_once('=').ok_or_else(bad)?;
            match k.trim() {
                "scale" => {
                    s.scale = v.trim().parse().map_err(|_| bad())?;
                    if !(s.scale.is_finite() && s.scale > 0.0) {
                        return Err(bad());
                    }
                }
                "seed" => {
                    s.seed = v.trim().parse().map_err(|_| bad())?;
                    keys.push("seed");
                }
                "feat_dim" => {
                    s.preset.feat_dim = v.trim().parse().map_err(|_| bad())?;
                    if !(1..=MAX_FEAT_DIM).contains(&s.preset.feat_dim) {
                        return Err(bad());
                    }
                    keys.push("feat_dim");
                }
                "classes" => {
                    s.preset.classes = v.trim().parse().map_err(|_| bad())?;
                    if !(1..=MAX_CLASSES).contains(&s.preset.classes) {
                        return Err(bad());
                    }
                    keys.push("classes");
                }
                _ => return Err(bad()),
            }
        }
        Ok((s, keys))
    }

    /// Nodes after scaling.
    pub fn num_nodes(&self) -> usize {
        (self.preset.nodes as f64 * self.scale).round() as usize
    }

    /// Edges after scaling.
    pub fn num_edges(&self) -> usize {
        (self.preset.edges as f64 * self.scale).round() as usize
    }

    /// The canonical spec (defaults left out).
    pub fn name(&self) -> String {
        let mut s = self.preset.name.to_string();
        if self.scale != 1.0 {
            s.push_str(&format!(",scale={}", self.scale));
        }
        if self.seed != 0 {
            s.push_str(&format!(",seed={}", self.seed));
        }
        let base = PRESETS.iter().find(|p| p.name == self.preset.name);
        if base.is_none_or(|b| b.feat_dim != self.preset.feat_dim) {
            s.push_str(&format!(",feat_dim={}", self.preset.feat_dim));
        }
        if base.is_none_or(|b| b.classes != self.preset.classes) {
            s.push_str(&format!(",classes={}", self.preset.classes));
        }
        s
    }
}

impl FromStr for SynthSpec {
    type Err = Error;
    fn from_str(s: &str) -> Result<SynthSpec> {
        SynthSpec::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs() {
        let s = SynthSpec::parse("products-like,scale=0.01,seed=3").unwrap();
        assert_eq!(s.preset.name, "products-like");
        assert_eq!((s.num_nodes(), s.num_edges(), s.seed), (24_490, 618_591, 3));
        assert_eq!(s.name(), "products-like,scale=0.01,seed=3");
        // Flags fill what the spec leaves out; the name says what was used and re-parses.
        let f = SynthSpec::with_defaults("cora-like", 5, Some(16), Some(3)).unwrap();
        assert_eq!((f.seed, f.preset.feat_dim, f.preset.classes), (5, 16, 3));
        assert_eq!(f.name(), "cora-like,seed=5,feat_dim=16,classes=3");
        assert_eq!(SynthSpec::parse(&f.name()).unwrap(), f);
        let own = SynthSpec::with_defaults("cora-like,seed=2,classes=4", 5, None, Some(3)).unwrap();
        assert_eq!(
            (own.seed, own.preset.classes, own.preset.feat_dim),
            (2, 4, 1433)
        );
        assert!(SynthSpec::with_defaults("cora-like", 0, Some(0), None).is_err());
        assert_eq!("cora-like".parse::<SynthSpec>().unwrap().scale, 1.0);
        for bad in [
            "",
            "citeseer-like",
            "cora-like,scale=0",
            "cora-like,scale=x",
            "cora-like,foo=1",
            "cora-like,seed",
            "cora-like,classes=0",
            "cora-like,feat_dim=x",
        ] {
            match SynthSpec::parse(bad) {
                Err(Error::InvalidArgument(m)) => {
                    assert!(
                        m.contains(
                            "cora-like, arxiv-like, products-like, papers-like, as-like, road-like"
                        ),
                        "{m}"
                    )
                }
                other => panic!("{bad:?}: expected an error, got {other:?}"),
            }
        }
    }
}
