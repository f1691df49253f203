'use strict';
/*
 * Lizard JavaScript zygote: the fork server of ../PROTOCOL.md, "The zygotes", for runner.js.
 *
 * What it does: runner.js, started with LIZARD_ZYGOTE_FD, warms up exactly as a kernel does and then
 * calls `serve(fd)`, which answers fork requests on that SOCK_SEQPACKET socket and returns only in a
 * forked kernel, with the kernel's event and control fds (and `settle`, to call before the first
 * control message is handled); runner.js then goes on as a freshly
 * started kernel would. A create thereby costs a fork (≈ 1–2 ms) instead of a Node start-up
 * (≈ 20 ms of CPU), and a context shares the zygote's pages copy-on-write.
 *
 * Node cannot fork by itself; this uses `node:ffi` (Node ≥ 26) to call libc's fork() and friends.
 * Forking a V8 process is safe here only because of what the agent starts the zygote with and what
 * this file does around each fork:
 *  - `--single-threaded` (no concurrent marking, sweeping or compilation) and `--v8-pool-size=1`:
 *    a fork keeps only the calling thread, so V8 must never wait for a background task that a
 *    worker thread of the zygote would have run. `--disable-sigusr1`: no inspector signal thread.
 *  - V8 marks its code range and every heap page MADV_DONTFORK (absent in a child): the whole
 *    address space is advised MADV_DOFORK right before each fork (no JavaScript allocation between).
 *  - The zygote never enters the event loop: it blocks in recvmsg(), so there are no timers, handles
 *    or pending callbacks to inherit; the kernel calls uv_loop_fork() (new epoll fd, signal pipe).
 *  - In the kernel: `process.pid`/`process.ppid` (cached by Node at start-up) are made right,
 *    Math.random gets a fresh seed (V8 seeds a context's generator at its first use from the
 *    isolate's, which every fork shares), and `process.reallyExit` becomes _exit(): Node's own
 *    teardown would wait for the zygote's platform threads, which do not exist in a fork.
 *
 * What it does not do: run on anything but 64-bit Linux (struct layouts below are LP64), or fix
 * what a kernel shares with its siblings by design (the string hash seed, the address-space layout,
 * `performance.timeOrigin` / `process.uptime()` counted from the zygote's start, and the random
 * state of `vm` contexts created later: see PROTOCOL.md).
 */

const fs = require('fs');
// What every kernel loads between the fork and `ready` (the seeding below; process.stdout/stderr on
// pipes and the control socket in runner.js): loaded here once instead of in every kernel (≈ 15 ms).
const v8 = require('v8');
const crypto = require('crypto');
require('net');
require('tty');
crypto.randomBytes(4); // OpenSSL's generator, set up once (it reseeds itself in a forked child)

// node:ffi says "ExperimentalWarning" once per process; forked kernels would all print it.
let ffi;
{
  const emitWarning = process.emitWarning;
  process.emitWarning = () => {};
  try { ffi = require('node:ffi'); } finally { process.emitWarning = emitWarning; }
}

const I32 = 'i32';
const c = ffi.dlopen(null, {
  fork: { arguments: [], return: I32 },
  _exit: { arguments: [I32], return: 'void' },
  getpid: { arguments: [], return: I32 },
  getppid: { arguments: [], return: I32 },
  setpgid: { arguments: [I32, I32], return: I32 },
  waitpid: { arguments: [I32, 'pointer', I32], return: I32 },
  close: { arguments: [I32], return: I32 },
  pipe2: { arguments: ['pointer', I32], return: I32 },
  read: { arguments: [I32, 'pointer', 'u64'], return: 'i64' },
  write: { arguments: [I32, 'pointer', 'u64'], return: 'i64' },
  dup3: { arguments: [I32, I32, I32], return: I32 },
  fcntl: { arguments: [I32, I32, I32], return: I32 },
  madvise: { arguments: ['u64', 'u64', I32], return: I32 },
  recvmsg: { arguments: [I32, 'pointer', I32], return: 'i64' },
  sendmsg: { arguments: [I32, 'pointer', I32], return: 'i64' },
  pidfd_open: { arguments: [I32, 'u32'], return: I32 },
  poll: { arguments: ['pointer', 'u64', I32], return: I32 },
  __errno_location: { arguments: [], return: 'pointer' },
  uv_default_loop: { arguments: [], return: 'pointer' },
  uv_loop_fork: { arguments: ['pointer'], return: I32 },
  prctl: { arguments: [I32, 'u64', 'u64', 'u64', 'u64'], return: I32 },
}).functions;

const PR_SET_DUMPABLE = 4;

const EINTR = 4;
const F_DUPFD_CLOEXEC = 1030;
const O_CLOEXEC = 0o2000000;
const O_NONBLOCK = 0o4000;
const MADV_DOFORK = 11;
const SOL_SOCKET = 1;
const SCM_RIGHTS = 1;
const MSG_CMSG_CLOEXEC = 0x40000000;
const MAX_MSG = 65536;
const MAX_FDS = 8;

function errno() {
  return ffi.toBuffer(c.__errno_location(), 4, true).readInt32LE(0);
}

function ptr(buf) {
  return ffi.getRawPointer(buf);
}

// ---------------------------------------------------------------------------------------------
// MADV_DOFORK over the whole address space

// madvise() applies to every mapping in a range and reports holes with ENOMEM (which is expected
// here); it stops at a mapping it refuses (VM_IO/VM_PFNMAP: the vDSO's data pages), so the ranges
// leave out the kernel's special mappings, which do not move.
const USER_TOP = 0x7ffffffff000n;
const DOFORK_RANGES = (() => {
  const special = [];
  for (const line of fs.readFileSync('/proc/self/maps', 'utf8').split('\n')) {
    if (!/\[(vvar[^\]]*|vdso|vsyscall|uprobes)\]\s*$/.test(line)) continue;
    const [start, end] = line.split(' ')[0].split('-').map((x) => BigInt(`0x${x}`));
    if (start < USER_TOP) special.push([start, end < USER_TOP ? end : USER_TOP]);
  }
  special.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
  const ranges = [];
  let at = 0n;
  for (const [start, end] of special) {
    if (start > at) ranges.push(at, start - at);
    if (end > at) at = end;
  }
  if (at < USER_TOP) ranges.push(at, USER_TOP - at);
  return ranges; // flat [start, length, start, length, ...]: no allocation while applying it
})();

// Called right before fork(): V8 allocates pages MADV_DONTFORK, so this must not allocate.
function adviseDoFork() {
  for (let i = 0; i < DOFORK_RANGES.length; i += 2) c.madvise(DOFORK_RANGES[i], DOFORK_RANGES[i + 1], MADV_DOFORK);
}

// ---------------------------------------------------------------------------------------------
// SOCK_SEQPACKET messages with fds (SCM_RIGHTS), x86_64/aarch64 layouts

// struct msghdr { void *name; u32 namelen; [4]; iovec *iov; u64 iovlen; void *control; u64 controllen; i32 flags; [4] }
// struct iovec { void *base; u64 len }    struct cmsghdr { u64 len; i32 level; i32 type; data }
const data = Buffer.alloc(MAX_MSG);
const iov = Buffer.alloc(16);
const control = Buffer.alloc(16 + 4 * MAX_FDS);
const msg = Buffer.alloc(56);

function prepare(len, controlLen) {
  iov.writeBigUInt64LE(ptr(data), 0);
  iov.writeBigUInt64LE(BigInt(len), 8);
  msg.fill(0);
  msg.writeBigUInt64LE(ptr(iov), 16);
  msg.writeBigUInt64LE(1n, 24);
  if (controlLen > 0) {
    msg.writeBigUInt64LE(ptr(control), 32);
    msg.writeBigUInt64LE(BigInt(controlLen), 40);
  }
}

// One message: {text, fds}; null when the agent closed its end (or the socket failed).
function receive(fd) {
  for (;;) {
    prepare(MAX_MSG, control.length);
    control.fill(0);
    const n = Number(c.recvmsg(fd, ptr(msg), MSG_CMSG_CLOEXEC));
    if (n < 0 && errno() === EINTR) continue;
    if (n <= 0) return null;
    const fds = [];
    const controlLen = Number(msg.readBigUInt64LE(40));
    for (let off = 0; off + 16 <= controlLen;) {
      const len = Number(control.readBigUInt64LE(off));
      if (len < 16) break;
      if (control.readInt32LE(off + 8) === SOL_SOCKET && control.readInt32LE(off + 12) === SCM_RIGHTS) {
        for (let p = off + 16; p + 4 <= off + len; p += 4) fds.push(control.readInt32LE(p));
      }
      off += (len + 7) & ~7;
    }
    return { text: data.toString('utf8', 0, n), fds };
  }
}

// Send one JSON message with at most one fd; false when the socket is gone.
function send(fd, obj, passFd) {
  const bytes = Buffer.from(JSON.stringify(obj), 'utf8');
  bytes.copy(data);
  let controlLen = 0;
  if (passFd !== undefined) {
    control.fill(0);
    control.writeBigUInt64LE(20n, 0); // CMSG_LEN(4)
    control.writeInt32LE(SOL_SOCKET, 8);
    control.writeInt32LE(SCM_RIGHTS, 12);
    control.writeInt32LE(passFd, 16);
    controlLen = 24; // CMSG_SPACE(4)
  }
  for (;;) {
    prepare(bytes.length, controlLen);
    const n = Number(c.sendmsg(fd, ptr(msg), 0x4000 /* MSG_NOSIGNAL */));
    if (n < 0 && errno() === EINTR) continue;
    return n >= 0;
  }
}

// ---------------------------------------------------------------------------------------------
// The fork server

/**
 * Serve fork requests on `zfd` until the agent closes it (the zygote then exits). Returns only in a
 * forked kernel: `{eventFd, controlFd}`, with stdout/stderr already on fds 1 and 2, the process
 * leading its own group in the requested working directory.
 */
function serve(zfd) {
  waitForQuietThreads();
  if (!send(zfd, { ev: 'ready' })) c._exit(0);
  const status = Buffer.alloc(4);
  for (;;) {
    const req = receive(zfd);
    if (req === null) c._exit(0); // the agent is gone
    let cwd;
    let parsed;
    try {
      parsed = JSON.parse(req.text);
      cwd = parsed && parsed.cwd;
      if (!parsed || parsed.op !== 'fork' || typeof cwd !== 'string' || req.fds.length !== 4) {
        throw new Error('expected {op: fork, cwd} with 4 fds');
      }
    } catch (e) {
      for (const fd of req.fds) c.close(fd);
      send(zfd, { error: `bad fork request: ${e.message}` });
      continue;
    }
    // A fork that dies before it answered (see `forkKernel`) is tried again: nothing of it is left.
    let outcome;
    for (let attempt = 1; ; attempt++) {
      attemptNo = attempt;
      outcome = forkKernel(zfd, req.fds, cwd, parsed, status);
      if (outcome.kernel || outcome.answered || attempt === FORK_ATTEMPTS) break;
    }
    if (outcome.kernel) return outcome.kernel;
    for (const fd of req.fds) c.close(fd);
    if (!outcome.answered) send(zfd, { error: outcome.error });
  }
}

const FORK_ATTEMPTS = 3;

// Tests only (crates/lizard-agent/tests/zygote.rs): make the first attempt of every fork die before
// it answers — `intermediate-dies` at its start, `dies-after-fork` once the kernel exists. The agent
// sets it only from its own environment, which nothing in a sandbox reaches.
const FAULT = process.env.LIZARD_TEST_ZYGOTE_FAULT || '';
delete process.env.LIZARD_TEST_ZYGOTE_FAULT;
let attemptNo = 0;

/**
 * One fork of a kernel for a request: the zygote forks an intermediate, which forks the kernel,
 * answers the agent with the kernel's pid and pidfd, and exits (the kernel is thereby re-parented to
 * the agent — PID 1 of the sandbox or a subreaper — like a spawned kernel).
 *
 * A fork can die before it answers (a signal: the copy of the zygote it started from was not
 * whole, see `waitForQuietThreads`; or the OOM killer). Two one-byte pipes make that safe to retry:
 * the intermediate says `answering` to the zygote before it sends the answer (so the zygote never
 * answers twice), and the kernel starts only once the intermediate says `answered` (so a kernel
 * whose intermediate died before answering exits instead of serving the request's channels next
 * to the retry's kernel).
 *
 * Returns `{kernel}` in the new kernel, else (in the zygote) `{answered}` when the agent got an
 * answer, or `{error}` to send it.
 */
function forkKernel(zfd, fds, cwd, req, status) {
  const answering = makePipe(O_CLOEXEC | O_NONBLOCK);
  if (!answering) return { error: `pipe: errno ${errno()}` };
  waitForQuietThreads();
  adviseDoFork();
  const mid = c.fork();
  if (mid < 0) {
    const e = errno();
    c.close(answering.r);
    c.close(answering.w);
    return { error: `fork: errno ${e}` };
  }
  if (mid === 0) {
    // The intermediate: fork the kernel, answer with its pid and pidfd, let the kernel go, exit.
    c.close(answering.r);
    if (FAULT === 'intermediate-dies' && attemptNo === 1) process.kill(c.getpid(), 'SIGSEGV');
    const intermediate = c.getpid();
    const answered = makePipe(O_CLOEXEC);
    if (!answered) c._exit(3);
    adviseDoFork();
    const kid = c.fork();
    if (kid === 0) {
      c.close(zfd);
      c.close(answering.w);
      c.close(answered.w);
      if (!readByte(answered.r)) c._exit(0); // the intermediate died before it answered
      c.close(answered.r);
      return { kernel: becomeKernel(fds, cwd, intermediate, req) };
    }
    c.close(answered.r);
    if (kid < 0) c._exit(4); // the zygote answers
    c.setpgid(kid, kid); // both sides set the group: the agent may signal it right away
    const pidfd = c.pidfd_open(kid, 0);
    if (pidfd < 0) c._exit(5); // the kernel sees the pipe close and exits
    if (FAULT === 'dies-after-fork' && attemptNo === 1) process.kill(c.getpid(), 'SIGSEGV');
    writeByte(answering.w);
    if (send(zfd, { pid: kid }, pidfd)) writeByte(answered.w);
    c._exit(0);
  }
  c.close(answering.w);
  while (c.waitpid(mid, ptr(status), 0) < 0 && errno() === EINTR);
  const answered = readByte(answering.r);
  c.close(answering.r);
  if (answered) return { answered: true };
  const ws = status.readInt32LE(0);
  const sig = ws & 0x7f;
  return {
    error: sig ? `the fork died before it answered (signal ${sig})` : `the fork failed (exit code ${(ws >> 8) & 0xff})`,
  };
}

const ONE = Buffer.alloc(1);

// A pipe as {r, w}, or null (errno says why).
function makePipe(flags) {
  const fds = Buffer.alloc(8);
  if (c.pipe2(ptr(fds), flags) < 0) return null;
  return { r: fds.readInt32LE(0), w: fds.readInt32LE(4) };
}

// Read one byte: true when one came, false at end of file (the writer is gone) or when none is
// there yet on a non-blocking pipe.
function readByte(fd) {
  let n;
  while ((n = Number(c.read(fd, ptr(ONE), 1n))) < 0 && errno() === EINTR);
  return n === 1;
}

function writeByte(fd) {
  ONE[0] = 1;
  while (Number(c.write(fd, ptr(ONE), 1n)) < 0 && errno() === EINTR);
}

// The syscalls that Node's platform threads wait in when idle (futex: a worker waiting for tasks;
// epoll: the delayed-task scheduler's loop), per architecture.
const IDLE_SYSCALLS = new Set(process.arch === 'arm64' ? [98, 22, 441, 73] : [202, 232, 281, 441, 7, 271]);
const SLEEP = new Int32Array(new SharedArrayBuffer(4));

/**
 * Wait (at most 500 ms, looking every millisecond) until every thread of this process but the
 * calling one is idle: blocked in the syscall its loop waits in. fork() copies the other threads'
 * memory but not the threads: forked while one of them is half-way through a change (a task V8 or
 * Node runs on it, in the zygote most often in its first ≈ 100 ms), the copy holds the half-made
 * change, and forks made then were seen to die of SIGSEGV at their first steps. One look costs
 * ≈ 50 µs.
 */
function waitForQuietThreads() {
  const self = String(c.getpid());
  const deadline = Date.now() + 500;
  while (!otherThreadsIdle(self) && Date.now() < deadline) Atomics.wait(SLEEP, 0, 0, 1);
}

function otherThreadsIdle(self) {
  let tasks;
  try { tasks = fs.readdirSync('/proc/self/task'); } catch { return true; }
  for (const t of tasks) {
    if (t === self) continue;
    let line;
    try { line = fs.readFileSync(`/proc/self/task/${t}/syscall`, 'latin1'); } catch { continue; } // gone
    if (!IDLE_SYSCALLS.has(parseInt(line, 10))) return false; // "running", or busy in a syscall
  }
  return true;
}

// Return once the intermediate process that forked this kernel has exited: its exit re-parents
// the kernel to the agent (a pidfd polls readable only after that), so that process.ppid is the
// agent from the first cell on. runner.js calls it at the first control message, not at start-up:
// the intermediate's exit (unmapping its copy of the zygote, a few ms) then overlaps the create's
// answer instead of delaying `ready`. Bounded (5 s), in case something holds the intermediate.
function waitForReparent(intermediate) {
  if (c.getppid() !== intermediate) return;
  const fd = c.pidfd_open(intermediate, 0);
  if (fd < 0) return; // already gone
  const pfd = Buffer.alloc(8); // struct pollfd { int fd; short events; short revents; }
  pfd.writeInt32LE(fd, 0);
  pfd.writeInt16LE(1 /* POLLIN */, 4);
  while (c.poll(ptr(pfd), 1n, 5000) < 0 && errno() === EINTR);
  c.close(fd);
}

// In the forked kernel of the (root) zygote, before anything of the context's: become the context's
// user as the fork request says — no supplementary groups, its gid, its uid (real, effective and
// saved: nothing can switch back; the change away from uid 0 clears every capability), its umask,
// HOME and user name — and not dumpable, so no other process of the sandbox can read this kernel's
// memory or open its fds through /proc.
function dropToUser(req) {
  if (Number.isInteger(req.uid) && Number.isInteger(req.gid)) {
    process.setgroups([]);
    process.setgid(req.gid);
    process.setuid(req.uid);
    if (process.getuid() !== req.uid || process.geteuid() !== req.uid) {
      say('the kernel could not drop to its user');
      c._exit(1);
    }
    if (Number.isInteger(req.umask)) process.umask(req.umask);
    if (typeof req.home === 'string' && req.home) process.env.HOME = req.home;
    if (typeof req.user === 'string' && req.user) {
      process.env.USER = req.user;
      process.env.LOGNAME = req.user;
    }
  }
  c.prctl(PR_SET_DUMPABLE, 0n, 0n, 0n, 0n);
}

// The sandbox's identity from the fork request (the zygote may predate a CRIU restore: then the
// agent names the clone's own id); only these two names are taken.
function takeIdentity(req) {
  const env = req.env;
  if (!env || typeof env !== 'object') return;
  for (const key of ['LIZARD_SANDBOX_ID', 'HOSTNAME']) {
    const value = env[key];
    if (typeof value === 'string' && value && !value.includes('\0')) process.env[key] = value;
  }
}

// In the forked kernel: a loop and protocol fds of its own, per-process state reset.
function becomeKernel(fds, cwd, intermediate, req) {
  c.uv_loop_fork(c.uv_default_loop());
  const high = fds.map((fd) => c.fcntl(fd, F_DUPFD_CLOEXEC, 10));
  for (const fd of fds) c.close(fd);
  if (high.some((fd) => fd < 0)) c._exit(70);
  const [out, err, eventFd, controlFd] = high;
  c.dup3(out, 1, 0);
  c.dup3(err, 2, 0);
  c.close(out);
  c.close(err);
  c.setpgid(0, 0);
  try {
    dropToUser(req || {});
  } catch (e) {
    say(`cannot become the context's user: ${e.message}`);
    c._exit(1);
  }
  takeIdentity(req || {});
  process.reallyExit = (code) => c._exit(Number(code) | 0);
  const pid = c.getpid();
  Object.defineProperty(process, 'pid', { value: pid, enumerable: true, configurable: true, writable: false });
  Object.defineProperty(process, 'ppid', { get: () => c.getppid(), enumerable: true, configurable: true });
  // V8 seeds a context's Math.random from --random-seed when set, else from the isolate's generator
  // (a copy of the zygote's): seed the main context once, then go back to fresh seeds (workers).
  const seed = crypto.randomBytes(4).readInt32LE(0) || 1;
  v8.setFlagsFromString(`--random-seed=${seed}`);
  Math.random();
  v8.setFlagsFromString('--random-seed=0');
  try {
    process.chdir(cwd);
  } catch (e) {
    say(`cannot enter the working directory ${JSON.stringify(cwd)}: ${e.message}`);
    c._exit(1);
  }
  return { eventFd, controlFd, settle: () => waitForReparent(intermediate) };
}

// ---------------------------------------------------------------------------------------------
// Fork of a live kernel (../PROTOCOL.md, "Fork of a live kernel")

/**
 * Fork this kernel (between cells, from a setImmediate callback: not inside libuv's poll phase)
 * into a new one whose channels are the FIFOs in `dir` and whose cgroup is the one of the
 * `tasks` files in `procs` (written while single-threaded). Like `serve`: an intermediate forks the new kernel and exits,
 * so the agent is the new kernel's parent. Returns `{ kid }` in the source; in the new kernel
 * `{ child: true, settle }`, with its channels on `eventFd`/`controlFd` (same numbers), stdout and
 * stderr on fds 1 and 2, its own process group, cgroup and event loop (uv_loop_fork: every
 * handle, timer and pending callback of the source is re-armed in the child). Throws when the
 * fork fails.
 */
function forkLive(dir, procs, eventFd, controlFd) {
  const fds = Buffer.alloc(8);
  if (c.pipe2(ptr(fds), O_CLOEXEC) < 0) throw new Error(`pipe: errno ${errno()}`);
  const r = fds.readInt32LE(0);
  const w = fds.readInt32LE(4);
  const word = Buffer.alloc(4);
  waitForQuietThreads(); // a cell's worker threads, if any
  adviseDoFork();
  const mid = c.fork();
  if (mid < 0) {
    const e = errno();
    c.close(r);
    c.close(w);
    throw new Error(`fork: errno ${e}`);
  }
  if (mid === 0) {
    const intermediate = c.getpid();
    c.close(r);
    adviseDoFork();
    const kid = c.fork();
    if (kid === 0) {
      c.close(w);
      intermediates.length = 0; // the source's children, not this kernel's
      becomeFork(dir, procs, eventFd, controlFd);
      return { child: true, settle: () => waitForReparent(intermediate) };
    }
    if (kid > 0) c.setpgid(kid, kid); // both sides set the group: the agent may signal it at once
    word.writeInt32LE(kid > 0 ? kid : 0, 0);
    c.write(w, ptr(word), 4n);
    c._exit(kid > 0 ? 0 : 1);
  }
  c.close(w);
  // The intermediate writes the pid right after its fork; its exit (unmapping its copy of this
  // process) is not waited for here but at the next control message (reapIntermediates).
  intermediates.push(mid);
  word.writeInt32LE(0, 0);
  let n;
  while ((n = Number(c.read(r, ptr(word), 4n))) < 0 && errno() === EINTR);
  c.close(r);
  const kid = n === 4 ? word.readInt32LE(0) : 0;
  if (kid <= 0) {
    reapIntermediates();
    throw new Error('the fork failed');
  }
  return { kid };
}

const intermediates = []; // a source kernel's intermediates of forks, not reaped yet

function reapIntermediates() {
  const status = Buffer.alloc(4);
  while (intermediates.length) {
    const mid = intermediates.pop();
    while (c.waitpid(mid, ptr(status), 0) < 0 && errno() === EINTR);
  }
}

// In the new kernel of a live fork: its channels, group, cgroup and event loop.
function becomeFork(dir, procs, eventFd, controlFd) {
  let opened;
  try {
    opened = [
      fs.openSync(`${dir}/stdout`, fs.constants.O_WRONLY),
      fs.openSync(`${dir}/stderr`, fs.constants.O_WRONLY),
      fs.openSync(`${dir}/events`, fs.constants.O_WRONLY),
      fs.openSync(`${dir}/control`, fs.constants.O_RDONLY | fs.constants.O_NONBLOCK),
    ];
  } catch (e) {
    say(`cannot open the fork's channels: ${e.message}`);
    c._exit(71);
  }
  const [out, err, evt, ctl] = opened;
  c.dup3(out, 1, 0);
  c.dup3(err, 2, 0);
  c.dup3(evt, eventFd, O_CLOEXEC);
  c.dup3(ctl, controlFd, O_CLOEXEC);
  for (const fd of opened) c.close(fd);
  c.setpgid(0, 0);
  for (const p of procs) {
    try {
      fs.writeFileSync(p, '0');
    } catch (e) {
      say(`cannot join the fork's cgroup: ${e.message}`);
      c._exit(72);
    }
  }
  // After the fds moved: the new loop watches the new channels under the old numbers.
  c.uv_loop_fork(c.uv_default_loop());
  process.reallyExit = (code) => c._exit(Number(code) | 0);
  const pid = c.getpid();
  Object.defineProperty(process, 'pid', { value: pid, enumerable: true, configurable: true, writable: false });
  Object.defineProperty(process, 'ppid', { get: () => c.getppid(), enumerable: true, configurable: true });
}

// A last word on stderr, if anyone still reads it (never throws: an unwritable stderr must not
// turn into an uncaught-exception loop in a process that cannot report it anyway).
function say(text) {
  try { fs.writeSync(2, `lizard: ${text}\n`); } catch { /* the agent is gone */ }
}

/** Serve, or end the process (a zygote, or a fork on its way to become a kernel) on any error. */
function serveOrExit(zfd) {
  try {
    return serve(zfd);
  } catch (e) {
    say(`zygote: ${e && e.stack ? e.stack : e}`);
    return c._exit(70);
  }
}

module.exports = { serve: serveOrExit, forkLive, reapIntermediates };
