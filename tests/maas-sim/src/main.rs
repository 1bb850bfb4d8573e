//! `maas-sim --listen 127.0.0.1:PORT [--inventory FILE] [--deploy-seconds N] [--release-seconds N]`
//!
//! Serves a simulated MAAS API under `/MAAS/api/2.0/`. The first line on
//! stdout is the base URL (e.g. `http://127.0.0.1:40123/MAAS`), so a script
//! can start it on port 0 and read where it listens. The arguments are
//! parsed by the library ([`maas_sim::Options::from_args`]).

use std::io::Write;
use std::process::ExitCode;

use maas_sim::{Command, Options, DEFAULT_INVENTORY, USAGE};

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("maas-sim: {message}");
            ExitCode::from(2)
        }
    }
}

fn run() -> Result<(), String> {
    let options = match Options::from_args(std::env::args().skip(1))? {
        Command::Serve(options) => options,
        Command::PrintDefaultInventory => {
            print!("{DEFAULT_INVENTORY}");
            return Ok(());
        }
        Command::Help => {
            println!("{USAGE}");
            return Ok(());
        }
    };
    let listen = options.listen.clone();
    let server = maas_sim::start_with(*options).map_err(|e| match e.kind() {
        std::io::ErrorKind::InvalidInput => format!("inventory: {e}"),
        _ => format!("listening on {listen} (or --dns-listen): {e}"),
    })?;
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{}", server.base_url()).map_err(|e| e.to_string())?;
    if let Some(dns) = server.dns_addr() {
        writeln!(stdout, "dns {dns}").map_err(|e| e.to_string())?;
    }
    stdout.flush().map_err(|e| e.to_string())?;
    drop(stdout);
    server.wait();
    Ok(())
}
