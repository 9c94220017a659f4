// What `ddprun --help` says beyond the options' own descriptions: one usage line naming PROGRAM, value names
// (N, SEC, DIR, HOST:PORT rather than CLI11's TEXT), and an epilog with the environment variables ddprun
// reads, the exit status in brief and two examples. The man page is generated from this text (help2man), and
// the bash completion reads the value names (DIR, FILE complete paths).
#pragma once

namespace CLI {
class App;
}

namespace ddprun::launcher {

// Call after every option is defined. An option taking a value that is missing from the table in
// help_text.cpp shows VALUE (a unit test refuses that: a new option must say what it takes).
void describe_help(CLI::App& app);

}  // namespace ddprun::launcher
