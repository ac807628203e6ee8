//! `pegasusctl`: the command-line client of pegasusd.

#![deny(clippy::unwrap_used, clippy::expect_used)]

fn main() -> std::process::ExitCode {
    pegasus_ctl::main_entry()
}
