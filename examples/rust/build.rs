//! Asks pkg-config for libtgrad's link flags (`pkg-config --cflags --libs tgrad`, honouring
//! PKG_CONFIG_PATH and PKG_CONFIG from the environment) and hands them to cargo: -L becomes a
//! link search path, -l a linked library, anything else (the -Wl,-rpath of the pip-installed
//! copy's tgrad.pc) a linker argument. No crates: std::process::Command only.
use std::env;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG");
    let pkg_config = env::var("PKG_CONFIG").unwrap_or_else(|_| "pkg-config".to_string());
    let output = Command::new(&pkg_config)
        .args(["--cflags", "--libs", "tgrad"])
        .output()
        .unwrap_or_else(|e| panic!("cannot run {pkg_config}: {e} (install pkg-config or pkgconf)"));
    if !output.status.success() {
        panic!(
            "{pkg_config} --cflags --libs tgrad failed: {}\n\
             point PKG_CONFIG_PATH at tgrad.pc: PKG_CONFIG_PATH=$(python -m tgrad config --pkgconfig-dir)",
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    let flags = String::from_utf8(output.stdout).expect("pkg-config printed non-UTF-8 flags");
    let mut tokens = flags.split_whitespace();
    while let Some(token) = tokens.next() {
        if let Some(dir) = token.strip_prefix("-L") {
            let dir = if dir.is_empty() { tokens.next().unwrap_or_default() } else { dir };
            println!("cargo:rustc-link-search=native={dir}");
        } else if let Some(lib) = token.strip_prefix("-l") {
            let lib = if lib.is_empty() { tokens.next().unwrap_or_default() } else { lib };
            println!("cargo:rustc-link-lib={lib}");
        } else if token.starts_with("-I") || token.starts_with("-D") {
            // Compiler flags: nothing to compile in C here (the declarations are in main.rs).
        } else {
            println!("cargo:rustc-link-arg={token}");
        }
    }
}
