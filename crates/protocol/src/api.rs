//! REST payloads, filled in below.
