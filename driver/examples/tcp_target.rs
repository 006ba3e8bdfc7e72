//! The in-process NVMe/TCP test target as a program: serves a RAM
//! namespace on 127.0.0.1 at a port the system picks, prints its device
//! name, and runs until killed. For trying the tools by hand and for
//! `vm/io-cost.sh tcp`, where the target must not run in the process
//! being measured.
//!
//! Usage: `tcp_target [MiB]` (default 256).

use std::process::ExitCode;

use pollfs_driver::tcp::target::{TargetConfig, TestTarget};

fn main() -> ExitCode {
    let mib: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(256);
    let config = TargetConfig {
        blocks: (mib << 20) / 512,
        ..TargetConfig::default()
    };
    let target = match TestTarget::start(config) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("tcp_target: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("{}", target.url(false, false));
    loop {
        std::thread::park();
    }
}
