#!/usr/bin/python3
"""A file system that hangs while a gate file exists: a hard-mounted NFS whose server stopped answering, for
tests. A pass-through of BACKING at MOUNTPOINT (FUSE, Debian's python3-fusepy); every write(), mkdir() and
create() waits until GATE is gone. Runs in the foreground until unmounted (`fusermount3 -u MOUNTPOINT` or
`umount -l`).

    slow_fs.py MOUNTPOINT BACKING GATE
"""
import errno
import os
import sys
import time

from fusepy import FUSE, FuseOSError, Operations


class Gated(Operations):
    def __init__(self, backing, gate):
        self.backing, self.gate = backing, gate

    def real(self, path):
        return os.path.join(self.backing, path.lstrip("/"))

    def getattr(self, path, fh=None):
        try:
            st = os.lstat(self.real(path))
        except OSError as e:
            raise FuseOSError(e.errno)
        return {k: getattr(st, k) for k in ("st_mode", "st_nlink", "st_size", "st_uid", "st_gid", "st_atime",
                                            "st_mtime", "st_ctime")}

    def readdir(self, path, fh):
        return [".", "..", *os.listdir(self.real(path))]

    def wait_for_gate(self):
        while os.path.exists(self.gate):
            time.sleep(0.01)

    def mkdir(self, path, mode):
        self.wait_for_gate()
        os.mkdir(self.real(path), mode)

    def rmdir(self, path):
        os.rmdir(self.real(path))

    def unlink(self, path):
        os.unlink(self.real(path))

    def create(self, path, mode, fi=None):
        self.wait_for_gate()
        return os.open(self.real(path), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)

    def open(self, path, flags):
        return os.open(self.real(path), flags & ~(os.O_CREAT | os.O_EXCL))

    def truncate(self, path, length, fh=None):
        os.truncate(self.real(path), length)

    def read(self, path, size, offset, fh):
        return os.pread(fh, size, offset)

    def write(self, path, data, offset, fh):
        self.wait_for_gate()
        return os.pwrite(fh, data, offset)

    def release(self, path, fh):
        os.close(fh)

    def flush(self, path, fh):
        return 0

    def chmod(self, path, mode):
        os.chmod(self.real(path), mode)

    def utimens(self, path, times=None):
        os.utime(self.real(path), times)

    def statfs(self, path):
        st = os.statvfs(self.backing)
        return {k: getattr(st, k) for k in ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail", "f_ffree",
                                            "f_files", "f_flag", "f_frsize", "f_namemax")}

    def access(self, path, amode):
        if not os.access(self.real(path), amode):
            raise FuseOSError(errno.EACCES)


if __name__ == "__main__":
    mountpoint, backing, gate = sys.argv[1:4]
    FUSE(Gated(backing, gate), mountpoint, foreground=True, nothreads=False)
