//! Compiles `cdylib/zygote_entry.rs` (the shared zygote's native entry, see that file) into a
//! shared object in `OUT_DIR`, which `src/zygote_entry.rs` embeds. It has no dependencies, so the
//! compiler cargo uses builds it directly, for the same target and with warnings as errors.

use std::env;
use std::path::PathBuf;
use std::process::Command;

fn main() {
    let src = "cdylib/zygote_entry.rs";
    println!("cargo:rerun-if-changed={src}");
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let rustc = env::var_os("RUSTC").expect("cargo sets RUSTC");
    let target = env::var("TARGET").expect("cargo sets TARGET");
    let status = Command::new(rustc)
        .args([
            "--edition=2021",
            "--crate-type=cdylib",
            "--crate-name=lizard_zygote_entry",
        ])
        .args(["--target", &target])
        .args([
            "-C",
            "opt-level=2",
            "-C",
            "panic=abort",
            "-C",
            "strip=symbols",
        ])
        .args(["-D", "warnings", "-l", "dylib=c", "-o"])
        .arg(out.join("liblizard_zygote_entry.so"))
        .arg(src)
        .status()
        .expect("run rustc for the zygote entry");
    assert!(status.success(), "compiling {src} failed");
}
