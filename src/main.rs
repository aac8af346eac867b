//! The `verdict` binary: parse the command line and hand off to the library.
fn main() {}
