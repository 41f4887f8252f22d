//! Links the `ptyhub` binary as a classic (non-PIE) executable on Linux. There is one holder
//! process per terminal, all running this binary; without runtime relocations its read-only
//! data stays shared between them instead of becoming ~120 KiB of private dirty pages in every
//! holder (measured with bench/run.py; see ARCHITECTURE.md).

fn main() {
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if os == "linux" {
        println!("cargo:rustc-link-arg-bins=-no-pie");
    }
}
