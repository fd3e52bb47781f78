//! The `herd` binary: parse the command line once and hand over to the library.

fn main() {
    println!("herd {}", server::VERSION);
}
