//! Builds a template into a data directory, printing progress as plain text.
//!
//! ```sh
//! cargo run -p lizard-template --example build -- DATA_DIR [TEMPLATE] [--force]
//! ```
//! TEMPLATE is a built-in name (default `code-interpreter-v1`), a name found in the repo's
//! `templates/` directory, or a path to a spec file.

use std::path::PathBuf;
use std::time::Instant;

use lizard_template::{build, BuildOptions, Progress};

struct Plain {
    start: Instant,
}

impl Progress for Plain {
    fn step(&mut self, index: usize, total: usize, name: &str) {
        println!(
            "[{index}/{total}] {name} (at {:.1}s)",
            self.start.elapsed().as_secs_f64()
        );
    }
    fn message(&mut self, line: &str) {
        println!("    {line}");
    }
}

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let force = args.iter().any(|a| a == "--force");
    args.retain(|a| a != "--force");
    let Some(data_dir) = args.first() else {
        eprintln!("usage: build DATA_DIR [TEMPLATE] [--force]");
        std::process::exit(2);
    };
    let name = args
        .get(1)
        .map(String::as_str)
        .unwrap_or(lizard_template::DEFAULT_TEMPLATE);
    let mut opts = BuildOptions::new(data_dir);
    opts.force = force;
    opts.templates_dir = Some(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../templates"));
    let start = Instant::now();
    match build(name, &opts, &mut Plain { start }) {
        Ok(t) => {
            println!(
                "template {} key {} ready in {:.1}s: {}",
                t.name,
                t.key,
                start.elapsed().as_secs_f64(),
                t.rootfs.display()
            );
            println!(
                "disk usage {:.0} MiB; python {:?}; node {:?}",
                t.meta.disk_bytes as f64 / (1024.0 * 1024.0),
                t.meta.python_version,
                t.meta.node_version
            );
        }
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    }
}
