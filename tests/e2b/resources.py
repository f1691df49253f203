"""E2B's 2026 surface through the newest pinned Python SDK, unmodified: `Secret`, `Volume` (and its
content API), `volume_mounts`, network `rules` with a secret placeholder, `get_host`, signed file
URLs, `pause(keep_memory=False)`, `lifecycle.auto_resume`, and the typed refusals
(`connect(on_resume="reboot")`, `iam`). An ordinary E2B user script: the server is chosen only by
E2B's environment variables (E2B_API_KEY, E2B_API_URL, E2B_SANDBOX_URL, E2B_VOLUME_API_URL).
LIZARD_URL and LIZARD_ADMIN_KEY let it check, through Lizard's own API, what E2B's has no word
for. One line per step; e2b.test.mjs compares them.
"""

import json
import os
import urllib.request

import httpx
from e2b import Sandbox, Secret, Volume
from e2b.exceptions import SandboxException

LIZARD = os.environ["LIZARD_URL"]
ADMIN = os.environ["LIZARD_ADMIN_KEY"]


def step(name):
    print(f"ok {name}", flush=True)


def lizard(path):
    req = urllib.request.Request(LIZARD + path, headers={"Authorization": f"Bearer {ADMIN}"})
    with urllib.request.urlopen(req) as r:
        return json.load(r)


# Secrets: created, versioned, listed, never shown.
s = Secret.create("py-probe", "first", metadata={"team": "py"})
assert (s.secret_id, s.name, s.version, s.metadata) == ("sec_py-probe", "py-probe", 1, {"team": "py"}), s
assert Secret.update("py-probe", "second").version == 2
assert Secret.get_info("sec_py-probe").version == 2
assert "py-probe" in [x.name for x in Secret.list().next_items()]
step("secrets")

# Volumes: mounted in a sandbox, then read and written through the content API.
vol = Volume.create("py-data")
writer = Sandbox.create(volume_mounts={"/data/py": vol}, timeout=60)
writer.commands.run("echo from the sandbox > /data/py/in.txt")
writer.kill()
assert vol.read_file("/in.txt") == "from the sandbox\n"
entry = vol.write_file("/out.txt", "from the content API")
assert (entry.path, entry.size, entry.uid) == ("/out.txt", 20, 1000), entry
assert sorted(e.name for e in vol.list("/")) == ["in.txt", "out.txt"]
assert vol.exists("/out.txt") and not vol.exists("/nope")
reader = Sandbox.create(volume_mounts={"/data/py": "py-data"}, timeout=60)
assert reader.commands.run("cat /data/py/out.txt").stdout == "from the content API"
reader.kill()
assert Volume.destroy(vol.volume_id)
step("volumes")

# Network rules: a secret placeholder becomes Lizard's header injection (the value stays out).
ruled = Sandbox.create(
    network={
        "allow_out": ["api.example.com"],
        "deny_out": ["0.0.0.0/0"],
        "rules": {"api.example.com": [{"transform": {"headers": {"X-Key": Secret.fill("py-probe")}}}]},
    },
    timeout=60,
)
info = lizard(f"/v1/sandboxes/{ruled.sandbox_id}")
assert info["network"]["inject"] == [
    {"host": "api.example.com", "headers": {"X-Key": "${secret:py-probe}"}}
], info
assert "second" not in json.dumps(info)
ruled.kill()
assert Secret.destroy("py-probe") and not Secret.exists("py-probe")
step("rules")

# get_host and signed URLs.
sbx = Sandbox.create(timeout=120, lifecycle={"on_timeout": "pause", "auto_resume": True})
port = LIZARD.rsplit(":", 1)[1]
assert sbx.get_host(3000) == f"3000-{sbx.sandbox_id}.localhost:{port}", sbx.get_host(3000)
sbx.files.write("/home/user/signed.txt", "signed")
assert httpx.get(sbx.download_url("/home/user/signed.txt", use_signature_expiration=60)).text == "signed"
step("urls")

# pause(keep_memory=False) hibernates; connect resumes it, state and all. A reboot-resume is
# refused, not silently done as a restore.
sbx.files.write("/home/user/kept.txt", "kept")
assert sbx.pause(keep_memory=False)
assert lizard(f"/v1/sandboxes/{sbx.sandbox_id}")["state"] == "hibernated"
try:
    Sandbox.connect(sbx.sandbox_id, on_resume="reboot")
    raise AssertionError("a reboot-resume was not refused")
except SandboxException as e:
    assert "not offered" in str(e), e
back = Sandbox.connect(sbx.sandbox_id)
assert back.files.read("/home/user/kept.txt") == "kept"
# lifecycle.auto_resume: a call to the paused sandbox resumes it.
assert back.pause(strict=True)  # requireHealthyGuest: its agent answers
assert back.files.read("/home/user/kept.txt") == "kept"
assert Sandbox.get_info(sbx.sandbox_id).state.value == "running"
back.kill()
step("lifecycle")

# What is not offered is refused, not ignored.
try:
    Sandbox.create(iam={"tokens": {"aws": Secret.iam_token(audience="sts.amazonaws.com", token_type="JWT-SVID")}})
    raise AssertionError("iam was not refused")
except SandboxException as e:
    assert "not offered" in str(e), e
step("refusals")
print("done")
