//! The `verdict` binary. Everything it does is in the library's
//! [`verdict::cli`], where it can be tested; this file only picks the
//! allocator.

use std::process::ExitCode;

/// mimalloc instead of glibc's malloc: the engine's tokenizer and the proxy
/// allocate many small short-lived objects per request, and glibc's
/// malloc/free were 10 % of pass-through and 28 % of gated CPU in a perf
/// profile of the proxy.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    verdict::cli::main()
}
