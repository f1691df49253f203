"""Loads the zygote entry (argv[1]) into this interpreter, enters a new mount namespace and calls
it; prints what moved as JSON. With argv[2] == "hide", a directory holding mapped extension
modules is hidden under an empty tmpfs in the new namespace first, so one file is missing there.
Run by zygote_entry.rs, as root."""
import ctypes, json, os, sys
libc = ctypes.CDLL(None, use_errno=True)
entry = ctypes.CDLL(sys.argv[1])
entry.lizard_zygote_remap.restype = ctypes.c_long
entry.lizard_zygote_remap.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
own = os.path.realpath(sys.argv[1])

def mnt_id(path, flags=os.O_RDONLY):
    fd = os.open(path, flags)
    try:
        return next(int(l.split()[1]) for l in open(f'/proc/self/fdinfo/{fd}') if l.startswith('mnt_id:'))
    finally:
        os.close(fd)

def file_mappings():
    out = {}
    for line in open('/proc/self/maps'):
        parts = line.split(None, 5)
        if len(parts) == 6 and parts[5].startswith('/') and parts[5].strip() != own:
            out[parts[0]] = (parts[5].strip(), mnt_id('/proc/self/map_files/' + parts[0]))
    return out

# Private copies of file pages that must survive: module state and the interpreter's own data.
state = {str(i): list(range(i)) for i in range(300)}
before = file_mappings()
exe_before = mnt_id('/proc/self/exe')
assert libc.unshare(0x20000) == 0, ctypes.get_errno()          # CLONE_NEWNS
assert libc.mount(b'none', b'/', None, 0x40000 | 0x4000, None) == 0, ctypes.get_errno()  # MS_REC|MS_PRIVATE
new_root = mnt_id('/', os.O_PATH)
if sys.argv[2:] == ['hide']:
    hidden = os.path.dirname(json.__spec__.origin) + '/../lib-dynload'  # _json's, _struct's, ...
    assert libc.mount(b'tmpfs', os.path.realpath(hidden).encode(), b'tmpfs', 0, None) == 0, ctypes.get_errno()
copied = entry.lizard_zygote_remap(b'', 0)
after = file_mappings()
result = {
    'copied': copied,
    'mappings': len(before),
    'same_paths': {k: v[0] for k, v in before.items()} == {k: v[0] for k, v in after.items()},
    'old_mounts': sorted({m for _, m in before.values()}),
    'new_mounts': sorted({m for _, m in after.values()}),
    'new_root': new_root,
    'exe': [exe_before, mnt_id('/proc/self/exe')],
    'state_intact': state == {str(i): list(range(i)) for i in range(300)},
    'still_runs': json.loads(json.dumps({'a': [1, 2.5, 'x']})) == {'a': [1, 2.5, 'x']},
}
if sys.argv[2:] != ['hide']:
    import decimal, hashlib  # more code and extension modules after the move
    result['imports'] = hashlib.sha256(str(decimal.Decimal(1) / 7).encode()).hexdigest()
print(json.dumps(result))
