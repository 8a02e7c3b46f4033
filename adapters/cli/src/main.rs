//! `evidence-wire`: the command line (see the `evidence_wire_cli` library,
//! which holds all of it, for the commands and exit codes).

#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    evidence_wire_cli::run()
}
