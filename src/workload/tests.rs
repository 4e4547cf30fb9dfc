//! Unit tests of the workload builder.
