"""The agent's side of an adopted zygote, as a test stand-in (`tests/host_zygote.rs`): PID 1 of a
sandbox, as root with the agent's capabilities. Listens on a root-only SOCK_SEQPACKET socket, takes
the zygote that connects, gives it an environment, has it fork a kernel, runs a cell in it, and
prints `key=value` facts. Then it lets go of the zygote's connection once the zygote has ended, and
each time the test creates `/run/lizard/go-N`, runs `x + N` there (after a CRIU restore too)."""
import json, os, select, socket, struct, sys, time

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
o_r, o_w = os.pipe(); e_r, e_w = os.pipe(); ev_r, ev_w = os.pipe(); c_r, c_w = os.pipe()
req = {"op": "fork", "cwd": "/tmp", "uid": 1000, "gid": 1000, "umask": 0o22, "home": "/home/user",
       "user": "user"}
socket.send_fds(conn, [json.dumps(req).encode()], [o_w, e_w, ev_w, c_r])
for fd in (o_w, e_w, ev_w, c_r):
    os.close(fd)
data, fds, _f, _a = socket.recv_fds(conn, 65536, 1)
kpid = json.loads(data)["pid"]
events = os.fdopen(ev_r, "rb")

def cell(i, code):
    os.write(c_w, (json.dumps({"op": "exec", "id": i, "code": code}) + "\n").encode())
    text = None
    while True:
        ev = json.loads(events.readline() or b'{"ev":"eof"}')
        if ev.get("ev") == "result":
            text = ev.get("data", {}).get("text/plain")
        if ev.get("ev") in ("done", "eof"):
            return text, ev.get("status")

first = json.loads(events.readline())
out("kernel_says", first.get("ev"))
out("kernel_ppid", status(kpid, "PPid"))
out("kernel_uid", status(kpid, "Uid"))
text, st = cell(1, "import os\nx = 6 * 7\nx, os.environ['LIZARD_SANDBOX_ID']")
out("result", text)
out("status", st)
out("done", "yes")
n = 1
while True:
    if conn is not None and select.select([conn], [], [], 0)[0] and not conn.recv(65536):
        conn.close()  # the zygote ended (before a checkpoint): the agent lets go of it
        conn = None
        out("zygote_gone", "yes")
    if os.path.exists(f"/run/lizard/go-{n}"):
        out(f"again-{n}", cell(1 + n, f"x + {n}")[0])
        n += 1
    time.sleep(0.05)
