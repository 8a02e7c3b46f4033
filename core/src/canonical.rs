//! Placeholder for the `canonical` module; being written now.
