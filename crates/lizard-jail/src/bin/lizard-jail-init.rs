//! `lizard-jail-init`: the sandbox launcher as a stand-alone single-threaded program (reads a
//! `SandboxSpec` as JSON on stdin, prints one reply line). The product uses `lizard sandbox-init`,
//! which does the same; this one serves the crate's own tests and debugging. `lizard-jail-init
//! zygote` is the host zygote's helper instead (`lizard_jail::host_zygote`).

fn main() {
    if std::env::args().nth(1).as_deref() == Some("zygote") {
        lizard_jail::host_zygote::init_main()
    }
    lizard_jail::sandbox::init_main()
}
