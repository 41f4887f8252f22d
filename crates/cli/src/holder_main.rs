//! `ptyhub-holder`: the executable every terminal's holder process runs (`ptyhub_core::holder`),
//! started by the server as `ptyhub-holder holder` with the holder's spec on stdin.
//!
//! It is the holder's code alone, without the server, its runtime and its command-line
//! parser, so that the pages each holder process writes at its start (its relocated tables,
//! the writable data of the libraries it loads) are few: there is one holder per terminal
//! (docs/memory.md). `ptyhub-holder --build-id` names the build, which the server checks
//! before it runs holders from this file (`ptyhub_core::holder::launch`).

use std::io::Write;

use ptyhub_core::holder::launch::{BUILD_ID, BUILD_ID_ARG, HOLDER_ARG};

fn main() {
    let mut args = std::env::args_os().skip(1);
    let (first, rest) = (args.next(), args.next());
    let code = match (first, rest) {
        (Some(arg), None) if arg == HOLDER_ARG => ptyhub_core::holder::run(),
        (Some(arg), None) if arg == BUILD_ID_ARG => {
            match writeln!(std::io::stdout(), "{BUILD_ID}") {
                Ok(()) => 0,
                Err(_) => 1,
            }
        }
        _ => {
            let _ = writeln!(
                std::io::stderr(),
                "ptyhub-holder hosts one terminal for a ptyhub server, which starts it; \
                 it is not run by hand (`ptyhub-holder {BUILD_ID_ARG}` names its build)"
            );
            2
        }
    };
    std::process::exit(code);
}
