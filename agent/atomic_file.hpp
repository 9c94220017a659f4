// A small file written whole or not at all: a temporary file of this process's own in the same directory,
// renamed over the target, so a reader sees the old contents or the new, never a part. Used for what another
// process polls: the metrics textfile (node_exporter) and a worker's next round (re-forming in place).
#pragma once

#include <sys/types.h>

#include <string>

namespace ddprun::agent {

// "" when DIR/NAME now holds `text`, else why not (one line). The temporary name starts with a dot and ends in
// .tmp: node_exporter, which reads only *.prom, never sees it.
std::string write_file_atomically(const std::string& dir, const std::string& name, const std::string& text, mode_t mode);

}  // namespace ddprun::agent
