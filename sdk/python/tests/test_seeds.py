"""The snippets of the seeds (``shared/seeds/code-interpreter.md`` and the Cloudflare-shaped guide),
translated to Python line by line, against a real server, with the output their comments promise.

Configuration comes from ``LIZARD_API_URL`` / ``LIZARD_API_KEY`` only, as for a user. Deviations from
the seeds are noted where they are forced by the sandbox (no internet: no ``pip install``) or by the
time budget (shorter sleeps).
"""

from __future__ import annotations

import base64
import sys

import pytest

from lizard import CodeSandbox, Execution, NotFoundError

pytestmark = pytest.mark.usefixtures("lizard_server")

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def test_run_code(capsys: pytest.CaptureFixture[str]) -> None:
    # Every sandbox belongs to a project — usage is metered per project
    sandbox = CodeSandbox.create(project="my-project")  # defaults to 'code-interpreter-v1'

    sandbox.run_code("x = 42")
    result = sandbox.run_code("print(x * 2)")
    print(result.stdout, end="")  # "84\n"  — x survived from the previous call

    sandbox.kill()

    assert isinstance(result, Execution)
    assert result.stdout == "84\n"
    assert result.stderr == ""
    assert result.results == []
    assert result.error is None
    assert result.execution_count == 2
    assert capsys.readouterr().out == "84\n"
    # The handle outlives the sandbox, which is gone:
    with pytest.raises(NotFoundError):
        sandbox.get_info()


def test_choose_a_language() -> None:
    with CodeSandbox.create(project="my-project") as sandbox:
        js = sandbox.run_code("1 + 1", language="javascript")
        assert js.results[0].data == "2"

        sh = sandbox.run_code('echo "$(uname -s)"', language="bash")
        assert sh.stdout == "Linux\n"
        assert sh.error is None


def test_streaming_output(capsys: pytest.CaptureFixture[str]) -> None:
    with CodeSandbox.create(project="my-project") as sandbox:
        sandbox.run_code(
            "for i in range(5): print(i)",
            on_stdout=lambda line: sys.stdout.write(line),
            on_stderr=lambda line: sys.stderr.write(line),
            on_result=lambda r: print("result:", r),
            on_error=lambda e: print("error:", e.name, e.message, file=sys.stderr),
        )
        out = capsys.readouterr()
        assert out.out == "0\n1\n2\n3\n4\n"
        assert out.err == ""

        # The same callbacks on a cell with a value, stderr and an error.
        sandbox.run_code(
            "import sys\nprint('w', file=sys.stderr)\ndisplay(7)\n1/0",
            on_stdout=lambda line: sys.stdout.write(line),
            on_stderr=lambda line: sys.stderr.write(line),
            on_result=lambda r: print("result:", r.data),
            on_error=lambda e: print("error:", e.name, e.message, file=sys.stderr),
        )
        out = capsys.readouterr()
        assert out.out == "result: 7\n"
        assert out.err == "w\nerror: ZeroDivisionError division by zero\n"


def test_isolated_contexts() -> None:
    with CodeSandbox.create(project="my-project") as sandbox:
        a = sandbox.create_context(language="python")
        b = sandbox.create_context(language="python")

        sandbox.run_code("secret = 1", context=a)
        r = sandbox.run_code("print(secret)", context=b)  # NameError — b never saw it
        assert r.error is not None and r.error.name == "NameError"
        assert "secret" in r.error.message
        assert "NameError" in r.error.traceback
        assert sandbox.run_code("print(secret)", context=a).stdout == "1\n"

        ids = {c.id for c in sandbox.list_contexts()}
        assert {a.id, b.id} <= ids
        restarted = sandbox.restart_context(a)  # clear all variables/state
        assert restarted.id == a.id and restarted.kernel_restarts == 1
        r = sandbox.run_code("print(secret)", context=a)
        assert r.error is not None and r.error.name == "NameError"
        sandbox.delete_context(b)  # free its resources
        assert b.id not in {c.id for c in sandbox.list_contexts()}
        with pytest.raises(NotFoundError):
            sandbox.run_code("1", context=b)


def test_checkpointing_a_session() -> None:
    # The seed installs scikit-learn with pip; sandboxes have no network, so the "heavy stack" here
    # is numpy from the template, plus kernel variables.
    sandbox = CodeSandbox.create(project="my-project")
    sandbox.run_code("import numpy as np\nx = 42\narr = np.arange(10)")
    id = sandbox.sandbox_id
    sandbox.pause()
    assert sandbox.get_info().state == "paused"

    # Later — resume with packages and kernel variables already in place
    resumed = CodeSandbox.connect(id)
    out = resumed.run_code("print(x, arr.sum(), np.__name__)")
    assert out.stdout == "42 45 numpy\n"
    assert resumed.get_info().state == "running"
    resumed.kill()


# ---- the Cloudflare-shaped guide (code-interpreter-guide.ru.txt) -------------------------------


def test_guide_contexts_and_simple_execution() -> None:
    with CodeSandbox.create(project="my-project") as sandbox:
        python_context = sandbox.create_code_context(language="python")
        assert python_context.id and python_context.language == "python"
        js_context = sandbox.create_code_context(language="javascript")
        assert js_context.language == "javascript"

        context = sandbox.create_code_context(language="python")
        result = sandbox.run_code(
            '\nprint("Hello from Code Interpreter!")\nresult = 2 + 2\nprint(f"2 + 2 = {result}")\n',
            context=context.id,
        )
        assert result.output == "Hello from Code Interpreter!\n2 + 2 = 4\n"
        assert result.success is True

        # State within a context.
        sandbox.run_code(
            '\nimport pandas as pd\nimport numpy as np\n\ndata = [1, 2, 3, 4, 5]\nprint("Data initialized")\n',
            context=context.id,
        )
        result = sandbox.run_code('\nmean = np.mean(data)\nprint(f"Mean: {mean}")\n', context=context.id)
        assert result.output == "Mean: 3.0\n"

        # Rich output.
        result = sandbox.run_code(
            "\nimport matplotlib.pyplot as plt\n\nplt.plot([1, 2, 3], [1, 4, 9])\n"
            "plt.title('Simple Chart')\nplt.show()\n",
            context=context.id,
        )
        assert result.formats() == ["text", "png"]
        assert result.outputs.png is not None
        assert base64.b64decode(result.outputs.png).startswith(PNG_SIGNATURE)
        assert result.outputs.html is None

        # Streaming (the guide sleeps 0.5 s ten times; shortened).
        seen: list = []
        result = sandbox.run_code(
            "\nimport time\n\nfor i in range(3):\n    print(f\"Processing item {i+1}/3...\")\n"
            "    time.sleep(0.1)\n\nprint(\"Done!\")\n",
            context=context.id,
            on_stdout=seen.append,
        )
        assert "".join(seen) == result.output
        assert result.output.endswith("Done!\n")

        # Failing generated code.
        result = sandbox.run_code("fib(", context=context.id)
        assert result.success is False and result.error is not None
        assert result.error.name == "SyntaxError"

        # Managing contexts.
        contexts = sandbox.list_code_contexts()
        assert {python_context.id, js_context.id, context.id} <= {c.id for c in contexts}
        sandbox.delete_code_context(context.id)
        for ctx in sandbox.list_code_contexts():
            sandbox.delete_code_context(ctx.id)
        assert sandbox.list_code_contexts() == []
        # A run with only a language makes its default context again.
        assert sandbox.run_code("print('back')").stdout == "back\n"
