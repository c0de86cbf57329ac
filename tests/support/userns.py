"""Runs a command in a new user namespace that maps uids and gids 0-65535
to themselves (run as root). Tests use it to change per-namespace limits,
such as user.max_user_namespaces, without touching the machine's.

usage: python3 userns.py CMD [ARG...]
"""
import ctypes
import os
import sys

CLONE_NEWUSER = 0x10000000
libc = ctypes.CDLL(None, use_errno=True)

ready_r, ready_w = os.pipe()
go_r, go_w = os.pipe()
pid = os.fork()
if pid == 0:
    if libc.unshare(CLONE_NEWUSER) != 0:
        sys.exit("unshare(CLONE_NEWUSER): " + os.strerror(ctypes.get_errno()))
    os.write(ready_w, b"x")
    os.read(go_r, 1)
    os.execvp(sys.argv[1], sys.argv[1:])
os.read(ready_r, 1)
for name in ("uid_map", "gid_map"):
    with open(f"/proc/{pid}/{name}", "w") as f:
        f.write("0 0 65536\n")
os.write(go_w, b"x")
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
