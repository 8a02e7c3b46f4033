//! Placeholder for the `error` module; being written now.
