//! `pegasusctl`: the command-line client of pegasusd.

fn main() -> std::process::ExitCode {
    pegasus_ctl::main_entry()
}
