//! The symbolic backward pass: [`crate::autograd`]'s traversal and gradient merging, over
//! the replay's buffers.

use std::collections::{HashMap, HashSet};

use super::{Par, Replay, Val};

impl Replay {
    /// Mirror of [`crate::autograd::backward`] from the scalar `root` (`seed: None`), or of
    /// [`crate::autograd::backward_with`] with the buffer `seed` as its gradient (shared
    /// for the pass, as the detached copy shares it).
    pub fn backward(&mut self, root: &Val, seed: Option<usize>) {
        let seed = match seed {
            Some(b) => self.share(b),
            None => self.alloc(1, 1),
        };
        let Some(root_node) = root.node else {
            self.release(seed);
            return;
        };
        let order = self.topological_order(root_node);
        let mut grads: HashMap<usize, usize> = HashMap::new();
        grads.insert(root_node, seed);
        for id in order {
            let Some(g) = grads.remove(&id) else { continue };
            let Some(rule) = self.nodes[id].rule.take() else {
                continue;
            };
            let outs = rule(self, g);
            for b in std::mem::take(&mut self.nodes[id].saved) {
                self.release(b);
            }
            self.release(g);
            let parents = std::mem::take(&mut self.nodes[id].parents);
            for (p, o) in parents.iter().zip(outs) {
                let Some(o) = o else { continue };
                match *p {
                    Par::None => self.release(o),
                    Par::Leaf(l) => match self.leaf_grads[l] {
                        None => self.leaf_grads[l] = Some(o),
                        // Accumulated in place.
                        Some(_) => self.release(o),
                    },
                    Par::Node(n) => {
                        let merged = match grads.remove(&n) {
                            Some(prev) => self.merge(prev, o),
                            None => o,
                        };
                        grads.insert(n, merged);
                    }
                }
            }
        }
    }

    /// `autograd`'s merge of two gradients of one node: in place into `prev` or `g`,
    /// whichever has no other holder (the other goes), else a new buffer (both go).
    fn merge(&mut self, prev: usize, g: usize) -> usize {
        if self.refs[prev] == 1 {
            self.release(g);
            prev
        } else if self.refs[g] == 1 {
            self.release(prev);
            g
        } else {
            let m = self.alloc_bytes(self.bytes[prev]);
            self.release(prev);
            self.release(g);
            m
        }
    }

    /// The order of [`crate::autograd`]: iterative depth-first search over inputs in
    /// order, reversed post-order.
    fn topological_order(&self, root: usize) -> Vec<usize> {
        let mut seen = HashSet::from([root]);
        let mut post = Vec::new();
        let mut stack = vec![(root, 0usize)];
        while let Some((n, next)) = stack.pop() {
            if let Some(p) = self.nodes[n].parents.get(next) {
                stack.push((n, next + 1));
                if let Par::Node(pn) = *p {
                    if seen.insert(pn) {
                        stack.push((pn, 0));
                    }
                }
            } else {
                post.push(n);
            }
        }
        post.reverse();
        post
    }
}
