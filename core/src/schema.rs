//! Placeholder for the `schema` module; being written now.
