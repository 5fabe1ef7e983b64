//! The `espalier` command line: `train`, `partition`, `bench`, `gen`, `devices`. Run
//! `espalier help <command>` for every flag.

use clap::Parser;
use espalier::cli;

fn main() {
    espalier::device::heap::keep_freed_memory();
    let args = cli::Cli::parse();
    espalier::error::exit_on_error(cli::run(args));
}
