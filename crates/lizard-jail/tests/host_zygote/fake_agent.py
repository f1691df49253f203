"""The agent's side of an adopted zygote, as a test stand-in (`tests/host_zygote.rs`): PID 1 of a
sandbox, as root with the agent's capabilities. Listens on a root-only SOCK_SEQPACKET socket, takes
the zygote that connects, gives it an environment, has it fork a kernel, runs a cell in it, and
prints `key=value` facts. Then, each time the test creates `/run/lizard/go-N`, runs `x + N` there
and has the zygote fork one more kernel that runs `N` (after a CRIU restore too)."""
import json, os, socket, struct, sys, time

def out(k, v):
    print(f"{k}={v}", flush=True)

def status(pid, key):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith(key + ":"):
            return line.split()[1]

os.makedirs("/run/lizard/z", mode=0o700, exist_ok=True)
path = "/run/lizard/z/zygote.sock"
srv = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
srv.bind(path)
srv.listen(1)
srv.settimeout(60)
out("listening", "yes")
conn, _ = srv.accept()
conn.settimeout(60)
srv.close()  # nothing else may connect, and nothing is left listening for CRIU to restore
os.unlink(path)
zpid, zuid, _zgid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
out("peer_uid", zuid)
conn.send(json.dumps({"op": "env", "env": {"PATH": "/usr/bin:/bin", "HOME": "/root",
                                            "LIZARD_SANDBOX_ID": "joined"}}).encode())
out("zygote_says", conn.recv(65536).decode())
out("zygote_ppid", status(zpid, "PPid"))
out("zygote_caps", status(zpid, "CapEff"))
out("zygote_seccomp", status(zpid, "Seccomp_filters"))
out("zygote_exe", os.readlink(f"/proc/{zpid}/exe"))
# Every namespace of the joined process is the sandbox's (the agent's).
out("zygote_namespaces_ours", all(os.readlink(f"/proc/{zpid}/ns/{n}") == os.readlink(f"/proc/self/ns/{n}")
                                  for n in ("user", "mnt", "pid", "uts", "ipc", "net", "cgroup")))
def fork():
    """A kernel forked by the zygote: its pid, event stream and control fd."""
    o_r, o_w = os.pipe(); e_r, e_w = os.pipe(); ev_r, ev_w = os.pipe(); c_r, c_w = os.pipe()
    req = {"op": "fork", "cwd": "/tmp", "uid": 1000, "gid": 1000, "umask": 0o22,
           "home": "/home/user", "user": "user"}
    socket.send_fds(conn, [json.dumps(req).encode()], [o_w, e_w, ev_w, c_r])
    for fd in (o_w, e_w, ev_w, c_r):
        os.close(fd)
    data, fds, _f, _a = socket.recv_fds(conn, 65536, 1)
    return json.loads(data)["pid"], os.fdopen(ev_r, "rb"), c_w

def cell(kernel, i, code):
    _pid, events, c_w = kernel
    os.write(c_w, (json.dumps({"op": "exec", "id": i, "code": code}) + "\n").encode())
    text = None
    while True:
        ev = json.loads(events.readline() or b'{"ev":"eof"}')
        if ev.get("ev") == "result":
            text = ev.get("data", {}).get("text/plain")
        if ev.get("ev") in ("done", "eof"):
            return text, ev.get("status")

kernel = fork()
kpid, events, _c = kernel
first = json.loads(events.readline())
out("kernel_says", first.get("ev"))
out("kernel_uid", status(kpid, "Uid"))
text, st = cell(kernel, 1, "import os\nx = 6 * 7\nx, os.environ['LIZARD_SANDBOX_ID']")
# After its first cell: a forked kernel is re-parented to PID 1 once the intermediate that forked
# it exits, which the runner waits for at its first control message, not before `ready`.
out("kernel_ppid", status(kpid, "PPid"))
out("result", text)
out("status", st)
out("done", "yes")
n = 1
while True:
    if os.path.exists(f"/run/lizard/go-{n}"):
        out(f"again-{n}", cell(kernel, 1 + n, f"x + {n}")[0])
        other = fork()
        json.loads(other[1].readline())
        out(f"forked-{n}", cell(other, 1, f"{n}")[0])
        n += 1
    time.sleep(0.05)
