"""Per-context limits: ``create_context(..., limits=...)`` gives the context's own cgroup a memory
and CPU limit; a memory bomb kills only that context's kernel, limits above the sandbox's are a
typed error. Real server, real sandboxes.
"""

from __future__ import annotations

import pytest

from lizard import AsyncCodeSandbox, CodeSandbox, ContextLimits, InvalidArgumentError


def test_memory_bomb_kills_only_its_own_kernel(sandbox: CodeSandbox) -> None:
    limited = sandbox.create_context(language="python", limits={"memory_mb": 96, "cpu_millicores": 500})
    assert limited.limits == ContextLimits(memory_mb=96, cpu_millicores=500)
    assert limited.memory_bytes is not None  # a forked kernel starts with ~0 of its own
    other = sandbox.create_context(language="python")
    assert other.limits is None
    sandbox.run_code("kept = 7", context=other)
    r = sandbox.run_code("b = b'x' * (300 << 20)", context=limited)
    assert r.error is not None and r.error.name == "KernelDied"
    assert "out-of-memory" in r.error.message
    assert sandbox.run_code("print(kept)", context=other).stdout == "7\n"
    assert sandbox.run_code("print(1 + 1)", context=limited).stdout == "2\n"
    with pytest.raises(InvalidArgumentError, match="exceeds"):
        sandbox.create_context(language="python", limits=ContextLimits(memory_mb=1 << 20))
    with pytest.raises(InvalidArgumentError, match="unknown field"):
        sandbox.create_context(language="python", limits={"memory": 64})
    sandbox.delete_context(limited)
    sandbox.delete_context(other)


@pytest.mark.anyio
async def test_async_create_context_with_limits(lizard_server: object) -> None:
    async with await AsyncCodeSandbox.create(project="sdk-tests") as sb:
        c = await sb.create_context(language="bash", limits=ContextLimits(cpu_millicores=250))
        assert c.limits == ContextLimits(cpu_millicores=250)
        r = await sb.run_code("echo ok", context=c)
        assert r.stdout == "ok\n"
