//! Integration tests: the real `ptyhub` binary, real bash, HTTP over loopback and the CLI over
//! the local socket. One binary; the suites are in `suite/`.

#![allow(clippy::panic, reason = "tests fail by panicking")]

mod suite;
