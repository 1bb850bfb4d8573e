//! `maas-sim --listen 127.0.0.1:PORT [--inventory FILE] [--deploy-seconds N] [--release-seconds N]`
//!
//! Serves a simulated MAAS API under `/MAAS/api/2.0/`. The first line on
//! stdout is the base URL (e.g. `http://127.0.0.1:40123/MAAS`), so a test or
//! script can start it on port 0 and read where it listens.

use std::io::Write;
use std::process::ExitCode;

use capmaas::sim::{self, Inventory};

const USAGE: &str =
    "usage: maas-sim [--listen ADDR] [--inventory FILE] [--deploy-seconds N] [--release-seconds N]

Serves a simulated MAAS 2.0 API under /MAAS/api/2.0/ and test controls under /_sim/.

  --listen ADDR          address to bind (default 127.0.0.1:5240; port 0 picks a free port)
  --inventory FILE       inventory JSON (default: the built-in story inventory)
  --deploy-seconds N     Deploying -> Deployed after N seconds (default: inventory, else 10)
  --release-seconds N    Releasing -> Ready after N seconds (default: inventory, else 2)
  --print-default-inventory   print the built-in inventory and exit

The first stdout line is the base URL, e.g. http://127.0.0.1:40123/MAAS";

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
    let mut listen = "127.0.0.1:5240".to_owned();
    let mut inventory_file = None;
    let mut deploy_seconds = None;
    let mut release_seconds = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = |name: &str| {
            args.next()
                .ok_or_else(|| format!("{name} needs a value\n\n{USAGE}"))
        };
        match arg.as_str() {
            "--listen" => listen = value("--listen")?,
            "--inventory" => inventory_file = Some(value("--inventory")?),
            "--deploy-seconds" => deploy_seconds = Some(seconds(&value("--deploy-seconds")?)?),
            "--release-seconds" => release_seconds = Some(seconds(&value("--release-seconds")?)?),
            "--print-default-inventory" => {
                print!("{}", sim::DEFAULT_INVENTORY);
                return Ok(());
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(());
            }
            other => return Err(format!("unknown argument {other:?}\n\n{USAGE}")),
        }
    }
    let mut inventory = match &inventory_file {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| format!("reading {path}: {e}"))?;
            Inventory::from_json(&text).map_err(|e| format!("{path}: {e}"))?
        }
        None => Inventory::from_json(sim::DEFAULT_INVENTORY)?,
    };
    if let Some(n) = deploy_seconds {
        inventory.settings.deploy_seconds = n;
    }
    if let Some(n) = release_seconds {
        inventory.settings.release_seconds = n;
    }
    let server = sim::start(&listen, inventory).map_err(|e| match e.kind() {
        std::io::ErrorKind::InvalidInput => format!("inventory: {e}"),
        _ => format!("listening on {listen}: {e}"),
    })?;
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{}", server.base_url()).map_err(|e| e.to_string())?;
    stdout.flush().map_err(|e| e.to_string())?;
    drop(stdout);
    server.wait();
    Ok(())
}

fn seconds(v: &str) -> Result<f64, String> {
    match v.parse::<f64>() {
        Ok(n) if n >= 0.0 && n.is_finite() => Ok(n),
        _ => Err(format!("invalid number of seconds {v:?}")),
    }
}
