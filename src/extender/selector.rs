//! A pod's own node constraints; they live in [`crate::pods::selector`].

pub use crate::pods::selector::NodeRule;
