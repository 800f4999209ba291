//! Workspace root package.
