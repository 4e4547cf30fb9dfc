//! The error type and extractors, kept at this path for callers that name
//! it here; they live in [`crate::transport`].

pub use crate::transport::error::*;
