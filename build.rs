//! Compiles `fake-nvml/fake_nvml.c` into `$OUT_DIR/fake-nvml/libnvidia-ml.so.1`, a stand-in for
//! NVIDIA's NVML that the tests load through the real `nvml-wrapper` crate, and hands its path to
//! the crate as `env!("SWEEPD_FAKE_NVML")`. The daemon itself never uses it: without a C compiler
//! the path is empty, with a warning, and only the GPU tests fail.

use std::path::{Path, PathBuf};
use std::process::Command;

const SOURCE: &str = "fake-nvml/fake_nvml.c";

fn main() {
    println!("cargo:rerun-if-changed={SOURCE}");
    println!("cargo:rerun-if-changed=build.rs");
    // sqlx::migrate! embeds migrations/ and migrations-postgres/ at compile time: a new or
    // changed file must rebuild the crate.
    println!("cargo:rerun-if-changed=migrations");
    println!("cargo:rerun-if-changed=migrations-postgres");
    println!("cargo:rerun-if-env-changed=CC");

    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let dir = out_dir.join("fake-nvml");
    let lib = dir.join("libnvidia-ml.so.1");
    match build(&dir, &lib) {
        Ok(()) => println!("cargo:rustc-env=SWEEPD_FAKE_NVML={}", lib.display()),
        Err(why) => {
            for line in why.lines().filter(|l| !l.trim().is_empty()) {
                println!("cargo:warning=fake NVML not built (GPU tests will fail): {line}");
            }
            println!("cargo:rustc-env=SWEEPD_FAKE_NVML=");
        }
    }
}

fn build(dir: &Path, lib: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    // $CC may carry flags ("gcc -m64"); without it, the system's `cc`.
    let cc = std::env::var("CC").unwrap_or_default();
    let mut words = cc.split_whitespace();
    let program = words.next().unwrap_or("cc");
    let output = Command::new(program)
        .args(words)
        .args(["-shared", "-fPIC", "-O2", "-o"])
        .arg(lib)
        .arg(SOURCE)
        .output()
        .map_err(|e| format!("no C compiler: running `{program}`: {e}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "`{program}` failed ({}):\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        ))
    }
}
