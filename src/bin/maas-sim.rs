fn main() {
    eprintln!("maas-sim: not yet implemented");
    std::process::exit(2);
}
