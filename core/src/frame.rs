//! Framing: placeholder replaced by the framing implementation.
