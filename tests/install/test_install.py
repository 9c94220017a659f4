"""ddprun as installed: `cmake --install` into a temporary prefix, then used the way a user would.

The prefix is installed once and then moved elsewhere before anything uses it, so every check also shows
that nothing installed points back into the build tree or at the prefix it was installed to: ddprun finds
nothing on disk but what it installed beside itself (its job guard is a fork of itself; the Python helper is
found from its own location), and the CMake package locates itself.
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

BUILD_DIR = os.environ.get("DDPRUN_BUILD_DIR", "")
SOURCE_DIR = os.environ.get("DDPRUN_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "../.."))
CMAKE = os.environ.get("CMAKE_COMMAND", "cmake")
HAS_SDK = os.environ.get("DDPRUN_HAS_SDK") == "1"
HAS_MAN = os.environ.get("DDPRUN_HAS_MAN") == "1"
HERE = os.path.dirname(os.path.abspath(__file__))


def run(args, timeout=120, **kw):
    """Runs a command in its own session; on timeout or failure the whole group is killed."""
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, **kw)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise AssertionError(f"{args[0]} did not finish within {timeout} s:\n{out}\n{err}")
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # anything the command left in its group
        except ProcessLookupError:
            pass
    return proc.returncode, out, err


def section_names(binary):
    """The section names of an ELF file (readelf -S)."""
    code, out, err = run(["readelf", "-S", "-W", binary])
    assert code == 0, err
    return {word for line in out.splitlines() for word in line.split() if word.startswith(".")}


def configure_args(source, build, *extra):
    args = [CMAKE, "-S", source, "-B", build, "-DCMAKE_BUILD_TYPE=Release"]
    if os.environ.get("CMAKE_GENERATOR"):
        args += ["-G", os.environ["CMAKE_GENERATOR"]]
    for var in ("CMAKE_CXX_COMPILER", "CMAKE_CXX_COMPILER_LAUNCHER"):
        if os.environ.get(var):
            args.append(f"-D{var}={os.environ[var]}")
    if os.environ.get("DDPRUN_CXX_FLAGS", "").strip():  # the flags ddprun was built with (sanitizers)
        args.append(f"-DCMAKE_CXX_FLAGS={os.environ['DDPRUN_CXX_FLAGS']}")
    return args + list(extra)


@unittest.skipUnless(BUILD_DIR, "DDPRUN_BUILD_DIR is not set (run through ctest)")
class InstalledPackage(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="ddprun-install-")
        try:
            staging = os.path.join(cls.tmp, "staging")
            code, out, err = run([CMAKE, "--install", BUILD_DIR, "--prefix", staging])
            if code != 0:
                raise AssertionError(f"cmake --install failed ({code}):\n{out}\n{err}")
            cls.prefix = os.path.join(cls.tmp, "moved", "prefix")
            os.makedirs(os.path.dirname(cls.prefix))
            os.rename(staging, cls.prefix)
        except BaseException:
            shutil.rmtree(cls.tmp, ignore_errors=True)
            raise

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def at(self, *parts):
        return os.path.join(self.prefix, *parts)

    def env(self):
        """A user's environment: the installed bin/ first on PATH, nothing of the build tree."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("DDPRUN", "PET_"))}
        env["PATH"] = self.at("bin") + os.pathsep + env.get("PATH", "")
        return env

    def test_layout(self):
        expected = ["bin/ddprun", "bin/ddprun-launch", "bin/ddprun-rendezvous", "bin/ddprun-status",
                    "share/bash-completion/completions/ddprun", "share/bash-completion/completions/ddprun-rendezvous",
                    "share/bash-completion/completions/ddprun-status", "share/bash-completion/completions/ddprun-launch",
                    "share/ddprun/python/ddprun_heartbeat.py",
                    "lib/cmake/ddprun/ddprunConfig.cmake", "lib/cmake/ddprun/ddprunConfigVersion.cmake",
                    "lib/cmake/ddprun/ddprunTargets.cmake"]
        if HAS_SDK:
            expected += ["include/ddprun/worker_sdk/sdk.hpp", "lib/libddprun_sdk.a"]
        if HAS_MAN:
            expected += ["share/man/man1/ddprun.1", "share/man/man1/ddprun-rendezvous.1", "share/man/man1/ddprun-status.1"]
        missing = [p for p in expected if not os.path.exists(self.at(*p.split("/")))]
        self.assertEqual(missing, [], f"not installed under {self.prefix}")
        code, out, err = run([self.at("bin", "ddprun"), "--version"], env=self.env(), timeout=10)
        self.assertEqual(code, 0, err)
        self.assertRegex(out, r"^ddprun \d+\.\d+\.\d+")
        # ddprun-launch: ddprun itself under launch's name (docs/TORCHRUN.md), a relative link (a moved prefix works).
        self.assertEqual(os.readlink(self.at("bin", "ddprun-launch")), "ddprun")
        code, out, err = run(["ddprun-launch", "--nproc-per-node", "1", "--no-python", "true"], env=self.env(),
                             timeout=30)
        self.assertEqual(code, 0, err)
        code, out, err = run([self.at("bin", "ddprun-rendezvous"), "--version"], env=self.env(), timeout=10)
        self.assertEqual(code, 0, err)
        self.assertRegex(out, r"^ddprun-rendezvous \d+\.\d+\.\d+")
        code, out, err = run([self.at("bin", "ddprun-status"), "--version"], env=self.env(), timeout=10)
        self.assertEqual(code, 0, err)
        self.assertRegex(out, r"^ddprun-status \d+\.\d+\.\d+")
        code, out, err = run([self.at("bin", "ddprun-rendezvous"), "--help"], env=self.env(), timeout=10)
        self.assertEqual(code, 0, err)
        for exe in ("ddprun", "ddprun-rendezvous"):
            # No run path into the build tree: the installed binary stands alone.
            code, out, err = run(["readelf", "-d", self.at("bin", exe)])
            self.assertNotIn(BUILD_DIR, out)

    def test_release_install_strips_and_others_keep_symbols(self):
        # The build under test keeps its symbols when installed as itself (RelWithDebInfo in CI)...
        sections = section_names(self.at("bin", "ddprun"))
        code, out, _ = run([CMAKE, "-N", "-L", BUILD_DIR])
        if "CMAKE_BUILD_TYPE:STRING=RelWithDebInfo" in out or "CMAKE_BUILD_TYPE:STRING=Debug" in out:
            self.assertIn(".symtab", sections)
        # ...and the same install rules strip when the configuration is Release.
        release = os.path.join(self.tmp, "release")
        code, out, err = run([CMAKE, "--install", BUILD_DIR, "--config", "Release", "--prefix", release])
        self.assertEqual(code, 0, err)
        for exe in ("ddprun", "ddprun-rendezvous"):
            stripped = section_names(os.path.join(release, "bin", exe))
            self.assertNotIn(".symtab", stripped, exe)
            self.assertNotIn(".debug_info", stripped, exe)
        code, out, err = run([os.path.join(release, "bin", "ddprun"), "--version"], timeout=10)
        self.assertEqual(code, 0, err)

    def test_a_python_worker_imports_the_installed_heartbeat_helper(self):
        # No PYTHONPATH, no copy beside the script: the installed ddprun adds <prefix>/share/ddprun/python (found
        # from where it runs, so the moved prefix too) at the end of its Python workers' PYTHONPATH.
        script = os.path.join(self.tmp, "beats.py")
        with open(script, "w") as f:
            f.write("import os, ddprun_heartbeat\nddprun_heartbeat.beat(0)\n"
                    "print(os.path.realpath(ddprun_heartbeat.__file__))\n")
        env = self.env()
        env.pop("PYTHONPATH", None)
        env["PYTHON_EXEC"] = sys.executable
        code, out, err = run(["ddprun", "--nproc-per-node", "2", script], env=env, timeout=60, cwd=self.tmp)
        self.assertEqual(code, 0, err)
        helper = os.path.realpath(self.at("share", "ddprun", "python", "ddprun_heartbeat.py"))
        self.assertEqual(sorted(out.splitlines()), [f"[rank0]: {helper}", f"[rank1]: {helper}"], err)

    @unittest.skipUnless(HAS_SDK, "the worker SDK was not built (DDPRUN_BUILD_SDK=OFF or no LibTorch)")
    def test_out_of_tree_program_runs_under_installed_ddprun(self):
        build = os.path.join(self.tmp, "consumer-build")
        code, out, err = run(configure_args(os.path.join(HERE, "consumer"), build,
                                            f"-DCMAKE_PREFIX_PATH={self.prefix}"), env=self.env())
        self.assertEqual(code, 0, f"configure failed:\n{out}\n{err}")
        code, out, err = run([CMAKE, "--build", build], timeout=240, env=self.env())
        self.assertEqual(code, 0, f"build failed:\n{out}\n{err}")
        with open(os.path.join(build, "ddprun_location.txt")) as f:
            self.assertEqual(f.read().strip(), self.at("bin", "ddprun"))

        started = time.monotonic()
        code, out, err = run(["ddprun", "--nproc-per-node", "2", os.path.join(build, "allreduce_check")],
                             timeout=60, env=self.env(), cwd=self.tmp)
        self.assertEqual(code, 0, f"the job failed:\n{out}\n{err}")
        for rank in (0, 1):
            self.assertIn(f"rank {rank} of 2: allreduce sum 3 ok", out, err)
        self.assertLess(time.monotonic() - started, 30)

    @unittest.skipUnless(HAS_SDK, "the worker SDK was not built (DDPRUN_BUILD_SDK=OFF or no LibTorch)")
    def test_add_subdirectory_configures(self):
        # Configure only: building it is the same compile as the test above (done by hand, docs/SDK.md).
        build = os.path.join(self.tmp, "subproject-build")
        code, out, err = run(configure_args(os.path.join(HERE, "subproject"), build,
                                            f"-DDDPRUN_SOURCE_DIR={os.path.abspath(SOURCE_DIR)}"))
        self.assertEqual(code, 0, f"configure failed:\n{out}\n{err}")
        # Added by another project, the SDK installs nothing unless asked to.
        code, out, err = run([CMAKE, "-N", "-L", build])
        self.assertIn("DDPRUN_SDK_INSTALL:BOOL=OFF", out)

    @unittest.skipUnless(HAS_MAN, "help2man was not found when configuring: no man page")
    def test_man_page_renders_without_warnings(self):
        page = self.at("share", "man", "man1", "ddprun.1")
        if shutil.which("groff"):
            cmd = ["groff", "-man", "-Tutf8", "-ww", page]
        elif shutil.which("man"):
            cmd = ["man", "-l", "--warnings", page]
        else:
            self.skipTest("neither groff nor man is installed")
        code, out, err = run(cmd, env=dict(self.env(), MANPAGER="cat", PAGER="cat", MANWIDTH="100"))
        self.assertEqual(code, 0, err)
        self.assertEqual(err.strip(), "", "warnings while rendering the man page")
        text = re.sub(".\b", "", out)  # grotty's overstrike bold and underline
        for expected in ("ddprun", "--nproc-per-node", "EXIT STATUS", "ENVIRONMENT"):
            self.assertIn(expected, text)

    def complete(self, *words, cwd=None, command="ddprun"):
        """COMPREPLY of the installed completion for `COMMAND WORDS...` (the cursor on the last word)."""
        script = ('source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); '
                  '_ddprun; printf "%s\\n" "${COMPREPLY[@]}"')
        code, out, err = run(["bash", "--norc", "--noprofile", "-c", script, "bash",
                              self.at("share", "bash-completion", "completions", command), command,
                              *words], env=self.env(), cwd=cwd, timeout=20)
        self.assertEqual(code, 0, err)
        self.assertEqual(err, "")
        return [line for line in out.splitlines() if line]

    def test_bash_completion(self):
        self.assertIn("--nproc-per-node", self.complete("--nproc"))
        self.assertIn("--nproc_per_node", self.complete("--nproc_"))  # torchrun's spelling
        self.assertEqual(self.complete("--log-level", "wa"), ["warning"])
        self.assertEqual(self.complete("--local-rank-arg", ""), ["dash", "underscore", "none"])
        # --log-dir takes a directory: directories are offered, files are not.
        os.makedirs(os.path.join(self.tmp, "cwd", "logs_dir"), exist_ok=True)
        open(os.path.join(self.tmp, "cwd", "logs_file"), "w").close()
        self.assertEqual(self.complete("--log-dir", "logs_", cwd=os.path.join(self.tmp, "cwd")), ["logs_dir"])
        # Once the program has begun, its arguments are not ddprun's options.
        self.assertEqual(self.complete("--standalone", "train.py", "--nnod"), [])
        self.assertEqual(self.complete("--standalone", "--nnod"), ["--nnodes"])
        # ddprun-rendezvous: its own options, from its own --help.
        self.assertEqual(self.complete("--heartbeat-t", command="ddprun-rendezvous"), ["--heartbeat-timeout"])
        self.assertEqual(self.complete("--static", command="ddprun-rendezvous"), ["--static-node-ranks"])
        self.assertEqual(self.complete("--rdzv", command="ddprun-rendezvous"), ["--rdzv-id", "--rdzv-timeout"])
        self.assertEqual(self.complete("--nproc", command="ddprun-rendezvous"), [])
        self.assertEqual(self.complete("--wat", command="ddprun-status"), ["--watch"])


if __name__ == "__main__":
    unittest.main()
