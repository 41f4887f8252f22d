//! Integration tests of `ptyhub-core` through its public API only. One binary; the suites are
//! in `suite/`.

#![allow(clippy::panic, reason = "tests fail by panicking")]

mod suite;
