//! The one list of partitioners: name, help text and constructor of each. The CLI
//! (`--partitioner`, its help), `partition --compare`, the tests and the table in
//! docs/PARTITIONING.md all read [`REGISTRY`]; adding a partitioner is one entry here.

use crate::error::{Error, Result};
use crate::partition::{betty, buffalo, cherry, grem, metis, random, range, Partitioner};

/// One partitioner the engine offers: the name `--partitioner` takes, a line of help and
/// its constructor (default options).
pub struct Entry {
    /// The name (`--partitioner NAME`).
    pub name: &'static str,
    /// What it does, in a phrase (the CLI's help lists it).
    pub about: &'static str,
    /// A partitioner with its default options.
    pub make: fn() -> Box<dyn Partitioner>,
}

/// Every partitioner, in the order `partition --compare` runs them: the one list the CLI,
/// its help, `--compare` and the tests read (adding a partitioner is one entry here).
pub const REGISTRY: &[Entry] = &[
    Entry {
        name: "random",
        about: "a seeded shuffle cut into K equal chunks",
        make: || Box::new(random::RandomPartitioner),
    },
    Entry {
        name: "range",
        about: "K contiguous chunks of the batch's seeds",
        make: || Box::new(range::RangePartitioner),
    },
    Entry {
        name: "metis",
        about: "METIS k-way on the seed-induced graph",
        make: || Box::new(metis::MetisPartitioner::default()),
    },
    Entry {
        name: "betty",
        about: "Betty: METIS on the redundancy-embedded graph, seeds weighted by memory",
        make: || Box::new(betty::BettyPartitioner::default()),
    },
    Entry {
        name: "cherry",
        about: "Cherry: METIS on the out-degree-weighted message-flow graph, cut once",
        make: || Box::new(cherry::CherryPartitioner::default()),
    },
    Entry {
        name: "buffalo",
        about: "Buffalo: degree buckets split and grouped on a memory model",
        make: || Box::new(buffalo::BuffaloPartitioner::default()),
    },
    Entry {
        name: "grem",
        about: "Armada's GREM: streaming min-edge-cut with refinement passes",
        make: || Box::new(grem::GremPartitioner::default()),
    },
];

/// The names of [`REGISTRY`], in its order.
pub fn names() -> Vec<&'static str> {
    REGISTRY.iter().map(|e| e.name).collect()
}

/// The CLI's help for `--partitioner`, from [`REGISTRY`].
pub fn help() -> String {
    let list: Vec<String> = REGISTRY
        .iter()
        .map(|e| format!("{} ({})", e.name, e.about))
        .collect();
    format!(
        "How seeds are split into micro-batches: {}. See docs/PARTITIONING.md",
        list.join("; ")
    )
}

/// The partitioner called `name`.
pub fn by_name(name: &str) -> Result<Box<dyn Partitioner>> {
    match REGISTRY.iter().find(|e| e.name == name) {
        Some(e) => Ok((e.make)()),
        None => Err(Error::invalid(format!(
            "unknown partitioner `{name}`: expected one of {}",
            names().join(", ")
        ))),
    }
}
