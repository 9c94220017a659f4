"""The one way a test case makes a temporary directory: temp_dir(case, prefix). No side effect on import."""
import shutil
import tempfile


def temp_dir(case, prefix, dir=None):
    """A fresh directory (under `dir`, else the system's temp dir) that is removed with all it holds once the test
    `case` ends, however it ends: after its tearDown, so that tearDown can still read it and a failed setUp
    leaves nothing either. Returns its path."""
    path = tempfile.mkdtemp(prefix=prefix, dir=dir)
    case.addCleanup(shutil.rmtree, path, ignore_errors=True)
    return path
