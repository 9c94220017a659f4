"""A real SLURM 22.05 cluster on this machine, for tests: munged, slurmctld and N slurmd (n1..nN).

Everything lives in one temp dir: slurm.conf, a fresh MUNGE key, munged's socket, pid, log and seed, the
daemons' spool, state and log files. The node names n1..nN resolve to 127.0.0.1 only inside this process's
private mount namespace, where a generated hosts file is bind-mounted over /etc/hosts (the machine's own file is
never touched). The daemons are started from inside that namespace, so every srun/sbatch step they spawn - and
every ddprun in it - sees the same names.

    with SlurmCluster(nodes=3) as c:          # raises unittest.SkipTest only if the daemons cannot start
        r = c.srun("-N2", "hostname")
        job = c.sbatch_wait(script_text)

Teardown (also after a failure, Ctrl-C or SIGTERM from ctest) cancels every job, stops the daemons, kills any
process of a step still alive (this process is a child subreaper, so slurmstepd and whatever it started are our
descendants), unmounts the hosts file and removes the temp dir.
"""
import ctypes
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import unittest

from harness import comm, descendants, kill_all, reap_zombies  # also makes this process a child subreaper
from temp_dirs import temp_dir
from wait import wait_until

PR_SET_CHILD_SUBREAPER = 36
PR_SET_PDEATHSIG = 1
CLONE_NEWNS = 0x00020000
MS_REC, MS_PRIVATE, MS_BIND = 0x4000, 0x40000, 0x1000
MNT_DETACH = 2

_libc = ctypes.CDLL(None, use_errno=True)
_SBIN = ["slurmctld", "slurmd", "munged", "srun", "sbatch", "scancel", "scontrol", "sinfo"]


def _die_with_parent():
    # A daemon must not outlive a test process that was SIGKILLed (no teardown runs then).
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _free_ports(count):
    socks, ports = [], []
    for _ in range(count):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


_namespace_entered = False


def _enter_private_mount_namespace():
    """This process (single-threaded here) gets its own mount namespace; its children inherit it."""
    global _namespace_entered
    if _namespace_entered:
        return
    if _libc.unshare(CLONE_NEWNS) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNS)")
    # Without this, the bind mount below could propagate back to the machine's namespace.
    if _libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None) != 0:
        raise OSError(ctypes.get_errno(), "mount --make-rprivate /")
    _namespace_entered = True


def slurm_rdzv_ports(job_id, step_id):
    """The candidate rendezvous ports of a SLURM step, as launcher/slurm_ports.cpp computes them (FNV-1a of
    "JOB.STEP", each index mixed in by splitmix64's finalizer)."""
    mask = (1 << 64) - 1

    def mix(x):
        x = (x + 0x9e3779b97f4a7c15) & mask
        x = ((x ^ (x >> 30)) * 0xbf58476d1ce4e5b9) & mask
        x = ((x ^ (x >> 27)) * 0x94d049bb133111eb) & mask
        return x ^ (x >> 31)

    key = 14695981039346656037
    for c in f"{job_id}.{step_id}".encode():
        key = ((key ^ c) * 1099511628211) & mask
    ports, i = [], 0
    while len(ports) < 8:
        port = 29400 + mix(key ^ mix(i)) % 1000
        if port not in ports:
            ports.append(port)
        i += 1
    return ports


class Result:
    def __init__(self, args, code, out, err, elapsed):
        self.args, self.code, self.out, self.err, self.elapsed = args, code, out, err, elapsed

    def text(self):
        return self.out + self.err

    def __repr__(self):
        return (f"{' '.join(self.args)}: exit {self.code} after {self.elapsed:.2f}s\n--- stdout\n{self.out[-3000:]}"
                f"\n--- stderr\n{self.err[-3000:]}")


class SlurmCluster:
    """A SLURM cluster of `nodes` nodes with `cpus` CPUs each, one partition 'test' holding all of them."""

    def __init__(self, nodes=3, cpus=2, proctrack="linuxproc", extra_conf="", scheduler="builtin"):
        self.nodes = [f"n{i}" for i in range(1, nodes + 1)]
        self.cpus = cpus
        self.proctrack = proctrack
        self.extra_conf = extra_conf
        self.scheduler = scheduler
        self.dir = None
        self.daemons = {}
        self._hosts_mounted = False
        self._old_sigterm = None

    # ---- lifecycle -------------------------------------------------------------------------------------
    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    def start(self):
        if os.geteuid() != 0:
            raise unittest.SkipTest("the SLURM test cluster needs root (slurmd runs steps as the submitting user)")
        missing = [b for b in _SBIN if not shutil.which(b, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")]
        if missing:
            raise unittest.SkipTest(f"SLURM test cluster: {', '.join(missing)} not installed (scripts/setup "
                                    "installs slurm-wlm and munge)")
        _libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        # ctest's timeout sends SIGTERM: turn it into an exception so that teardown runs.
        self._old_sigterm = signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
        self.dir = tempfile.mkdtemp(prefix="ddprun_slurm_")
        try:
            try:
                _enter_private_mount_namespace()
                self._mount_hosts()
            except OSError as e:
                raise unittest.SkipTest(f"SLURM test cluster: no private mount namespace for the node names ({e})")
            self._write_config()
            self._start_munged()
            self._start_slurmctld()
            for name in self.nodes:
                self._start_slurmd(name)
            self._wait_idle(timeout=30)
        except BaseException:
            self.stop()
            raise

    def stop(self):
        if self.dir is None:
            return
        if "slurmctld" in self.daemons and self.daemons["slurmctld"].poll() is None:
            subprocess.run(["scancel", "--full", "--partition=test"], env=self.env(), capture_output=True,
                           timeout=10)
        # Stop slurmd first (steps are then orphans we can see), then the controller, then munged.
        for name in [n for n in self.daemons if n.startswith("slurmd")] + ["slurmctld", "munged"]:
            proc = self.daemons.get(name)
            if proc and proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        self.daemons.clear()
        self.kill_leftovers()
        if self._hosts_mounted:
            _libc.umount2(b"/etc/hosts", MNT_DETACH)
            self._hosts_mounted = False
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir = None
        if self._old_sigterm is not None:
            signal.signal(signal.SIGTERM, self._old_sigterm)
            self._old_sigterm = None

    def leftovers(self):
        """Live descendants of this process that belong to jobs: slurmstepd, srun, sbatch, ddprun, workers.
        Not the daemons nor what slurmctld and munged run for themselves (slurmscriptd)."""
        daemon_pids = {p.pid for p in self.daemons.values()}
        ours = set()
        for name in ("slurmctld", "munged"):
            if name in self.daemons:
                ours.update(descendants(self.daemons[name].pid))
        left = []
        for pid in descendants(os.getpid()):
            if pid in daemon_pids or pid in ours or comm(pid) in ("slurmd", ""):
                continue  # slurmd's own forks handle one RPC each and exit; they run no job
            left.append(pid)
        return left

    def kill_job_processes(self):
        """SIGKILLs what leftovers() lists (the daemons stay); returns what it found, described."""
        left = self.leftovers()
        described = [f"{pid} {comm(pid)}" for pid in left]
        kill_all(left)
        reap_zombies()
        return described

    def kill_leftovers(self):
        """Teardown: SIGKILLs every descendant of this process, daemons included."""
        for _ in range(50):
            reap_zombies()
            left = [p for p in descendants(os.getpid())]
            if not left:
                return
            kill_all(left)
            time.sleep(0.02)
        reap_zombies()

    # ---- running things in the cluster ------------------------------------------------------------------
    def env(self, **extra):
        env = dict(os.environ)
        for k in list(env):
            if k.startswith("SLURM_") or k.startswith("SBATCH_") or k.startswith("SRUN_"):
                del env[k]
        env["SLURM_CONF"] = self.path("slurm.conf")
        env["PATH"] = env.get("PATH", "/usr/bin:/bin") + ":/usr/sbin:/sbin"
        env.update({k: str(v) for k, v in extra.items()})
        return env

    def path(self, name):
        return os.path.join(self.dir, name)

    def popen(self, *args, env=None, **kw):
        return subprocess.Popen(list(map(str, args)), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=env or self.env(), cwd=self.dir, stdin=subprocess.DEVNULL, **kw)

    def run(self, *args, timeout=60, env=None):
        t0 = time.monotonic()
        proc = self.popen(*args, env=env)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            return Result(list(map(str, args)), None, out, err + f"\n(killed after {timeout}s)", timeout)
        return Result(list(map(str, args)), proc.returncode, out, err, time.monotonic() - t0)

    def srun(self, *args, timeout=60, env=None):
        return self.run("srun", "--partition=test", *args, timeout=timeout, env=env)

    def sbatch(self, script, *args, env=None, script_args=()):
        """Submits `script` (text) with sbatch options `args` and the script's own `script_args`; returns the
        job id."""
        path = os.path.join(self.dir, f"job{time.monotonic_ns()}.sbatch")
        with open(path, "w") as f:
            f.write(script)
        r = self.run("sbatch", "--parsable", "--partition=test", *args, path, *script_args, env=env)
        if r.code != 0:
            raise AssertionError(f"sbatch failed: {r}")
        return int(r.out.strip().split(";")[0])

    def job_info(self, job_id):
        """scontrol show job's fields (the controller keeps finished jobs for MinJobAge seconds)."""
        r = self.run("scontrol", "-o", "show", "job", job_id)
        fields = {}
        for item in r.out.split():
            key, _, value = item.partition("=")
            fields.setdefault(key, value)
        return fields

    def wait_job(self, job_id, timeout=60, states=("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL",
                                                    "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL", "DEADLINE")):
        def finished():
            info = self.job_info(job_id)
            return info if info.get("JobState") in states else None
        return wait_until(finished, lambda: f"job {job_id} to finish: {self.job_info(job_id)}", timeout, interval=0.1)

    def sbatch_wait(self, script, *args, timeout=60, env=None):
        job = self.sbatch(script, *args, env=env)
        return job, self.wait_job(job, timeout=timeout)

    def wait_idle(self, timeout=30):
        self._wait_idle(timeout)

    # ---- setup ------------------------------------------------------------------------------------------
    def _mount_hosts(self):
        hosts = self.path("hosts")
        with open("/etc/hosts") as f:
            original = f.read()
        with open(hosts, "w") as f:
            f.write(original.rstrip("\n") + "\n# ddprun SLURM test cluster\n")
            f.write("127.0.0.1 " + " ".join(self.nodes) + "\n")
        if _libc.mount(hosts.encode(), b"/etc/hosts", None, MS_BIND, None) != 0:
            raise OSError(ctypes.get_errno(), "bind mount over /etc/hosts")
        self._hosts_mounted = True

    def _write_config(self):
        ctld_port, *node_ports = _free_ports(1 + len(self.nodes))
        d = self.dir
        # Other users (a MUNGE test runs a client as nobody) must reach munged's socket: search rights only.
        os.chmod(d, 0o711)
        for sub, mode in (("state", 0o700), ("spool", 0o755), ("munge", 0o711), ("munge-key", 0o700)):
            os.makedirs(os.path.join(d, sub), exist_ok=True)
            os.chmod(os.path.join(d, sub), mode)
        with open(self.path("munge-key/munge.key"), "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(self.path("munge-key/munge.key"), 0o400)
        node_lines = "\n".join(f"NodeName={n} NodeHostname={n} NodeAddr=127.0.0.1 Port={p} CPUs={self.cpus} "
                               f"State=UNKNOWN" for n, p in zip(self.nodes, node_ports))
        lo, hi = self.nodes[0][1:], self.nodes[-1][1:]
        # FirstJobId is random: two clusters on one machine (two test runs at once) should not share job ids, from
        # which ddprun's run id (slurm-JOBID.STEP) and rendezvous ports (slurm_rdzv_ports) derive.
        conf = f"""# generated by tests/support/cluster.py
ClusterName=ddprun-test
FirstJobId={random.randint(1000, 999_999)}
SlurmctldHost={socket.gethostname().split(".")[0]}(127.0.0.1)
MailProg=/bin/true
SlurmctldPort={ctld_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={d}/munge/munge.socket
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool/%n
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd-%n.pid
SlurmctldLogFile={d}/slurmctld.log
SlurmdLogFile={d}/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/{self.proctrack}
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/{self.scheduler}
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
SlurmdParameters=config_overrides
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/filetxt
JobCompLoc={d}/jobcomp.txt
MinJobAge=600
KillWait=5
MessageTimeout=5
SlurmdTimeout=30
InactiveLimit=0
{"SchedulerParameters=bf_interval=1" if self.scheduler == "backfill" else ""}
{self.extra_conf}
{node_lines}
PartitionName=test Nodes=n[{lo}-{hi}] Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
"""
        with open(self.path("slurm.conf"), "w") as f:
            f.write(conf)

    def _spawn(self, name, args):
        log = open(self.path(f"{name}.out"), "w")
        self.daemons[name] = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                              env=self.env(), cwd=self.dir, preexec_fn=_die_with_parent)
        log.close()

    def _start_munged(self):
        m = self.path("munge")
        self._spawn("munged", ["munged", "--foreground", "--force", f"--socket={m}/munge.socket",
                               f"--key-file={self.path('munge-key/munge.key')}", f"--pid-file={m}/munged.pid",
                               f"--log-file={m}/munged.log", f"--seed-file={m}/munged.seed"])
        self._wait_for(lambda: os.path.exists(f"{m}/munge.socket"), 10, "munged")

    def _start_slurmctld(self):
        self._spawn("slurmctld", ["slurmctld", "-D", "-i", "-f", self.path("slurm.conf")])
        self._wait_for(lambda: self.run("scontrol", "ping", timeout=10).out.count("UP") > 0, 20, "slurmctld")

    def _start_slurmd(self, name):
        self._spawn(f"slurmd-{name}", ["slurmd", "-D", "-N", name, "-f", self.path("slurm.conf")])

    def _wait_idle(self, timeout):
        def idle():
            r = self.run("sinfo", "-h", "-N", "-o", "%N %t", timeout=10)
            states = dict(line.split() for line in r.out.splitlines() if line.strip())
            return all(states.get(n) == "idle" for n in self.nodes)
        self._wait_for(idle, timeout, "slurmd (nodes idle)")

    def _wait_for(self, condition, timeout, what):
        # Not wait_until: a cluster that does not come up skips the test class, it does not fail it.
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            dead = [n for n, p in self.daemons.items() if p.poll() is not None]
            if dead:
                raise unittest.SkipTest(f"SLURM test cluster: {', '.join(dead)} exited at start:\n{self._logs()}")
            if condition():
                return
            time.sleep(0.1)
        raise unittest.SkipTest(f"SLURM test cluster: {what} not ready within {timeout}s:\n{self._logs()}")

    def _logs(self):
        text = []
        for name in sorted(os.listdir(self.dir)):
            if name.endswith((".log", ".out")):
                with open(self.path(name), errors="replace") as f:
                    text.append(f"--- {name}\n{f.read()[-1500:]}")
        return "\n".join(text)


def _raise_keyboard_interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


class SlurmClusterCase(unittest.TestCase):
    """One cluster per test class (started in about a second); every test must leave no job process behind.

    Subclasses use self.cluster, self.tmp (a fresh dir per test, visible on every 'node'), DDPRUN and WORKER.
    """
    NODES = 3
    CPUS = 2
    PROCTRACK = "linuxproc"
    SCHEDULER = "builtin"  # heterogeneous jobs need "backfill" (SLURM schedules them with no other)

    @classmethod
    def setUpClass(cls):
        cls.cluster = SlurmCluster(nodes=cls.NODES, cpus=cls.CPUS, proctrack=cls.PROCTRACK, scheduler=cls.SCHEDULER)
        cls.cluster.start()

    @classmethod
    def tearDownClass(cls):
        cls.cluster.stop()

    def setUp(self):
        self.tmp = temp_dir(self, "case_", dir=self.cluster.dir)
        os.chmod(self.tmp, 0o777)

    def tearDown(self):
        # Not wait_until: whatever is left after 10 s is killed and the cluster made idle first, then the test fails.
        deadline = time.monotonic() + 10
        left = self.cluster.leftovers()
        while left and time.monotonic() < deadline:
            time.sleep(0.05)
            reap_zombies()
            left = self.cluster.leftovers()
        described = self.cluster.kill_job_processes()
        self.cluster.run("scancel", "--full", "--partition=test", timeout=10)
        self.cluster.wait_idle(timeout=30)  # the next test gets every node
        self.assertEqual(described, [], "job processes left behind after the test")

    def path(self, name):
        return os.path.join(self.tmp, name)
