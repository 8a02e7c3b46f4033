//! Placeholder for the `envelope` module; being written now.
