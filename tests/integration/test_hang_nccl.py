"""The NCCL Flight Recorder's dump, asked for by the hang capture before the kill (README "Hang detection").

There is no GPU here and Debian's torch has no NCCL, so py/fake_nccl_recorder.py plays ProcessGroupNCCL's part of
the contract: a real process that keeps what torch keeps, read from pytorch/pytorch:
  torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp, struct DumpPipe:
      std::string filename = c10::str(fileStem, rank, ".pipe");      // fileStem: TORCH_NCCL_DEBUG_INFO_PIPE_FILE
      if (fileStem.empty() || traceBufferSize <= 0) return;           // TORCH_NCCL_TRACE_BUFFER_SIZE
      unlink(filename.c_str()) ...; mkfifo(filename.c_str(), 0666) ...;
      fd_ = open(filename.c_str(), O_RDONLY | O_NONBLOCK);
      bool shouldDump() { ... ssize_t bytesRead = read(fd_, &buf, 128); return bytesRead > 0; }
  ProcessGroupNCCL::HeartbeatMonitor::runLoop (2.2: watchdogHandler):
      if (pg_->getUid() == 0) dumpPipe.emplace(pg_->globalRank());   // the default group: the global rank
      int monitorPollInterval = checkDumpSignal ? coordCheckIntervalMilSec_ : heartbeatTimeoutInSec_ * 1000;
      if (dumpPipe.has_value() && dumpPipe->shouldDump()) ... std::async(... dumpDebuggingInfo ...)
  torch/csrc/distributed/c10d/FlightRecorder.cpp (NCCLUtils.cpp before), DebugInfoWriter::getWriter:
      getCvarString({"TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"}, defaultLocation)
      new DebugInfoWriter(fileNamePrefix, rank)                      // filename_ = prefix + rank
  DebugInfoWriter::write: std::ofstream file(filename_, std::ios::binary); file.write(trace...)
What ddprun does with it is the real thing: the variables it sets, the byte it writes, the bounded wait, where the
dumps end up and how they are named."""
import os
import pickle
import re
import stat
import time

import support_path  # noqa: F401  (puts tests/support, the fixtures, on sys.path)
from exit_codes import HUNG
from harness import DdprunTestCase, WORKER

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON_DIR = os.path.join(HERE, "..", "..", "python")
RECORDER = os.path.join(HERE, "py", "fake_nccl_recorder.py")


class FlightRecorder(DdprunTestCase):
    def setUp(self):
        super().setUp()
        self.env["PYTHONPATH"] = f"{PYTHON_DIR}:{self.env.get('PYTHONPATH', '')}"
        self.env["PYTHON_EXEC"] = "/usr/bin/python3"

    def recorder_job(self, mode, *extra, hung="1", dump_delay="0"):
        return self.run_ddprun("--nproc-per-node", 2, "--hang-timeout", "1.5", *extra, RECORDER, mode,
                               "--hung-rank", hung, "--dump-delay", dump_delay, timeout=60)

    def test_a_hang_gets_every_ranks_dump_in_the_log_dir_named_in_the_summary_and_events(self):
        logs, events = self.path("logs"), self.path("events.jsonl")
        r = self.recorder_job("hang", "--log-dir", logs, "--events-file", events)
        err = r.stderr.decode()
        self.assertEqual(r.code, HUNG, r)
        self.assertRegex(err, r"root cause: rank 1 \(.*\) hung: ", r)
        named = dict(re.findall(r"NCCL Flight Recorder dump of rank (\d) in (\S+)", err))
        self.assertEqual(sorted(named), ["0", "1"], r)
        for rank, path in named.items():
            self.assertTrue(path.startswith(logs) and path.endswith(f"attempt_0/{rank}/nccl_trace_rank_{rank}"), path)
            with open(path, "rb") as f:
                self.assertEqual(pickle.load(f)["rank"], int(rank))
        stacks_event = [e for e in self.events(events) if e["event"] == "stacks"]
        self.assertEqual(len(stacks_event), 1)
        self.assertEqual({d["rank"]: d["file"] for d in stacks_event[0]["nccl_dumps"]},
                         {int(k): v for k, v in named.items()})
        summary = [e for e in self.events(events) if e["event"] == "summary"][0]
        self.assertEqual(sorted(d["rank"] for d in summary["nccl_dumps"]), [0, 1])
        with open(stacks_event[0]["file"]) as f:
            stacks = f.read()
        self.assertIn("## rank 1: NCCL Flight Recorder\ndump in " + named["1"], stacks)
        # The FIFOs are not copied: only the work tree's regular files reach the log tree.
        self.assertFalse(os.path.exists(os.path.join(logs, os.listdir(logs)[0], "attempt_0/1/nccl_trace_rank_1.pipe")))

    def test_a_dump_that_takes_longer_than_the_stacks_is_waited_for(self):
        """torch 2.11 on an H100 wrote a 20-entry dump 4.4 s after reading the FIFO, which read it up to 1 s after
        the ask: past the stacks' 5 s. A 6 s dump is still waited for (up to 15 s), kept and named as written."""
        logs = self.path("logs")
        t0 = time.monotonic()
        r = self.recorder_job("hang", "--log-dir", logs, dump_delay="6")
        took = time.monotonic() - t0
        self.assertEqual(r.code, HUNG, r)
        named = dict(re.findall(r"NCCL Flight Recorder dump of rank (\d) in (\S+)", r.stderr.decode()))
        self.assertEqual(sorted(named), ["0", "1"], r)
        stacks_file = re.search(r"stacks in (\S+hang_stacks.txt)", r.stderr.decode()).group(1)
        with open(stacks_file) as f:
            stacks = f.read()
        self.assertNotIn("no dump written in time", stacks)
        self.assertIn("## rank 1: NCCL Flight Recorder\ndump in " + named["1"], stacks)
        for rank, path in named.items():
            with open(path, "rb") as f:
                self.assertEqual(pickle.load(f)["rank"], int(rank))
        self.assertLess(took, 25, "the wait for the dumps is bounded")

    def test_without_log_dir_the_dumps_are_kept_beside_the_stacks(self):
        r = self.recorder_job("hang")
        self.assertEqual(r.code, HUNG, r)
        named = dict(re.findall(r"NCCL Flight Recorder dump of rank (\d) in (\S+)", r.stderr.decode()))
        self.assertEqual(sorted(named), ["0", "1"], r)
        for path in named.values():
            self.assertTrue(path.startswith(self.tmp), path)  # the private temporary tree ($TMPDIR here)
            self.assertTrue(os.path.isfile(path), path)
            run_dir = os.path.dirname(os.path.dirname(os.path.dirname(path)))  # above attempt_0/<local rank>/
            self.assertEqual(stat.S_IMODE(os.stat(run_dir).st_mode), 0o700)

    def test_a_worker_without_a_fifo_costs_nothing(self):
        r = self.worker("beat=3", "@1:hang", "@0:beatfor=30", nproc=2, extra=("--hang-timeout", "1.5"))
        err = r.stderr.decode()
        self.assertEqual(r.code, HUNG, r)
        self.assertNotIn("Flight Recorder", err)
        self.assertNotIn("NCCL", err)
        stacks = re.search(r"stacks in (\S+)", err).group(1)
        with open(stacks) as f:
            self.assertNotIn("Flight Recorder", f.read())

    def test_a_fifo_whose_reader_is_gone_does_not_delay_the_teardown(self):
        proc = self.start("--nproc-per-node", 2, "--hang-timeout", "1.5", RECORDER, "gone", "--hung-rank", "1")
        seen = self.stderr_until(proc, b"capturing the stacks", timeout=30, why="no hang found")
        t0 = time.monotonic()
        out, rest = proc.communicate(timeout=30)
        teardown = time.monotonic() - t0
        err = (seen + rest).decode()
        self.assertEqual(proc.returncode, HUNG, err)
        self.assertLess(teardown, 5, err)  # ENXIO at once: no wait for a dump nobody will write
        self.assertNotIn("Flight Recorder", err)

    def test_a_pipe_file_the_user_set_is_kept_and_asked(self):
        self.env["TORCH_NCCL_DEBUG_INFO_PIPE_FILE"] = self.path("mine_")
        logs = self.path("logs")
        r = self.recorder_job("hang", "--log-dir", logs)
        self.assertEqual(r.code, HUNG, r)
        self.assertTrue(stat.S_ISFIFO(os.stat(self.path("mine_1.pipe")).st_mode))
        named = dict(re.findall(r"NCCL Flight Recorder dump of rank (\d) in (\S+)", r.stderr.decode()))
        self.assertEqual(sorted(named), ["0", "1"], r)
        with open(named["1"], "rb") as f:
            self.assertEqual(pickle.load(f)["pipe"], self.path("mine_1.pipe"))  # asked through the user's FIFO

    def test_a_job_without_hang_timeout_gets_no_flight_recorder_variables(self):
        r = self.worker("env=TORCH_NCCL_DEBUG_INFO_PIPE_FILE", "env=TORCH_NCCL_TRACE_BUFFER_SIZE", nproc=1)
        self.assertEqual(r.code, 0, r)
        self.assertIn("TORCH_NCCL_DEBUG_INFO_PIPE_FILE unset", r.stdout.decode())
        self.assertIn("TORCH_NCCL_TRACE_BUFFER_SIZE unset", r.stdout.decode())


if __name__ == "__main__":
    import unittest
    unittest.main()
