//! `no_main` binaries are linked with `-nodefaultlibs`: bring in the C library (for the C
//! runtime that calls `main`, and memcpy & co.).
fn main() {
    println!("cargo:rustc-link-arg-bins=-lc");
}
