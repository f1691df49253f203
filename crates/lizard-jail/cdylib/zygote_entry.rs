//! The shared zygote's native entry: `lizard_zygote_remap`, steps 5 and 6 of
//! `docs/design/shared-zygote.md`.
//!
//! A fork of a host-side Python zygote that has just joined a sandbox's namespaces still maps its
//! interpreter and every library from the zygote's mount, which is not in the sandbox's mount
//! namespace, so CRIU cannot checkpoint it. This call replaces each file mapping with the same
//! bytes mapped from the sandbox's own file at the same path, and points the exe link at the
//! sandbox's interpreter. It must be native: the interpreter writes to its own data pages between
//! any two Python statements, and a write between a page's copy and its `mremap` is lost (a
//! Python version of this loop crashed the interpreter at its next cell).
//!
//! Built by `lizard-jail`'s `build.rs` as a dependency-free `cdylib` and embedded in
//! [`lizard_jail::zygote_entry`]. `no_std` on purpose: no allocator, no thread-local destructors
//! and no initialisers, so nothing of it runs but this call and `dlclose` can unmap it after.
//! The only unsafe code of Lizard outside `lizard-jail/src` — it is compiled as part of that
//! crate and follows its rule: every `unsafe` block says why it is sound.
#![no_std]
#![deny(clippy::undocumented_unsafe_blocks)]

use core::ffi::{c_char, c_int, c_long, c_void};

extern "C" {
    fn open(path: *const c_char, flags: c_int, ...) -> c_int;
    fn close(fd: c_int) -> c_int;
    fn read(fd: c_int, buf: *mut c_void, count: usize) -> isize;
    fn pread(fd: c_int, buf: *mut c_void, count: usize, offset: i64) -> isize;
    fn readlink(path: *const c_char, buf: *mut c_char, size: usize) -> isize;
    fn mmap(
        addr: *mut c_void,
        len: usize,
        prot: c_int,
        flags: c_int,
        fd: c_int,
        off: i64,
    ) -> *mut c_void;
    fn munmap(addr: *mut c_void, len: usize) -> c_int;
    fn mprotect(addr: *mut c_void, len: usize, prot: c_int) -> c_int;
    fn mremap(old: *mut c_void, old_len: usize, new_len: usize, flags: c_int, ...) -> *mut c_void;
    fn prctl(option: c_int, ...) -> c_int;
    fn syscall(number: c_long, ...) -> c_long;
    fn abort() -> !;
    fn sysconf(name: c_int) -> c_long;
    fn __errno_location() -> *mut c_int;
}

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    // SAFETY: `abort` takes no arguments and never returns.
    unsafe { abort() }
}

/// Referenced by the precompiled `core` even with `panic=abort`; never called (nothing unwinds).
#[no_mangle]
pub extern "C" fn rust_eh_personality() {}

const SC_PAGESIZE: c_int = 30;
const O_RDONLY: c_int = 0;
const O_CLOEXEC: c_int = 0o2_000_000;
const PROT_READ: c_int = 1;
const PROT_WRITE: c_int = 2;
const PROT_EXEC: c_int = 4;
const MAP_SHARED: c_int = 1;
const MAP_PRIVATE: c_int = 2;
const MAP_ANONYMOUS: c_int = 0x20;
const MREMAP_MAYMOVE: c_int = 1;
const MREMAP_FIXED: c_int = 2;
const PR_SET_MM: c_int = 35;
const PR_SET_MM_MAP: c_long = 14;
const SYS_BRK: c_long = 12;
const MAP_FAILED: *mut c_void = !0usize as *mut c_void;
/// Room for `/proc/self/maps` and the mapping table: far more than an interpreter maps.
const SCRATCH: usize = 1 << 20;
const MAX_MAPPINGS: usize = 4096;
const PATH_MAX: usize = 4096;

/// Where a failure happened, in the high half of the negative result (`-(stage << 16 | errno)`).
#[derive(Clone, Copy)]
#[repr(i64)]
enum Stage {
    // Numbered from 1, in this order: `lizard_jail::zygote_entry::failed_stage` names them.
    Scratch = 1,
    ReadMaps,
    ParseMaps,
    OpenFile,
    OpenPagemap,
    Map,
    ReadPagemap,
    Protect,
    Move,
    Exe,
    ReadStat,
    SetMm,
}

fn errno() -> i64 {
    // SAFETY: glibc's thread-local errno; the pointer is valid for this thread's life.
    i64::from(unsafe { *__errno_location() })
}

fn fail(stage: Stage, err: i64) -> c_long {
    -(((stage as i64) << 16) | (err & 0xffff))
}

/// One file mapping of the calling process.
#[derive(Clone, Copy)]
struct Mapping {
    lo: usize,
    hi: usize,
    offset: i64,
    prot: c_int,
    shared: bool,
    fd: c_int,
}

/// Replaces every file mapping of the calling process with the same bytes mapped from the file
/// at the same path in its current root, then makes that root's file of the current exe link the
/// exe link. `prefix` (`prefix_len` bytes, not NUL-terminated; may be empty) is removed from the
/// front of each mapped path first: the zygote's root as the kernel names it from outside.
///
/// All or nothing up to the first change: every file is opened before any mapping changes, so a
/// file missing in the new root fails the call with nothing done. A failure after that (no memory
/// for a copy) leaves some mappings moved; the caller must then end the process. The library's
/// own mappings are left alone (the caller unmaps it with `dlclose`). Single-threaded callers
/// only.
///
/// Returns the number of private pages copied, or `-(stage << 16 | errno)`.
///
/// # Safety
///
/// `prefix` must point to `prefix_len` readable bytes. No other thread may run in the process.
#[no_mangle]
pub unsafe extern "C" fn lizard_zygote_remap(prefix: *const u8, prefix_len: usize) -> c_long {
    // SAFETY: the caller promises `prefix_len` readable bytes at `prefix` (an empty slice for 0).
    let prefix = unsafe { bytes(prefix, prefix_len) };
    // SAFETY: an anonymous private mapping; no address hint, no file.
    let scratch = unsafe {
        mmap(
            core::ptr::null_mut(),
            SCRATCH,
            PROT_READ | PROT_WRITE,
            MAP_PRIVATE | MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if scratch == MAP_FAILED {
        return fail(Stage::Scratch, errno());
    }
    // SAFETY: `scratch` is SCRATCH bytes of fresh, writable, zeroed memory owned by this call
    // until its `munmap`: half for the maps text, half for the table.
    let (text, table) = unsafe {
        let half = SCRATCH / 2;
        (
            core::slice::from_raw_parts_mut(scratch as *mut u8, half),
            core::slice::from_raw_parts_mut(
                (scratch as *mut u8).add(half) as *mut Mapping,
                (half / core::mem::size_of::<Mapping>()).min(MAX_MAPPINGS),
            ),
        )
    };
    let result = remap_all(prefix, text, table);
    // SAFETY: unmaps exactly the scratch mapping made above; nothing refers to it afterwards.
    unsafe { munmap(scratch, SCRATCH) };
    result
}

/// The body of [`lizard_zygote_remap`], with its scratch memory.
fn remap_all(prefix: &[u8], text: &mut [u8], table: &mut [Mapping]) -> c_long {
    let len = match read_file(b"/proc/self/maps\0", text) {
        Ok(len) => len,
        Err(e) => return fail(Stage::ReadMaps, e),
    };
    let own = own_file(&text[..len]);
    let mut count = 0;
    let mut path = [0u8; PATH_MAX];
    let mut result = 0;
    for line in text[..len].split(|&b| b == b'\n') {
        let Some(m) = parse_line(line) else { continue };
        if Some((m.dev, m.inode)) == own || m.path.first() != Some(&b'/') {
            continue;
        }
        // A deleted file or a writable shared mapping cannot be carried over (an interpreter has
        // neither); a read-only shared one (glibc's `gconv-modules.cache`) is mapped again.
        if m.path.ends_with(b" (deleted)")
            || (m.shared && m.prot & PROT_WRITE != 0)
            || count == table.len()
        {
            result = fail(Stage::ParseMaps, 0);
            break;
        }
        let fd = match open_in_root(prefix, m.path, &mut path) {
            Ok(fd) => fd,
            Err(e) => {
                result = fail(Stage::OpenFile, e);
                break;
            }
        };
        table[count] = Mapping {
            lo: m.lo,
            hi: m.hi,
            offset: m.offset,
            prot: m.prot,
            shared: m.shared,
            fd,
        };
        count += 1;
    }
    if result == 0 {
        result = move_all(&table[..count]);
    }
    for m in &table[..count] {
        // SAFETY: each fd was opened above by this call and is closed once.
        unsafe { close(m.fd) };
    }
    if result < 0 {
        return result;
    }
    match set_exe(prefix, text, &mut path) {
        0 => result,
        e => e,
    }
}

/// Step 5 proper: for each mapping, the new file's pages at a free address, the private copies
/// carried over, then moved over the original. Between a copy and its move only system calls run.
fn move_all(table: &[Mapping]) -> c_long {
    // SAFETY: a NUL-terminated literal path.
    let pagemap = unsafe { open(c"/proc/self/pagemap".as_ptr(), O_RDONLY | O_CLOEXEC) };
    if pagemap < 0 {
        return fail(Stage::OpenPagemap, errno());
    }
    // SAFETY: sysconf only reads a constant of the system.
    let page = unsafe { sysconf(SC_PAGESIZE) }.max(1) as usize;
    let mut copied: c_long = 0;
    let mut result = 0;
    for m in table {
        match move_one(m, pagemap, page) {
            Ok(n) => copied += n,
            Err(e) => {
                result = e;
                break;
            }
        }
    }
    // SAFETY: the descriptor opened above, closed once.
    unsafe { close(pagemap) };
    if result < 0 {
        result
    } else {
        copied
    }
}

fn move_one(m: &Mapping, pagemap: c_int, page: usize) -> Result<c_long, c_long> {
    let len = m.hi - m.lo;
    let (prot, flags) = if m.shared {
        (m.prot, MAP_SHARED)
    } else {
        (PROT_READ | PROT_WRITE, MAP_PRIVATE)
    };
    // SAFETY: a mapping of an open file at a kernel-chosen free address.
    let new = unsafe { mmap(core::ptr::null_mut(), len, prot, flags, m.fd, m.offset) };
    if new == MAP_FAILED {
        return Err(fail(Stage::Map, errno()));
    }
    let mut copied = 0;
    // A shared mapping has no private copies: its pages are the file's.
    if m.prot & PROT_READ != 0 && !m.shared {
        let mut entries = [0u64; 512];
        let pages = len / page;
        let mut first = 0;
        while first < pages {
            let n = (pages - first).min(entries.len());
            let want = n * 8;
            // SAFETY: reads at most `want` bytes into `entries`, which holds 512 × 8 ≥ `want`.
            let got = unsafe {
                pread(
                    pagemap,
                    entries.as_mut_ptr() as *mut c_void,
                    want,
                    ((m.lo / page + first) * 8) as i64,
                )
            };
            if got != want as isize {
                let e = errno();
                // SAFETY: unmaps the mapping made above, which nothing else refers to.
                unsafe { munmap(new, len) };
                return Err(fail(Stage::ReadPagemap, e));
            }
            for (i, e) in entries[..n].iter().enumerate() {
                let present_private = e >> 63 & 1 == 1 && e >> 61 & 1 == 0;
                let swapped = e >> 62 & 1 == 1;
                if present_private || swapped {
                    let at = (first + i) * page;
                    // SAFETY: both ranges are one page inside live mappings of `len` bytes: the
                    // original is readable (PROT_READ checked), the new one was made writable.
                    unsafe {
                        core::ptr::copy_nonoverlapping(
                            (m.lo + at) as *const u8,
                            (new as *mut u8).add(at),
                            page,
                        )
                    };
                    copied += 1;
                }
            }
            first += n;
        }
    }
    // SAFETY: the new mapping, `len` bytes, to the original's protection.
    if unsafe { mprotect(new, len, m.prot) } != 0 {
        let e = errno();
        // SAFETY: as above.
        unsafe { munmap(new, len) };
        return Err(fail(Stage::Protect, e));
    }
    // SAFETY: moves the new mapping exactly over the original's range (same length), which the
    // kernel replaces atomically; the bytes there are the same before and after.
    let moved = unsafe {
        mremap(
            new,
            len,
            len,
            MREMAP_MAYMOVE | MREMAP_FIXED,
            m.lo as *mut c_void,
        )
    };
    if moved != m.lo as *mut c_void {
        let e = errno();
        // SAFETY: as above; the move failed, so the new mapping is still where it was made.
        unsafe { munmap(new, len) };
        return Err(fail(Stage::Move, e));
    }
    Ok(copied)
}

/// Step 6: `PR_SET_MM_MAP` with the current layout and the root's file of the exe link.
fn set_exe(prefix: &[u8], text: &mut [u8], path: &mut [u8; PATH_MAX]) -> c_long {
    let mut link = [0u8; PATH_MAX];
    // SAFETY: writes at most PATH_MAX - 1 bytes into `link`.
    let n = unsafe {
        readlink(
            c"/proc/self/exe".as_ptr(),
            link.as_mut_ptr() as *mut c_char,
            PATH_MAX - 1,
        )
    };
    if n <= 0 {
        return fail(Stage::Exe, errno());
    }
    let fd = match open_in_root(prefix, &link[..n as usize], path) {
        Ok(fd) => fd,
        Err(e) => return fail(Stage::Exe, e),
    };
    let result = match read_file(b"/proc/self/stat\0", text) {
        Ok(len) => set_mm(&text[..len], fd),
        Err(e) => fail(Stage::ReadStat, e),
    };
    // SAFETY: the descriptor opened above, closed once.
    unsafe { close(fd) };
    result
}

/// `struct prctl_mm_map` (`include/uapi/linux/prctl.h`).
#[repr(C)]
struct MmMap {
    start_code: u64,
    end_code: u64,
    start_data: u64,
    end_data: u64,
    start_brk: u64,
    brk: u64,
    start_stack: u64,
    arg_start: u64,
    arg_end: u64,
    env_start: u64,
    env_end: u64,
    auxv: u64,
    auxv_size: u32,
    exe_fd: u32,
}

fn set_mm(stat: &[u8], exe_fd: c_int) -> c_long {
    // Fields after the command's closing parenthesis start with field 3 (`proc_pid_stat(5)`).
    let Some(close_paren) = stat.iter().rposition(|&b| b == b')') else {
        return fail(Stage::ReadStat, 0);
    };
    let mut fields = [0u64; 52];
    for (i, word) in stat[close_paren + 1..]
        .split(|b| b.is_ascii_whitespace())
        .filter(|w| !w.is_empty())
        .enumerate()
    {
        if i + 3 < fields.len() {
            fields[i + 3] = parse_dec(word).unwrap_or(0);
        }
    }
    // SAFETY: `brk(0)` changes nothing and returns the current break.
    let brk = unsafe { syscall(SYS_BRK, 0usize) } as u64;
    let map = MmMap {
        start_code: fields[26],
        end_code: fields[27],
        start_data: fields[45],
        end_data: fields[46],
        start_brk: fields[47],
        brk,
        start_stack: fields[28],
        arg_start: fields[48],
        arg_end: fields[49],
        env_start: fields[50],
        env_end: fields[51],
        auxv: 0,
        auxv_size: 0,
        exe_fd: exe_fd as u32,
    };
    // SAFETY: `map` is a complete `prctl_mm_map` that lives across the call; its size is given.
    let r = unsafe {
        prctl(
            PR_SET_MM,
            PR_SET_MM_MAP,
            &map as *const MmMap,
            core::mem::size_of::<MmMap>(),
            0usize,
        )
    };
    if r != 0 {
        return fail(Stage::SetMm, errno());
    }
    0
}

/// Opens `path` (from `/proc`, maybe with `prefix` in front) read-only in the current root.
fn open_in_root(prefix: &[u8], path: &[u8], buf: &mut [u8; PATH_MAX]) -> Result<c_int, i64> {
    let rest = match path.strip_prefix(prefix) {
        Some(rest) if !prefix.is_empty() && rest.first() == Some(&b'/') => rest,
        _ => path,
    };
    if rest.len() >= PATH_MAX || rest.contains(&0) {
        return Err(36); // ENAMETOOLONG
    }
    buf[..rest.len()].copy_from_slice(rest);
    buf[rest.len()] = 0;
    // SAFETY: `buf` holds a NUL-terminated path.
    let fd = unsafe { open(buf.as_ptr() as *const c_char, O_RDONLY | O_CLOEXEC) };
    if fd < 0 {
        Err(errno())
    } else {
        Ok(fd)
    }
}

/// Reads a whole (`/proc`) file into `buf`; too large a file is an error (E2BIG).
fn read_file(path: &[u8], buf: &mut [u8]) -> Result<usize, i64> {
    // SAFETY: `path` is a NUL-terminated literal.
    let fd = unsafe { open(path.as_ptr() as *const c_char, O_RDONLY | O_CLOEXEC) };
    if fd < 0 {
        return Err(errno());
    }
    let mut len = 0;
    let result = loop {
        if len == buf.len() {
            break Err(7); // E2BIG
        }
        // SAFETY: reads into the unused tail of `buf`.
        let n = unsafe { read(fd, buf[len..].as_mut_ptr() as *mut c_void, buf.len() - len) };
        match n {
            0 => break Ok(len),
            n if n < 0 => break Err(errno()),
            n => len += n as usize,
        }
    };
    // SAFETY: the descriptor opened above, closed once.
    unsafe { close(fd) };
    result
}

/// One line of `/proc/self/maps`: `lo-hi perms offset dev inode path`.
struct Line<'a> {
    lo: usize,
    hi: usize,
    prot: c_int,
    shared: bool,
    offset: i64,
    dev: &'a [u8],
    inode: u64,
    path: &'a [u8],
}

fn parse_line(line: &[u8]) -> Option<Line<'_>> {
    let mut rest = line;
    let mut word = || {
        let start = rest.iter().position(|b| *b != b' ')?;
        rest = &rest[start..];
        let end = rest.iter().position(|b| *b == b' ').unwrap_or(rest.len());
        let w = &rest[..end];
        rest = &rest[end..];
        Some(w)
    };
    let range = word()?;
    let perms = word()?;
    let offset = word()?;
    let dev = word()?;
    let inode = word()?;
    let dash = range.iter().position(|b| *b == b'-')?;
    let path = match rest.iter().position(|b| *b != b' ') {
        Some(start) => &rest[start..],
        None => &[][..],
    };
    let flag = |i: usize, c: u8, bit: c_int| if perms.get(i) == Some(&c) { bit } else { 0 };
    Some(Line {
        lo: parse_hex(&range[..dash])? as usize,
        hi: parse_hex(&range[dash + 1..])? as usize,
        prot: flag(0, b'r', PROT_READ) | flag(1, b'w', PROT_WRITE) | flag(2, b'x', PROT_EXEC),
        shared: perms.get(3) == Some(&b's'),
        offset: parse_hex(offset)? as i64,
        dev,
        inode: parse_dec(inode)?,
        path,
    })
}

/// The device and inode of the file this library was loaded from (its own mappings).
fn own_file(maps: &[u8]) -> Option<(&[u8], u64)> {
    let me = lizard_zygote_remap as *const () as usize;
    maps.split(|&b| b == b'\n')
        .filter_map(parse_line)
        .find(|l| l.lo <= me && me < l.hi)
        .map(|l| (l.dev, l.inode))
}

fn parse_hex(s: &[u8]) -> Option<u64> {
    parse_radix(s, 16)
}

fn parse_dec(s: &[u8]) -> Option<u64> {
    parse_radix(s, 10)
}

fn parse_radix(s: &[u8], radix: u32) -> Option<u64> {
    if s.is_empty() {
        return None;
    }
    s.iter().try_fold(0u64, |v, &b| {
        let d = (b as char).to_digit(radix)?;
        v.checked_mul(u64::from(radix))?.checked_add(u64::from(d))
    })
}

/// `len` bytes at `ptr` (none for a null pointer or 0).
///
/// # Safety
///
/// `ptr` must point to `len` readable bytes that outlive the returned slice.
unsafe fn bytes<'a>(ptr: *const u8, len: usize) -> &'a [u8] {
    if ptr.is_null() || len == 0 {
        &[]
    } else {
        // SAFETY: as the caller promised.
        unsafe { core::slice::from_raw_parts(ptr, len) }
    }
}
