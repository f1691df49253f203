//! `lizard-jail-init`: the sandbox launcher as a stand-alone single-threaded program (reads a
//! `SandboxSpec` as JSON on stdin, prints one reply line). The product uses `lizard sandbox-init`,
//! which does the same; this one serves the crate's own tests and debugging.

fn main() {
    lizard_jail::sandbox::init_main()
}
