//! tracing setup. (placeholder)
