//! Partitioned graphs on paper (issue 20 item 5, `docs/DISTRIBUTED.md`): each of N machines
//! holds one part of the graph and its nodes' features, and trains the training seeds it
//! owns (owner-compute). What a machine must fetch per epoch is the feature rows of the
//! input nodes of its seeds' sampled neighbourhood that another machine owns.

use crate::error::{Error, Result};
use crate::graph::{sample_blocks, Csr};

/// One machine's share of an epoch (one full batch of its seeds).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartFetch {
    /// Training seeds the machine owns.
    pub seeds: usize,
    /// Input nodes of their sampled blocks (the first block's sources).
    pub input_nodes: usize,
    /// Of those, nodes owned by another machine: rows fetched over the network.
    pub remote_inputs: usize,
}

/// Per part of `labels` (`k` parts): the training `seeds` it owns, sampled with `fanouts`
/// (input layer first) from `graph` as one batch, and how many of the batch's input nodes
/// another part owns.
pub fn remote_inputs(
    graph: &Csr,
    labels: &[u32],
    k: usize,
    seeds: &[u32],
    fanouts: &[i64],
    seed: u64,
) -> Result<Vec<PartFetch>> {
    if labels.len() != graph.num_nodes {
        return Err(Error::invalid(format!(
            "remote_inputs: {} labels for {} nodes",
            labels.len(),
            graph.num_nodes
        )));
    }
    let mut own: Vec<Vec<u32>> = vec![Vec::new(); k];
    for &s in seeds {
        let l = *labels
            .get(s as usize)
            .ok_or_else(|| Error::invalid(format!("remote_inputs: seed {s} out of range")))?
            as usize;
        if l >= k {
            return Err(Error::invalid(format!(
                "remote_inputs: label {l} of node {s} for {k} parts"
            )));
        }
        own[l].push(s);
    }
    own.iter()
        .enumerate()
        .map(|(r, mine)| {
            if mine.is_empty() {
                return Ok(PartFetch {
                    seeds: 0,
                    input_nodes: 0,
                    remote_inputs: 0,
                });
            }
            let blocks = sample_blocks(graph, mine, fanouts, seed ^ r as u64)?;
            let inputs = &blocks[0].src_nodes;
            Ok(PartFetch {
                seeds: mine.len(),
                input_nodes: inputs.len(),
                remote_inputs: inputs
                    .iter()
                    .filter(|&&v| labels[v as usize] as usize != r)
                    .count(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A path 0-1-2-3 (both directions), cut in the middle.
    fn path() -> Csr {
        Csr::from_edges(4, &[0, 1, 1, 2, 2, 3], &[1, 0, 2, 1, 3, 2]).unwrap()
    }

    #[test]
    fn only_neighbours_across_the_cut_are_fetched() {
        let g = path();
        let labels = [0, 0, 1, 1];
        // Seed 1 (part 0) reads 0 and 2 at one hop: 2 is remote. Seed 3 (part 1) reads 2.
        let f = remote_inputs(&g, &labels, 2, &[1, 3], &[-1], 0).unwrap();
        assert_eq!(f[0].seeds, 1);
        assert_eq!(f[0].remote_inputs, 1);
        assert_eq!(f[1].remote_inputs, 0);
        // Two hops from seed 1 reach 3 as well.
        let f = remote_inputs(&g, &labels, 2, &[1], &[-1, -1], 0).unwrap();
        assert_eq!((f[0].input_nodes, f[0].remote_inputs), (4, 2));
    }

    #[test]
    fn one_part_fetches_nothing_and_bad_labels_are_errors() {
        let g = path();
        let f = remote_inputs(&g, &[0; 4], 1, &[0, 1, 2, 3], &[-1, -1], 0).unwrap();
        assert_eq!(f[0].remote_inputs, 0);
        assert!(remote_inputs(&g, &[0; 3], 1, &[0], &[-1], 0).is_err());
        assert!(remote_inputs(&g, &[0, 0, 5, 0], 2, &[2], &[-1], 0).is_err());
    }
}
