//! Micro-batch partitioners: a batch's seeds -> K disjoint seed lists.

pub mod betty;
pub mod buffalo;
pub mod cherry;
pub mod footprint;
pub mod grem;
pub mod kway;
pub mod parts;
