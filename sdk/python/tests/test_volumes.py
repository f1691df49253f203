"""Persistent volumes through the SDK against a real server: create, mount at sandbox create, data
outliving a killed sandbox, read-only mounts, ``VolumeInUseError`` and ``force``, sync and async."""

from __future__ import annotations

import pytest

from lizard import (
    AsyncCodeSandbox,
    AsyncVolumes,
    CodeSandbox,
    ConflictError,
    InvalidArgumentError,
    NotFoundError,
    SandboxVolume,
    Volumes,
    VolumeInUseError,
)


def test_volume_outlives_its_sandbox(lizard_server) -> None:
    vol = Volumes.create("py-data", size_limit_bytes=32 << 20)
    assert vol.volume_id.startswith("vol_")
    assert vol.size_limit_bytes == 32 << 20
    assert vol.mounted_by == []
    with pytest.raises(ConflictError):
        Volumes.create("py-data")
    with pytest.raises(InvalidArgumentError):
        Volumes.create("Not A Name")

    with CodeSandbox.create(volumes=["py-data"]) as a:
        info = a.get_info()
        assert info.volumes == [SandboxVolume(vol.volume_id, "py-data", "/home/user/py-data", False)]
        a.run_code("open('/home/user/py-data/hello.txt', 'w').write('from a')")
        assert Volumes.get("py-data").mounted_by == [a.sandbox_id]
    assert Volumes.get(vol.volume_id).mounted_by == []

    with CodeSandbox.create(volumes=[{"name": "py-data", "mount_path": "/data", "read_only": True}]) as b:
        assert b.run_code("print(open('/data/hello.txt').read())").stdout == "from a\n"
        ex = b.run_code("try:\n    open('/data/x', 'w')\nexcept OSError as e:\n    print(e.errno)")
        assert ex.stdout == "30\n"  # EROFS
        with pytest.raises(VolumeInUseError) as err:
            Volumes.delete("py-data")
        assert err.value.code == "volume_in_use" and err.value.status == 409
        assert isinstance(err.value, ConflictError)
        assert [v.name for v in Volumes.list()] == ["py-data"]
        assert Volumes.delete("py-data", force=True) is True
        with pytest.raises(NotFoundError):
            b.get_info()  # killed by the forced delete
    with pytest.raises(NotFoundError):
        Volumes.get("py-data")
    assert Volumes.delete("py-data") is False


def test_volume_options_are_checked_before_any_request(lizard_server) -> None:
    for bad in ["x", [{"mount_path": "/data"}], [{"name": "x", "size": 1}], [3]]:
        with pytest.raises(InvalidArgumentError):
            CodeSandbox.create(volumes=bad)
    with pytest.raises(InvalidArgumentError):
        Volumes.get("")


@pytest.mark.anyio
async def test_async_volumes(lizard_server) -> None:
    await AsyncVolumes.create("py-async", size_limit_bytes=16 << 20)
    a = await AsyncCodeSandbox.create(volumes=[{"name": "py-async", "mount_path": "/workspace"}])
    try:
        await a.run_code("open('/workspace/f', 'w').write('async')")
    finally:
        await a.kill()
    b = await AsyncCodeSandbox.create(volumes=["py-async"])
    try:
        assert (await b.run_code("print(open('/home/user/py-async/f').read())")).stdout == "async\n"
        with pytest.raises(VolumeInUseError):
            await AsyncVolumes.delete("py-async")
    finally:
        await b.kill()
    assert [v.name for v in await AsyncVolumes.list()] == ["py-async"]
    assert await AsyncVolumes.delete("py-async") is True
    assert await AsyncVolumes.delete("py-async") is False
