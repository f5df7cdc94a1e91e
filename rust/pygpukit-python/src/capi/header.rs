//! `native/include/gk/sched_abi.h` is generated: cbindgen reads `abi.rs` (constants, structs,
//! the table) and `handles.rs` (the opaque handles) with the settings of `cbindgen.toml`. This
//! test regenerates it and fails when the committed file differs; with `GK_WRITE_ABI_HEADER=1`
//! it writes the file instead:
//!
//! ```text
//! cd rust && GK_WRITE_ABI_HEADER=1 cargo test -p pygpukit-python --lib capi::header
//! ```

use std::fs;
use std::path::PathBuf;

use super::abi::{GK_POOL_HANDLE_CAPSULE_NAME, GK_SCHED_ABI_CAPSULE_NAME, GK_SCHED_HANDLE_CAPSULE_NAME};

const REGENERATE: &str = "cd rust && GK_WRITE_ABI_HEADER=1 cargo test -p pygpukit-python --lib capi::header";

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn header_path() -> PathBuf {
    crate_dir().join("../../native/include/gk/sched_abi.h")
}

/// cbindgen writes no C-string constants, so the capsule names are defined here, from the
/// Rust values, and placed right after the includes.
fn capsule_name_defines() -> String {
    let names = [
        ("GK_SCHED_ABI_CAPSULE_NAME", GK_SCHED_ABI_CAPSULE_NAME, "the gk_sched_abi_v1 table"),
        ("GK_SCHED_HANDLE_CAPSULE_NAME", GK_SCHED_HANDLE_CAPSULE_NAME, "a gk_sched* (Scheduler.capsule())"),
        ("GK_POOL_HANDLE_CAPSULE_NAME", GK_POOL_HANDLE_CAPSULE_NAME, "a gk_pool* (MemoryPoolPolicy.capsule())"),
    ];
    let mut text = String::new();
    for (macro_name, value, holds) in names {
        let value = value.to_str().expect("capsule names are ASCII");
        text.push_str(&format!("\n// Name of the capsule holding {holds}.\n#define {macro_name} \"{value}\"\n"));
    }
    text.trim_end().to_string()
}

fn generate() -> String {
    let dir = crate_dir();
    let mut config = cbindgen::Config::from_file(dir.join("cbindgen.toml")).expect("cbindgen.toml is valid");
    config.after_includes = Some(capsule_name_defines());
    let bindings = cbindgen::Builder::new()
        .with_config(config)
        .with_src(dir.join("src/capi/abi.rs"))
        .with_src(dir.join("src/capi/handles.rs"))
        .generate()
        .expect("cbindgen generates the header");
    let mut out = Vec::new();
    bindings.write(&mut out);
    String::from_utf8(out).expect("the header is UTF-8")
}

#[test]
fn committed_header_is_generated_from_abi_rs() {
    let generated = generate();
    let path = header_path();
    if std::env::var_os("GK_WRITE_ABI_HEADER").is_some_and(|v| v == "1") {
        fs::write(&path, &generated).expect("write the header");
        return;
    }
    let committed = fs::read_to_string(&path).unwrap_or_default();
    if committed != generated {
        let line = committed
            .lines()
            .zip(generated.lines())
            .position(|(a, b)| a != b)
            .map_or_else(|| committed.lines().count().min(generated.lines().count()) + 1, |i| i + 1);
        let shown = |text: &str| text.lines().nth(line - 1).unwrap_or("<end of file>").to_string();
        panic!(
            "{} is not what cbindgen generates from src/capi/abi.rs; first difference at line {line}:\n  \
             committed: {}\n  generated: {}\nRegenerate it: {REGENERATE}",
            path.display(),
            shown(&committed),
            shown(&generated),
        );
    }
}
