//! Local backend (placeholder).
