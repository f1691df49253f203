"""An ordinary E2B user's template code (Python SDK `e2b`, pinned in requirements.txt), unmodified.

It knows nothing about Lizard: the server is chosen only by E2B's environment variables
(E2B_API_KEY + E2B_API_URL + E2B_SANDBOX_URL). It builds a template with E2B's `Template` builder
(fromTemplate + setEnvs + copy of a file + runCmd as the user), checks `Template.exists`, creates a
sandbox from the template's name and sees the environment and the files; then an unsupported base
is a clear error. One line is printed per step; e2b.test.mjs runs it against a real `lizard serve`.
"""

import os
import sys
import tempfile

from e2b import BuildException, Sandbox, Template

name = sys.argv[1] if len(sys.argv) > 1 else "e2b-template-py"


def step(n):
    print(f"ok {n}", flush=True)


ctx = tempfile.mkdtemp()
with open(os.path.join(ctx, "greeting.txt"), "w") as f:
    f.write("copied by an E2B template\n")

template = (
    Template(file_context_path=ctx)
    .from_template("code-interpreter-v1")
    .set_envs({"GREETING": "hello from an E2B template", "STAGE": "built"})
    .copy("greeting.txt", "/home/user/greeting.txt")
    .run_cmd(
        "cat /home/user/greeting.txt > /home/user/made-by-run.txt && whoami >> /home/user/made-by-run.txt",
        user="user",
    )
)
assert not Template.exists(name), "not built yet"
logs = []
info = Template.build(template, name, on_build_logs=logs.append)
assert info.template_id == name, info
assert any("RUN cat /home/user/greeting.txt" in str(e.message) for e in logs), [str(e.message) for e in logs]
step("build")

assert Template.exists(name)
assert not Template.exists(name + "-missing")
step("exists")

sbx = Sandbox.create(name, timeout=120)
r = sbx.commands.run('echo "$GREETING/$STAGE"; cat /home/user/greeting.txt /home/user/made-by-run.txt')
assert r.stdout == "hello from an E2B template/built\ncopied by an E2B template\ncopied by an E2B template\nuser\n", r.stdout
assert sbx.files.read("/home/user/greeting.txt") == "copied by an E2B template\n"
sbx.kill()
step("sandbox")

# The same template again: the files are there already, the build is a cache hit.
Template.build(template, name)
step("rebuild")

try:
    Template.build(Template().from_image("ubuntu:24.04").run_cmd("true"), name + "-ubuntu")
    raise AssertionError("an arbitrary image must not build")
except BuildException as e:
    assert "not supported" in str(e), e
step("unsupported")
print("done", flush=True)
