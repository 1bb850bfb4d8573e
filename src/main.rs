//! The `capmaas` operator binary.

const USAGE: &str = "capmaas: Cluster API infrastructure provider for Canonical MAAS

USAGE:
    capmaas [FLAGS]

FLAGS:
    -h, --help       Print this help
    -V, --version    Print the version
";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "-h" || a == "--help") {
        print!("{USAGE}");
        return;
    }
    if args.iter().any(|a| a == "-V" || a == "--version") {
        println!("capmaas {}", env!("CARGO_PKG_VERSION"));
        return;
    }
    eprintln!("capmaas: the controllers are not wired yet");
    std::process::exit(2);
}
