// Where a run keeps its files: per attempt, per local rank, stdout/stderr logs and the error file each
// worker may write (TORCHELASTIC_ERROR_FILE). With --log-dir the tree lives there and is kept:
//   <log-dir>/<run-id>_<6 random chars>/attempt_<n>/<local_rank>/{stdout.log,stderr.log,error.json}
// (torchrun's layout, so tools that read it keep working). Without --log-dir the same tree is made in
// $TMPDIR (else $XDG_RUNTIME_DIR, else /dev/shm, else /tmp) and removed when the agent ends, since only the
// error files are needed, and only until read.
//
// The files ddprun's loop reads or writes itself (error files, Python and hang stacks) always live in a
// private (0700) work tree on that local temporary base, never on --log-dir: a --log-dir on a file system
// that stops answering (a hard-mounted NFS server gone) would otherwise hold the loop in open(2), even for
// a lookup in a directory where a log file's create is stuck. The log files are created and written by
// their own threads (common/write_queue.hpp). With --log-dir the work tree is copied into the log tree
// when the agent ends (cleanup), so the log tree holds torchrun's layout in full.
#pragma once

#include <string>
#include <vector>

namespace ddprun::agent {

class RunLayout {
 public:
  // Creates the run directory. Throws ddprun::SystemError naming the path when it cannot.
  static RunLayout create(const std::string& log_dir, const std::string& run_id);
  RunLayout() = default;

  const std::string& root() const { return root_; }
  bool temporary() const { return temporary_; }

  // Creates attempt_<n>/<local_rank>/ of the work tree for every local rank, without an error file left from
  // an earlier round of the same attempt (an elastic re-form keeps the attempt). Throws ddprun::SystemError.
  void prepare_attempt(int attempt, int local_world_size) const;
  std::string worker_dir(int attempt, int local_rank) const;  // in the log tree: what users are shown
  // Files of the work tree (see above); `published` names where a work-tree file ends up for the user.
  std::string work_dir(int attempt, int local_rank) const;
  std::string error_file(int attempt, int local_rank) const { return work_dir(attempt, local_rank) + "/error.json"; }
  // The next round's variables for a worker that re-forms in place (DDPRUN_REFORM_FILE).
  static constexpr const char* kReformFileName = "reform.env";
  std::string reform_file(int attempt, int local_rank) const {
    return work_dir(attempt, local_rank) + "/" + kReformFileName;
  }
  std::string attempt_work_file(int attempt, const std::string& name) const;
  std::string published(const std::string& work_path) const;
  const std::string& work_root() const { return work_root_; }
  // Why the run directory is not in the first candidate base (a full /dev/shm, say); "" when it is.
  const std::string& note() const { return note_; }
  std::string stdout_file(int attempt, int local_rank) const { return worker_dir(attempt, local_rank) + "/stdout.log"; }
  std::string stderr_file(int attempt, int local_rank) const { return worker_dir(attempt, local_rank) + "/stderr.log"; }

  // Removes the tree if it is temporary (but the files asked to `keep`, and the private directories that
  // hold them); keeps it otherwise, with the work tree's files copied into it.
  void cleanup() const;
  // A file of a temporary tree the user must read after the run (a hang's stacks): it stays, in its private
  // (0700) directories, and nothing of it is ever made in the shared directory the tree lives in.
  void keep(const std::string& path) { kept_.push_back(path); }

 private:
  std::string root_;
  std::string work_root_;  // == root_ without --log-dir
  bool temporary_ = false;
  std::string note_;
  std::vector<std::string> kept_;
};

// Checks that `dir` exists (or can be created) and is writable, without leaving anything behind when it
// was not there before. Returns an empty string when fine, else what is wrong, fit for one line.
// may_be_missing: a directory not there yet passes when it can be made (--log-dir); else it must exist.
std::string check_writable_dir(const std::string& dir, bool may_be_missing = true);

}  // namespace ddprun::agent
