//! The `espalier` command line: `train`, `partition`, `bench`, `gen`, `devices`. Run
//! `espalier help <command>` for every flag.

use clap::Parser;

fn main() {
    espalier::device::heap::keep_freed_memory();
    let args = espalier_cli::Cli::parse();
    espalier::error::exit_on_error(espalier_cli::run(args));
}
