//! Link flags for the three binaries.
//!
//! Packed relative relocations (`-z pack-relative-relocs`, DT_RELR): a position-independent
//! executable carries one relocation per pointer in its read-only data (13,500 in
//! `project-worker`, 323 KB of `.rela.dyn` that the loader reads at every start and that stays
//! resident). RELR encodes them in ~3 KB. The loader must understand it (glibc 2.36 and later,
//! which then marks the binary as needing `GLIBC_ABI_DT_RELR`), so the flag is only passed when
//! building natively on such a glibc with a linker other than gold; anywhere else the binaries
//! are linked as before.
//!
//! `project-worker` and `pegasusctl` are linked position-dependent (`-no-pie`): the linker then
//! resolves every pointer in their read-only data itself, so those pages stay clean and shared
//! instead of being written by the loader in every process. For a worker that is ~0.8 MiB of
//! private memory per process (the tables of regex, html5ever, rustls, ...), 800 MiB at 1,000
//! workers; for `pegasusctl` it is the relocation work at each command's start. The cost is
//! that their executable image loads at a fixed address (libraries, heap and stack are still
//! randomised); pegasusd, which holds the keys, stays a PIE.

use std::process::Command;

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    let target = std::env::var("TARGET").unwrap_or_default();
    let host = std::env::var("HOST").unwrap_or_default();
    // gold does not know `-z pack-relative-relocs`: a build that asks for it links without.
    let gold = std::env::var("CARGO_ENCODED_RUSTFLAGS").is_ok_and(|f| f.contains("fuse-ld=gold"));
    if target.contains("-linux-") {
        for bin in ["project-worker", "pegasusctl"] {
            println!("cargo::rustc-link-arg-bin={bin}=-no-pie");
        }
    }
    if target != host || !target.ends_with("-linux-gnu") || gold {
        return;
    }
    if glibc_version().is_some_and(|v| v >= (2, 36)) {
        println!("cargo::rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
}

/// The build machine's glibc, from `getconf GNU_LIBC_VERSION` ("glibc 2.36").
fn glibc_version() -> Option<(u32, u32)> {
    let out = Command::new("getconf")
        .arg("GNU_LIBC_VERSION")
        .output()
        .ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let version = text.trim().strip_prefix("glibc ")?;
    let mut parts = version.split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.trim().parse().ok()?;
    Some((major, minor))
}
