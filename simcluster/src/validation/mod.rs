//! Validation and defaulting of built-in objects.
