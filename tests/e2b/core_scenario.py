"""The core of scenario.py, for the older E2B Python SDKs pinned in tests/e2b/versions/ (those that
check the key's shape before any request). An ordinary E2B user script: the server is chosen only
by E2B's environment variables. E2B_API_KEY is a Lizard key in E2B's shape (`e2b_<hex>`);
LIZARD_LZ_KEY, when set, is the same key as Lizard prints it (`lz_<hex>`), which these SDKs must
refuse before sending anything (else the version would not be one that checks). One line is
printed per step; e2b.test.mjs compares them.
"""

import os

from e2b_code_interpreter import Sandbox


def step(name):
    print(f"ok {name}", flush=True)


lz = os.environ.get("LIZARD_LZ_KEY")
if lz:
    try:
        Sandbox.create(api_key=lz, timeout=60)
        raise AssertionError("this SDK sent a key not shaped e2b_<hex>: it does not check")
    except AssertionError:
        raise
    except Exception as e:
        assert "Invalid API key format" in str(e), e
    step("format")

sbx = Sandbox.create(timeout=120)
assert sbx.sandbox_id
step("create")

sbx.run_code("x = 41")
ex = sbx.run_code("x + 1")
assert ex.text == "42", ex
step("state")

r = sbx.commands.run("echo hi")
assert (r.stdout, r.exit_code) == ("hi\n", 0), r
step("commands")

sbx.files.write("/home/user/core.txt", "core")
assert sbx.files.read("/home/user/core.txt") == "core"
step("files")

sbx.kill()
print("done")
