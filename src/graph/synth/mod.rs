//! Seeded synthetic graphs shaped like the papers' datasets: power-law degrees, planted
//! classes, homophilous edges and class-dependent features.
//!
//! Spec: `PRESET[,scale=X][,seed=N][,feat_dim=F][,classes=C]`, e.g.
//! `products-like,scale=0.01`; `scale` multiplies the preset's node and edge counts
//! (rounded), `seed` (default 0) fixes every random draw, `feat_dim` and `classes` replace
//! the preset's. [`SynthSpec::with_defaults`] fills what the spec leaves out from
//! `--seed`, `--feat-dim` and `--classes`.
//!
//! | preset | nodes | edges | features | classes | homophily h |
//! |---|---|---|---|---|---|
//! | `cora-like` | 2,708 | 5,429 | 1,433 | 7 | 0.8 |
//! | `arxiv-like` | 169,343 | 1,166,243 | 128 | 40 | 0.65 |
//! | `products-like` | 2,449,029 | 61,859,140 | 100 | 47 | 0.8 |
//! | `papers-like` | 111,059,956 | 1,615,685,872 | 128 | 172 | 0.6 |
//! | `as-like` | 26,475 | 53,381 | 100 | 10 | 0.6 |
//! | `road-like` | 1,965,206 | 2,766,607 | 100 | 10 | 0.8 |
//!
//! `as-like` copies the counts of CAIDA's AS-relationship graph (as-caida, 2007): a
//! power-law graph of mean degree 4 where most nodes have one or two neighbours.
//! `road-like` copies roadNet-CA's counts with equal node weights instead of a power law:
//! every node has 1 or 2 in-edges, no hubs (but no planar locality either).
//!
//! The model:
//!
//! - **Classes**: uniform over the preset's classes; labels are the classes.
//! - **Degrees** (directed Chung-Lu, as the peer's `--synthetic`; `road-like` has equal
//!   weights instead): node weights
//!   `w = (rank + i0)^(-1/(gamma-1))` with `gamma = 2.1` over a random permutation of ranks,
//!   `i0` set so that the largest expected degree is `sqrt(edges)`. Node `v` gets
//!   `round(edges * W(v) / W)` in-edges (systematic rounding of the cumulative weight `W(v)`,
//!   so there are exactly `edges` edges and each in-degree is within 1 of its expectation);
//!   out-degrees follow `w` in expectation.
//! - **Edges**: each in-edge of `v` comes, with probability `h`, from a node of `v`'s class
//!   and otherwise from any node, in both cases drawn with probability proportional to `w`
//!   (alias tables). No self-loops, no duplicate edges. About `h + (1 - h) / classes` of the
//!   edges join nodes of one class. The CSR is built directly, row by row in parallel, and
//!   its order is the edge order (a written copy lists edges grouped by destination).
//! - **Features**: `(centroid[class] + sigma * N(0, I)) / sqrt(1 + sigma^2)`, centroid entries
//!   N(0,1), rounded to 4 decimals. `sigma = sqrt(features / 2) / margin` makes a single
//!   node's nearest centroid a `margin`-sigma decision per competing class, which leaves an
//!   MLP well short of a GNN: averaging `d` mostly same-class neighbours shrinks the noise
//!   by about `sqrt(d)`.
//! - **Split**: random 10% train / 10% valid / 20% test ([`SPLIT`]).
//!
//! Generation runs in fixed-size node chunks, each with its own
//! [`Rng::fork`](crate::rng::Rng::fork) stream, and no float reduction depends on the
//! thread count: the output is identical for any number of threads.

mod alias;
mod draws;
mod edges;
mod features;
mod generate;
mod spec;

pub use generate::{check_sizes, generate, generate_to_ogb};
pub use spec::{Preset, SynthSpec, GAMMA, PRESETS, SPLIT};
