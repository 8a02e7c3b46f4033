//! Placeholder for the `evidence` module; being written now.
