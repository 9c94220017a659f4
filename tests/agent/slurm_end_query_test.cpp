// What slurmctld's answer means for the exit code (agent/slurm_end_query.hpp): records as scontrol -o printed them
// on SLURM 22.05 (tests/slurm/test_jobs.py NodeFailureIsNotPreemption), trimmed to the fields that matter.
#include <doctest/doctest.h>

#include "agent/slurm_end_query.hpp"

using ddprun::agent::node_failure_in;

namespace {
const char* kJobCompleting =
    "JobId=379696 JobName=ddprun UserId=root(0) GroupId=root(0) JobState=COMPLETING Reason=NodeDown "
    "Dependency=(null) Requeue=1 Restarts=0 BatchFlag=0 ExitCode=0:0 NodeList=n[1-3]\n";
const char* kNodes =
    "NodeName=n1 Arch=x86_64 CoresPerSocket=1 CPUAlloc=0 State=IDLE ThreadsPerCore=1 Reason=(null)\n"
    "NodeName=n2 Arch=x86_64 CoresPerSocket=1 CPUAlloc=1 State=MIXED+COMPLETING ThreadsPerCore=1\n"
    "NodeName=n3 Arch=x86_64 CoresPerSocket=1 CPUAlloc=0 State=DOWN+NOT_RESPONDING ThreadsPerCore=1 "
    "Reason=Not responding [slurm@2026-12-07T07:11:14]\n";
}  // namespace

TEST_CASE("a node failure is read from the down node, whatever the job's transient state") {
  CHECK(node_failure_in(std::string(kJobCompleting) + kNodes) ==
        "SLURM ended the job for a node failure: n3 is DOWN (Not responding)");
  CHECK(node_failure_in("JobId=7 JobState=NODE_FAIL Reason=NodeDown NodeList=n[1-2]\n"
                        "NodeName=n2 State=DOWN+DRAIN Reason=slurmd killed [root@2026-12-07T07:13:16]\n"
                        "NodeName=n1 State=FAIL Reason=(null)\n") ==
        "SLURM ended the job for a node failure: n2 is DOWN (slurmd killed), n1 is FAIL");
  // NODE_FAIL with the nodes already back (or not asked): still a node failure.
  CHECK(node_failure_in("JobId=7 JobState=NODE_FAIL Reason=NodeDown\n") ==
        "SLURM ended the job for a node failure (JobState=NODE_FAIL)");
}

TEST_CASE("a preemption, a scancel, a time limit or nothing down is not a node failure") {
  for (const char* state : {"PREEMPTED", "CANCELLED", "TIMEOUT", "DEADLINE"})
    CHECK_FALSE(node_failure_in(std::string("JobId=7 JobState=") + state + " Reason=None\n" + kNodes));
  CHECK_FALSE(node_failure_in("JobId=7 JobState=COMPLETING Reason=None\nNodeName=n1 State=IDLE+DRAIN Reason=maint\n"));
  CHECK_FALSE(node_failure_in(""));  // scontrol not there, or killed at the limit
  CHECK_FALSE(node_failure_in("slurm_load_jobs error: Socket timed out on send/recv operation\n"));
}
