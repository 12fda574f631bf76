//! Records the compiler's version for the benchmarks' metadata (`GNN4C_RUSTC_VERSION`).

fn main() {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_owned());
    let version = std::process::Command::new(rustc)
        .arg("-V")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| "rustc (unknown version)".to_owned());
    println!("cargo:rustc-env=GNN4C_RUSTC_VERSION={version}");
    println!("cargo:rerun-if-env-changed=RUSTC");
}
