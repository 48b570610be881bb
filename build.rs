//! Link-time settings of the `bub` binary that Cargo.toml cannot express.
//!
//! On Linux with glibc, relative relocations are packed (`-z pack-relative-relocs`, glibc 2.36+
//! and binutils 2.38+): the loader then reads a few kilobytes of relocations at start instead of
//! ~1.3 MB of `.rela.dyn` — which stayed resident for the life of the daemon. The binary stays
//! position-independent (ASLR is kept).

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let target = std::env::var("TARGET").unwrap_or_default();
    if target.contains("linux-gnu") {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
}
