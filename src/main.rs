//! The `capmaas` binary: the command line ([`capmaas::cli`]), then the
//! operator ([`capmaas::operator::run`]) until SIGTERM/SIGINT or lost
//! leadership, or `adopt`/`doctor`. Exit status: 0 after a clean stop, 1
//! after lost leadership or a failed start, 2 for bad flags.

#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::indexing_slicing
    )
)]

use std::process::ExitCode;

use capmaas::cli::{self, Command};
use capmaas::operator::{self, Stopped};

fn main() -> ExitCode {
    let command = match cli::parse(std::env::args_os().skip(1)) {
        Ok(command) => command,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    match command {
        Command::Help(usage) => {
            print!("{usage}");
            ExitCode::SUCCESS
        }
        Command::Version => {
            println!("capmaas {}", env!("CARGO_PKG_VERSION"));
            ExitCode::SUCCESS
        }
        Command::Adopt(config) => cli::run::adopt(&config),
        Command::Doctor(config) => cli::run::doctor(&config),
        Command::Run(config) => {
            cli::logging::init("info");
            let stopped = cli::run::operator(&config).and_then(|(config, kube, maas)| {
                operator::run(&config, kube, maas).map_err(|e| e.to_string())
            });
            match stopped {
                Ok(Stopped::Shutdown) => ExitCode::SUCCESS,
                Ok(Stopped::LeadershipLost) => ExitCode::FAILURE,
                Err(e) => {
                    eprintln!("capmaas: {e}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}
